package prune

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/grants"
)

// access is what prune's account may do, read once per Run from SHOW
// GRANTS, so that a missing privilege fails before anything is counted or
// deleted (the dry run too) with the GRANT to run, not with the server's
// "command denied" halfway through.
type access struct {
	account string
	grants  []grants.Grant
	known   bool // false when SHOW GRANTS failed: the statements say it themselves
}

func (p *Pruner) access(ctx context.Context) access {
	account, err := grants.Account(ctx, p.db)
	if err != nil {
		p.log.Debug("prune: the account's privileges are not checked ahead", slog.Any("err", err))
		return access{}
	}
	lines, err := grants.Lines(ctx, p.db)
	if err != nil {
		p.log.Debug("prune: the account's privileges are not checked ahead: SHOW GRANTS failed", slog.Any("err", err))
		return access{}
	}
	return access{account: account, grants: grants.Parse(lines), known: true}
}

// need returns an error naming the GRANT to run when the account lacks one
// of privs on t, which prune needs to do what.
func (a access) need(t Table, what string, privs ...string) error {
	if !a.known {
		return nil
	}
	missing := grants.Missing(a.grants, t.Schema, t.Name, privs...)
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%s lacks %s on %s, which prune needs to %s; nothing was changed: run %s",
		a.account, strings.Join(missing, " and "), t.FullName(), what, grants.Statement(missing, t.Schema, t.Name, a.account))
}

// deniedHint is what to append to a statement's error when the server
// refused it for lack of a privilege (when SHOW GRANTS could not tell
// ahead).
func deniedHint(err error, t Table, privs ...string) string {
	if !grants.Denied(err) {
		return ""
	}
	return fmt.Sprintf(": grant prune's user %s on %s (GRANT %s ON %s TO <user>;)", strings.Join(privs, " and "), t.FullName(), strings.Join(privs, ", "), t.quoted())
}
