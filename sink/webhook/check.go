package webhook

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/redact"
	"github.com/outbox-relay/outbox-relay/sink"
)

// checkSource is the webhook kind's part of `outbox-relay check` (its
// sink.Kind's CheckSource): a sink with an endpoints table has it read as
// the relay will at start, and its rows' insecure settings reported.
func checkSource(ctx context.Context, db *sql.DB, cfg *config.Config, sc config.Sink) []sink.Finding {
	wc := Section(sc)
	if wc == nil || wc.EndpointsTable == nil {
		return nil
	}
	tc := wc.EndpointsTable.WithDefaults()
	f, rows := endpointsTableResult(ctx, db, cfg, sc, tc)
	out := append([]sink.Finding{f}, tableInsecureResults(sc.Name, tc, rows)...)
	if f.Status != sink.Failed {
		out = append(out, tenantIndexResult(ctx, db, sc.Name, tc)...)
	}
	return out
}

// endpointsTableResult reads a webhook sink's endpoints table as the relay
// will at start, and returns the usable rows with its result. A table that cannot be read FAILs (the relay does not
// start); bad rows WARN: the relay skips their endpoints (state invalid)
// and runs the others, and an UPDATE that fixes a row starts it, without
// a restart.
func endpointsTableResult(ctx context.Context, db *sql.DB, cfg *config.Config, sc config.Sink, tc TableConfig) (sink.Finding, []TableEndpoint) {
	sinkName := sc.Name
	rows, bad, err := tc.Load(ctx, db)
	if err != nil {
		fix := "make the table as deploy/outbox_endpoints.sql declares it"
		switch msg := err.Error(); {
		case strings.Contains(msg, "does not exist"):
			fix = "create it with deploy/outbox_endpoints.sql, or fix endpoints_table.table"
		case strings.Contains(msg, "GRANT"):
			fix = fmt.Sprintf("GRANT SELECT ON %s TO the relay's user", tc.Table)
		}
		return sink.Finding{Status: sink.Failed, Detail: fmt.Sprintf("sink %s: endpoints table: %v", sinkName, err), Fix: fix}, nil
	}
	if h := tc.TenantHeader; h != "" {
		found := false
		for _, t := range cfg.Tables {
			found = found || slices.Contains(t.Headers, h)
		}
		if !found {
			return sink.Finding{Status: sink.Failed,
				Detail: fmt.Sprintf("sink %s: endpoints_table.tenant_header %q is not a header of any outbox table, so no event has it and no endpoint with a tenant gets anything", sinkName, h),
				Fix:    fmt.Sprintf("add %q to tables[].headers (a column of the outbox table), or name the header that holds the tenant", h)}, rows
		}
	}
	static := NewStaticNames(Section(sc).Endpoints)
	var problems, fixes []string
	egress, clash := false, false
	for _, b := range bad {
		if _, ok := static.Taken(b.ID); ok {
			continue // named below, with the clash
		}
		problems = append(problems, b.Error())
		var ee *EgressError
		egress = egress || errors.As(b, &ee)
	}
	enabled, usable := 0, 0
	for _, r := range rows {
		if _, ok := static.Taken(r.ID); ok {
			continue
		}
		usable++
		if r.Enabled {
			enabled++
		}
	}
	for _, id := range append(RowIDs(rows), BadRowIDs(bad)...) {
		if name, ok := static.Taken(id); ok {
			clash = true
			problems = append(problems, fmt.Sprintf("endpoints table %s, row %q: has the name of endpoint %s/%s of the configuration; the relay refuses the row (the configured endpoint runs as configured)", tc.Table, id, sinkName, name))
		}
	}
	summary := fmt.Sprintf("sink %s: endpoints table %s: %d endpoints, %d enabled", sinkName, tc.Table, usable, enabled)
	if len(problems) == 0 {
		return sink.Finding{Status: sink.Passed, Detail: summary}, rows
	}
	if clash {
		fixes = append(fixes, "rename a row that has the name of an endpoint of the configuration (UPDATE … SET id = 'another-name')")
	}
	if egress {
		fixes = append(fixes, "for a url the egress policy refuses: correct the url, or, if the address is intended, add it to endpoints_table.defaults.egress.allow")
	}
	fixes = append(fixes, "fix each row named with an UPDATE: a running relay starts its endpoint at once, no restart needed")
	return sink.Finding{Status: sink.Warned,
		Detail: fmt.Sprintf("%s; %d row(s) cannot be used: the relay skips their endpoints (state invalid) and runs the others:\n%s", summary, len(problems), strings.Join(problems, "\n")),
		Fix:    strings.Join(fixes, "; ")}, rows
}

// tableInsecureResults reports what weakens the security of a webhook
// sink's endpoints table, read as rows: a row whose http:// url holds
// credentials, and signing secrets kept plain or as enc:v1 (not bound to
// their row), one WARN each, naming the rows, never a secret. (A credential
// header in endpoints_table.defaults is refused by the config.)
func tableInsecureResults(sinkName string, tc TableConfig, rows []TableEndpoint) []sink.Finding {
	var out []sink.Finding
	var plain, v1 []string
	for _, r := range rows {
		if u, err := url.Parse(r.Config.URL); err == nil && strings.EqualFold(u.Scheme, "http") && u.User != nil {
			out = append(out, sink.Finding{Insecure: true, Status: sink.Warned,
				Detail: fmt.Sprintf("sink %s: endpoints table %s, row %q: url %s is http://, so the credentials in the url cross the network in clear text", sinkName, tc.Table, r.ID, redact.URL(r.Config.URL)),
				Fix:    "use an https:// url in the row"})
		}
		if r.PlainSecrets {
			plain = append(plain, r.ID)
		}
		if r.V1Secrets {
			v1 = append(v1, r.ID)
		}
	}
	reencrypt := fmt.Sprintf("`outbox-relay endpoints encrypt-secret --table %s --id ID --url URL`", tc.Table)
	if len(plain) > 0 {
		out = append(out, sink.Finding{Insecure: true, Status: sink.Warned,
			Detail: fmt.Sprintf("sink %s: endpoints table %s holds plain signing secrets (rows %s): anyone who can read the table can sign as the relay", sinkName, tc.Table, strings.Join(plain, ", ")),
			Fix:    "encrypt each with " + reencrypt + ", store the enc:v2 value it prints, and set endpoints_table.secrets_key"})
	}
	if len(v1) > 0 {
		out = append(out, sink.Finding{Insecure: true, Status: sink.Warned,
			Detail: fmt.Sprintf("sink %s: endpoints table %s holds enc:v1 secrets (rows %s), which are not bound to their row: copied into another row, they decrypt there and sign its requests", sinkName, tc.Table, strings.Join(v1, ", ")),
			Fix:    "pipe each through " + reencrypt + " (it takes the enc:v1 value) and store the enc:v2 value it prints"})
	}
	return out
}
