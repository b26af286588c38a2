package relay_test

import (
	"path/filepath"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/mysqlprimary"
)

// A server that says "purged" (1236) although it still has the position —
// Dolt does when a dump races a commit — does not stop the sink: the relay
// checks the claim against the server's GTID state and reads on. A position
// the server really purged still stops it (TestMySQLPurgedGTIDs...).
func TestASpuriousPurgedErrorIsDoubleCheckedNotFatal(t *testing.T) {
	s := mysqlprimary.Start(t, mysqlprimary.Options{})
	cfg := mysqlRelayConfig(t, s, filepath.Join(t.TempDir(), "cp.json"), "earliest")
	out := &lines{}
	r := startMySQLRelay(t, cfg, out)
	s.Insert(mysqlprimary.OutboxRow(1, "e1", "order", "o1", "created", `{}`))
	waitIDs(t, out, "e1")
	s.FailNextDumps(2)
	s.KillConnections()
	s.Insert(mysqlprimary.OutboxRow(2, "e2", "order", "o1", "paid", `{}`))
	waitIDs(t, out, "e1", "e2")
	if err := r.stop(); err != nil {
		t.Fatalf("relay: %v", err)
	}
}
