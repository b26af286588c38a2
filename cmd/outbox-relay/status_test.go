package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

func TestStatusShowsEachSinksCheckpoint(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{ServerID: 12})
	srv.Exec(t, "CREATE DATABASE shop", "FLUSH BINARY LOGS")
	dir := t.TempDir()
	cpPath := filepath.Join(dir, "cp.json")
	cfgPath := filepath.Join(dir, "relay.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root}
tables: [{name: shop.outbox}]
checkpoint: {path: %s}
sinks: [{name: console, type: stdout}, {name: fresh, type: stdout}]
`, srv.Port, cpPath)), 0o600)
	st, err := checkpoint.OpenFile(cpPath)
	if err != nil {
		t.Fatal(err)
	}
	st.Save(context.Background(), "console", checkpoint.Checkpoint{Flavor: "mariadb",
		Position: event.Position{GTIDSet: "0-12-1", File: "binlog.000001", Pos: 400}, UpdatedAt: time.Now().Add(-time.Minute)})
	st.Save(context.Background(), "endpoint-gone", checkpoint.Checkpoint{Flavor: "mariadb",
		Position: event.Position{GTIDSet: "0-12-2", File: "binlog.000001", Pos: 500}, UpdatedAt: time.Now()})
	var out, errOut bytes.Buffer
	if code := mainCode(context.Background(), []string{"status", "--config", cfgPath}, &out, &errOut); code != 0 {
		t.Fatalf("status exited %d: %s", code, errOut.String())
	}
	s := out.String()
	for _, want := range []string{"now at gtid", "binlog.000001 … binlog.000002 (2 files)", "console", `gtid "0-12-1" (binlog.000001:400)`, "1m0s ago", "fresh", "(none: starts at checkpoint.start current)", `endpoint-gone (not in the config)  gtid "0-12-2"`} {
		if !strings.Contains(s, want) {
			t.Errorf("status output lacks %q:\n%s", want, s)
		}
	}
	if !strings.Contains(s, "ago  1") && !strings.Contains(s, "ago   1") {
		t.Errorf("status does not say the checkpoint is 1 binlog file behind:\n%s", s)
	}
}

func TestStatusShowsAGatewaysCursorsAndItsOldest(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{ServerID: 13})
	srv.Exec(t, "CREATE DATABASE shop")
	dir := t.TempDir()
	cpPath := filepath.Join(dir, "cp.json")
	cfgPath := filepath.Join(dir, "relay.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root}
tables: [{name: shop.outbox}]
checkpoint: {path: %s}
sinks: [{name: hooks, type: webhook, webhook: {endpoints: [{name: a, url: "https://a.example/"}, {name: b, url: "https://b.example/"}, {name: c, url: "https://c.example/"}],
  endpoints_table: {table: shop.outbox_endpoints}}}]
`, srv.Port, cpPath)), 0o600)
	// Rows that do not run: off, invalid, and one with a configured name.
	srv.Exec(t, "USE shop", webhook.EndpointsTableSchema,
		"INSERT INTO shop.outbox_endpoints (id, url, enabled) VALUES ('quiet', 'https://q.example/', 0), ('typo', 'http://10.1.2.3/', 1), ('a', 'https://x.example/', 1)")
	st, err := checkpoint.OpenFile(cpPath)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	st.Save(context.Background(), "hooks/a", checkpoint.Checkpoint{Flavor: "mariadb", CommitTime: now,
		Position: event.Position{GTIDSet: "0-13-9", File: "binlog.000001", Pos: 900}, UpdatedAt: now})
	st.Save(context.Background(), "hooks/b", checkpoint.Checkpoint{Flavor: "mariadb", CommitTime: now.Add(-time.Hour),
		Position: event.Position{GTIDSet: "0-13-2", File: "binlog.000001", Pos: 200}, UpdatedAt: now, Disabled: "failing since yesterday"})
	// c has no cursor of its own: it is at the sink's shared cursor.
	st.Save(context.Background(), gateway.SharedKey("hooks"), checkpoint.Checkpoint{Flavor: "mariadb", CommitTime: now,
		Position: event.Position{GTIDSet: "0-13-7", File: "binlog.000001", Pos: 700}, UpdatedAt: now})
	var out, errOut bytes.Buffer
	if code := mainCode(context.Background(), []string{"status", "--config", cfgPath}, &out, &errOut); code != 0 {
		t.Fatalf("status exited %d: %s", code, errOut.String())
	}
	s := out.String()
	for _, want := range []string{"hooks/b (disabled: failing since yesterday)", `hooks/c (at its webhook sink's shared cursor)  gtid "0-13-7"`,
		"hooks/quiet off: its row has enabled = 0", `hooks/typo invalid: endpoints table shop.outbox_endpoints, row "typo"`, "endpoints_table.defaults.egress.allow",
		`row "a" refused: endpoint hooks/a is in the configuration`, `webhook sink hooks: 3 endpoint cursors, 1 disabled; the binlog must go back to its oldest, hooks/b at gtid "0-13-2"`} {
		if !strings.Contains(s, want) {
			t.Errorf("status output lacks %q:\n%s", want, s)
		}
	}
}
