package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/console"
)

// consoleUsage is `outbox-relay console --help`.
const consoleUsage = `Usage: outbox-relay console <token|link> [flags]

Credentials of the gateway's console (console: in the config, docs/console.md).

  token  print a new random token, once, and its hash line for console.tokens:
         [--name NAME] [--tenant TENANT] (a tenant token sees only that tenant's
         endpoints, attempts and dead letters)
  link   print a signed link to one tenant's view of the console, valid for
         --ttl (default 15m): --config FILE --tenant TENANT [--ttl 15m]
         [--base https://console.example.com]; the key is read from the
         environment variable console.link_key_env names
`

// consoleCmd makes the console's credentials: tokens and tenant links
// (docs/console.md).
func consoleCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if help, err := verbHelp(args, consoleUsage, stdout, stderr); help {
		return err
	}
	switch args[0] {
	case "token":
		fs := newFlags("console token", "console token [--name NAME] [--tenant TENANT]", stderr)
		name := fs.String("name", "", "the token's name in the audit log (default: ops, or the tenant)")
		tenant := fs.String("tenant", "", "make a tenant token: it sees only this tenant's endpoints")
		if err := parse(fs, args[1:]); err != nil {
			return err
		}
		if *name == "" {
			*name = "ops"
			if *tenant != "" {
				*name = "tenant-" + *tenant
			}
		}
		token, hash := console.NewToken()
		fmt.Fprintf(stdout, "token (shown once; give it to whoever uses the console, keep it out of the config):\n  %s\n\nadd to console.tokens:\n  - name: %s\n    hash: %s\n", token, *name, hash)
		if *tenant != "" {
			fmt.Fprintf(stdout, "    tenant: %s\n", *tenant)
		}
		return nil
	case "link":
		fs := newConfigFlags("console link", "console link --config FILE --tenant TENANT [--ttl 15m] [--base URL]", stderr)
		tenant := fs.String("tenant", "", "the tenant whose view the link opens (required)")
		ttl := fs.Duration("ttl", 15*time.Minute, "how long the link is valid (at most 24h)")
		base := fs.String("base", "", "the console's address as browsers reach it (default: http:// and console.listen)")
		if err := parse(fs.FlagSet, args[1:]); err != nil {
			return err
		}
		if *tenant == "" {
			return errors.New("--tenant is required: the tenant whose view the link opens")
		}
		if *ttl <= 0 || *ttl > 24*time.Hour {
			return fmt.Errorf("--ttl %s: use a duration above 0 and at most 24h (a link is a short-lived credential)", *ttl)
		}
		cfg, err := fs.load("console")
		if err != nil {
			return err
		}
		if cfg.Console.Listen == "" {
			return errors.New("console.listen is not set: the console is off, so a link would open nothing")
		}
		key := []byte(os.Getenv(cfg.Console.LinkKeyEnv))
		if err := console.CheckKey(key, cfg.Console.LinkKeyEnv); err != nil {
			return fmt.Errorf("%w (the running relay's key: a link signed with another does not open)", err)
		}
		b := *base
		if b == "" {
			b = "http://" + cfg.Console.Listen
		}
		fmt.Fprintln(stdout, strings.TrimSuffix(b, "/")+console.LinkPath(key, *tenant, time.Now().Add(*ttl)))
		return nil
	}
	return unknownVerb("console", args[0], consoleUsage, stderr)
}
