package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

// endpointRow is what the test reads back of an endpoints table row.
type endpointRow struct {
	url, secrets       string
	tenant, eventTypes sql.NullString
	rateLimit          sql.NullFloat64
	enabled            bool
}

// endpoints add, update, rotate-secret and delete write a real MariaDB
// endpoints table through the console's table writer, each with the
// console's audit line; they refuse what the console refuses: an endpoint
// of the configuration, an id in a tenant's namespace, a row the relay
// could not use, a row that exists or does not.
func TestEndpointsTableCommands(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{ServerID: 44})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(webhook.EndpointsTableSchema); err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, "relay.yaml", fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d}
tables: [{name: %[3]s.outbox, headers: [tenant]}]
checkpoint: {path: /nonexistent/checkpoints.json}
sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints: [{name: static, url: "https://static.example/in"}]
      endpoints_table: {table: %[3]s.outbox_endpoints, tenant_header: tenant}
  - {name: out, type: stdout}
log: {level: info}
`, srv.Port, testserver.ServerID(), dbname))
	run := func(t *testing.T, args ...string) (int, string, string) {
		t.Helper()
		return runMain(t, context.Background(), append(append([]string{"endpoints"}, args[:1]...), append([]string{"--config", cfg}, args[1:]...)...)...)
	}
	read := func(t *testing.T, id string) (endpointRow, error) {
		t.Helper()
		var r endpointRow
		err := db.QueryRow("SELECT url, COALESCE(secrets, ''), tenant, event_types, rate_limit, enabled FROM outbox_endpoints WHERE id = ?", id).
			Scan(&r.url, &r.secrets, &r.tenant, &r.eventTypes, &r.rateLimit, &r.enabled)
		return r, err
	}
	audited := func(t *testing.T, stderr, action, target, result string) {
		t.Helper()
		for _, line := range strings.Split(stderr, "\n") {
			if strings.Contains(line, "console audit") && strings.Contains(line, "component=cli") && strings.Contains(line, "who=cli:") &&
				strings.Contains(line, fmt.Sprintf("action=%q", action)) && strings.Contains(line, "target="+target) && strings.Contains(line, "result="+result) {
				return
			}
		}
		t.Errorf("no audit line of %s %s with result %s in:\n%s", action, target, result, stderr)
	}

	code, out, stderr := run(t, "add", "hooks/acme", "--url", "https://acme.example/in", "--tenant", "t1", "--event-type", "order.*", "--rate-limit", "5")
	if code != 0 {
		t.Fatalf("add: exit %d: %s", code, stderr)
	}
	first := strings.TrimSpace(out)
	row, err := read(t, "acme")
	if err != nil || !strings.HasPrefix(first, "whsec_") || row.url != "https://acme.example/in" || row.tenant.String != "t1" ||
		row.eventTypes.String != "order.*" || row.rateLimit.Float64 != 5 || !row.enabled || row.secrets != first {
		t.Fatalf("add printed %q and wrote %+v (%v)", out, row, err)
	}
	audited(t, stderr, "create endpoint", "hooks/acme", "ok")

	if code, _, stderr = run(t, "update", "hooks/acme", "--url", "https://acme.example/v2", "--rate-limit", ""); code != 0 {
		t.Fatalf("update: exit %d: %s", code, stderr)
	}
	row, err = read(t, "acme")
	if err != nil || row.url != "https://acme.example/v2" || row.tenant.String != "t1" || row.eventTypes.String != "order.*" || row.rateLimit.Valid {
		t.Fatalf("update wrote %+v (%v); want the new url, no rate limit, the rest kept", row, err)
	}
	audited(t, stderr, "update endpoint", "hooks/acme", "ok")

	code, out, stderr = run(t, "rotate-secret", "hooks/acme", "--keep-old")
	second := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(second, "whsec_") || second == first {
		t.Fatalf("rotate-secret: exit %d, printed %q: %s", code, out, stderr)
	}
	if row, err = read(t, "acme"); err != nil || row.secrets != second+" "+first {
		t.Fatalf("rotate-secret --keep-old left secrets %q (%v); want the new one, then the old", row.secrets, err)
	}
	audited(t, stderr, "rotate secret", "hooks/acme", "ok")

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"an endpoint of the configuration is not updated", []string{"update", "hooks/static", "--url", "https://x.example/"}, "is in the configuration"},
		{"an endpoint of the configuration is not deleted", []string{"delete", "hooks/static"}, "is in the configuration"},
		{"a row does not take the name of an endpoint of the configuration", []string{"add", "hooks/static", "--url", "https://x.example/"}, "static"},
		{"an id in a tenant's namespace is refused", []string{"add", "hooks/t0123456789abcdef.x", "--url", "https://x.example/"}, "namespace of another tenant"},
		{"a url the relay would not use is refused", []string{"add", "hooks/bad", "--url", "ftp://x.example/"}, "url"},
		{"a row that exists is not added again", []string{"add", "hooks/acme", "--url", "https://x.example/"}, "exists"},
		{"a row that does not exist is not updated", []string{"update", "hooks/nope", "--url", "https://x.example/"}, "no such endpoint row"},
		{"a sink without an endpoints table", []string{"delete", "out/acme"}, "no webhook sink \"out\""},
		{"an endpoint not named as SINK/ID", []string{"delete", "acme"}, "SINK/ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := run(t, tc.args...)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want a failure naming %q", code, stderr, tc.want)
			}
		})
	}
	for _, verb := range []string{"add", "update", "delete", "rotate-secret"} {
		code, out, stderr := runMain(t, context.Background(), "endpoints", verb, "--help")
		if code != 0 || !strings.Contains(out+stderr, "Usage: outbox-relay endpoints "+verb+" --config FILE SINK/ID") {
			t.Errorf("endpoints %s --help: exit %d:\n%s%s", verb, code, out, stderr)
		}
	}
	if _, err := read(t, "static"); !errors.Is(err, sql.ErrNoRows) {
		t.Errorf("a refused add wrote the row static: %v", err)
	}

	if code, out, stderr = run(t, "delete", "hooks/acme"); code != 0 {
		t.Fatalf("delete: exit %d: %s", code, stderr)
	}
	if _, err := read(t, "acme"); !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("delete left the row: %v", err)
	}
	audited(t, stderr, "delete endpoint", "hooks/acme", "ok")
}
