package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// sqlBlock returns the statements of the first ```sql block after heading
// in docs/source.md, the password '...' replaced by password.
func sqlBlock(t *testing.T, heading, password string) []string {
	t.Helper()
	b, err := os.ReadFile("../../docs/source.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("docs/source.md has no %q section", heading)
	}
	_, block, _ := strings.Cut(after, "```sql\n")
	block, _, _ = strings.Cut(block, "```")
	var out []string
	for _, l := range strings.Split(block, "\n") {
		if l, _, _ = strings.Cut(l, "--"); strings.TrimSpace(l) != "" {
			out = append(out, strings.ReplaceAll(strings.TrimSuffix(strings.TrimSpace(l), ";"), "'...'", "'"+password+"'"))
		}
	}
	if len(out) == 0 {
		t.Fatalf("docs/source.md's %q section has no SQL", heading)
	}
	return out
}

// The relay runs, hands over to a standby and passes check as a user given
// exactly the documented grants (docs/source.md: the relay's user, the
// checkpoint database), checkpoints and dead letters in MySQL; a user
// without the checkpoint database's grants is told the GRANT it lacks, at
// start and by check, not to restore a backup.
func TestRelayRunsWithOnlyTheDocumentedGrants(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{ServerID: 15})
	srv.Exec(t, "CREATE DATABASE shop",
		"CREATE TABLE shop.outbox (id CHAR(36) PRIMARY KEY, aggregatetype VARCHAR(64) NOT NULL, aggregateid VARCHAR(64) NOT NULL, type VARCHAR(64) NOT NULL, payload JSON NOT NULL, created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))")
	srv.Exec(t, sqlBlock(t, "The relay's user", "relay-pw-1")...)
	srv.Exec(t, sqlBlock(t, "The checkpoint database", "relay-pw-1")...)
	config := func(user string) string {
		return writeFile(t, "relay-"+user+".yaml", fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: %s, password: relay-pw-1, server_id: %d}
tables: [{name: shop.outbox}]
checkpoint: {store: mysql, dsn: "%s:relay-pw-1@tcp(127.0.0.1:%d)/outbox_relay", interval: 100ms, lock_timeout: 2s, start: earliest}
dead_letter: {store: mysql}
sinks: [{name: out, type: stdout}]
`, srv.Port, user, testserver.ServerID(), user, srv.Port))
	}
	cfg := config("relay")
	insert := func(id string) {
		srv.Exec(t, fmt.Sprintf(`INSERT INTO shop.outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('%s', 'order', 'a1', 'created', '{}')`, id))
	}
	start := func() (stop func() int, out, errOut *syncBuffer) {
		ctx, cancel := context.WithCancel(context.Background())
		out, errOut = &syncBuffer{}, &syncBuffer{}
		done := make(chan int, 1)
		go func() { done <- mainCode(ctx, []string{"run", "--config", cfg}, out, errOut) }()
		return func() int { cancel(); return <-done }, out, errOut
	}
	wait := func(out, errOut *syncBuffer, id string) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !strings.Contains(out.String(), id); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("event %s not delivered:\n%s", id, errOut.String())
			}
		}
	}
	stopA, outA, errA := start()
	insert("ev-1")
	wait(outA, errA, "ev-1")
	stopB, outB, errB := start() // the standby: waits for A's lock
	if code := stopA(); code != 0 {
		t.Fatalf("the active relay exited %d:\n%s", code, errA.String())
	}
	insert("ev-2")
	wait(outB, errB, "ev-2")
	if code := stopB(); code != 0 {
		t.Fatalf("the relay that took over exited %d:\n%s", code, errB.String())
	}
	if strings.Contains(outB.String(), "ev-1") {
		t.Errorf("the relay that took over sent ev-1 again: the checkpoint was not saved")
	}
	code, stdout, stderr := runMain(t, context.Background(), "check", "--config", cfg)
	if code != 0 || !strings.Contains(stdout, "PASS  checkpoint_available") {
		t.Fatalf("check as the documented user exited %d:\n%s%s", code, stdout, stderr)
	}

	// A user with the source's grants but none on the checkpoint database.
	srv.Exec(t, "CREATE USER 'nocp'@'%' IDENTIFIED BY 'relay-pw-1'",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'nocp'@'%'",
		"GRANT SELECT ON shop.outbox TO 'nocp'@'%'")
	cfg = config("nocp")
	want := "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER ON `outbox_relay`.* TO 'nocp'@'%'"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code, _, stderr = runMain(t, ctx, "run", "--config", cfg)
	if code == 0 || !strings.Contains(stderr, want) {
		t.Errorf("run without the checkpoint database's grants exited %d and did not name %q:\n%s", code, want, stderr)
	}
	code, stdout, stderr = runMain(t, context.Background(), "check", "--config", cfg)
	if code != 1 || !strings.Contains(stdout, want) || strings.Contains(stdout, "backup") {
		t.Errorf("check without the checkpoint database's grants exited %d, want 1 naming %q and no backup:\n%s%s", code, want, stdout, stderr)
	}
}

// prune --dry-run works on the outbox table getting-started creates.
func TestPruneDryRunOnTheGettingStartedTable(t *testing.T) {
	b, err := os.ReadFile("../../docs/getting-started.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n## The outbox table\n")
	if !ok {
		t.Fatal(`docs/getting-started.md has no "The outbox table" section`)
	}
	_, block, _ := strings.Cut(after, "```sql\n")
	block, _, _ = strings.Cut(block, "```")
	var create strings.Builder
	for _, l := range strings.Split(block, "\n") {
		l, _, _ = strings.Cut(l, "--")
		create.WriteString(l + "\n")
	}
	stmt := strings.Replace(strings.TrimSpace(create.String()), "CREATE TABLE outbox", "CREATE TABLE shop.outbox", 1)
	if !strings.Contains(stmt, "CREATE TABLE shop.outbox") {
		t.Fatalf("no CREATE TABLE outbox in getting-started's block:\n%s", block)
	}
	srv := testserver.Start(t, testserver.Options{})
	srv.Exec(t, "CREATE DATABASE shop", strings.TrimSuffix(stmt, ";"),
		"INSERT INTO shop.outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('e1', 'order', 'a1', 'created', '{}')")
	cfg := writeFile(t, "relay.yaml", fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d}
tables: [{name: shop.outbox}]
checkpoint: {path: %s/cp.json}
sinks: [{name: out, type: stdout}]
`, srv.Port, testserver.ServerID(), t.TempDir()))
	code, stdout, stderr := runMain(t, context.Background(), "prune", "--config", cfg, "--dry-run")
	if code != 0 || strings.Contains(stderr, "has no column") {
		t.Fatalf("prune --dry-run on getting-started's table exited %d:\n%s%s", code, stdout, stderr)
	}
}
