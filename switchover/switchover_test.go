package switchover

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/sink"
	_ "github.com/outbox-relay/outbox-relay/sink/all" // the config names a stdout sink
)

// captureSink records what it is asked to write.
type captureSink struct{ got []string }

func (c *captureSink) Connect(context.Context) error { return nil }
func (c *captureSink) Close(context.Context) error   { return nil }
func (c *captureSink) Write(_ context.Context, b []*event.Event) error {
	for _, e := range b {
		c.got = append(c.got, e.ID)
	}
	return nil
}

// The claim sends the rows that are the relay's (pending now claimed,
// already claimed, no longer in the table, of a table not under
// switch-over) in order, and drops those the poller claimed; the rows it
// claimed are marked, the poller's are not touched. An account without
// UPDATE is refused at start with the GRANT to run.
func TestClaimSinkSendsOnlyTheRelaysRows(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(`CREATE TABLE outbox (id BIGINT PRIMARY KEY, status ENUM('pending','processing','published','relayed') NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO outbox VALUES (1,'pending'),(2,'processing'),(3,'published'),(4,'relayed'),(5,'pending')`); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root}
tables: [{name: %s.outbox, switch_over: {}}, {name: %s.other}]
checkpoint: {path: /tmp/unused.json}
sinks: [{name: out, type: stdout}]
`, srv.Port, dbname, dbname)))
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(context.Background(), db, cfg); err != nil {
		t.Fatalf("root: %v", err)
	}
	out := &captureSink{}
	c := &Sink{Sink: out, name: "out", db: db, tables: Tables(cfg), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ev := func(table, id string) *event.Event { return &event.Event{ID: id, Table: dbname + "." + table} }
	batch := []*event.Event{ev("outbox", "1"), ev("outbox", "2"), ev("other", "2"), ev("outbox", "3"), ev("outbox", "4"), ev("outbox", "6"), ev("outbox", "5")}
	if err := c.Write(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	if want := []string{"1", "2", "4", "6", "5"}; !slices.Equal(out.got, want) {
		t.Errorf("sent %v, want %v (the other table's 2, not the poller's 2 and 3)", out.got, want)
	}
	status := map[int]string{}
	rows, err := db.Query(`SELECT id, status FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int
		var st string
		_ = rows.Scan(&id, &st)
		status[id] = st
	}
	rows.Close()
	want := map[int]string{1: "relayed", 2: "processing", 3: "published", 4: "relayed", 5: "relayed"}
	for id, st := range want {
		if status[id] != st {
			t.Errorf("row %d: status %q, want %q", id, status[id], st)
		}
	}

	srv.Exec(t, "CREATE USER 'claimer'@'%' IDENTIFIED BY 'pw'", "GRANT SELECT ON `"+dbname+"`.* TO 'claimer'@'%'")
	t.Cleanup(func() { srv.Exec(t, "DROP USER 'claimer'@'%'") })
	ro, err := sql.Open("mysql", strings.Replace(srv.DSN(dbname), "root@", "claimer:pw@", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	err = Check(context.Background(), ro, cfg)
	grant := "GRANT UPDATE ON `" + dbname + "`.`outbox` TO 'claimer'@'%';"
	if err == nil || !strings.Contains(err.Error(), grant) {
		t.Errorf("without UPDATE: got %v, want an error with %q", err, grant)
	}
}

// ownedSink is a captureSink of tenant acme.
type ownedSink struct{ captureSink }

func (*ownedSink) Tenant() string { return "acme" }

// The claiming sink keeps the tenant of the sink it wraps, so its dead
// letters are that tenant's.
func TestTheClaimingSinkKeepsItsTenant(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	if got := sink.TenantOf(NewSink(&ownedSink{}, "hooks/orders", nil, nil, nil, log)); got != "acme" {
		t.Errorf("the claiming sink's tenant is %q, want acme", got)
	}
	if got := sink.TenantOf(NewSink(&captureSink{}, "kafka", nil, nil, nil, log)); got != "" {
		t.Errorf("a claiming sink of no tenant has tenant %q", got)
	}
}
