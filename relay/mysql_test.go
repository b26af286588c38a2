package relay_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/event/jsonline"
	"github.com/outbox-relay/outbox-relay/internal/mysqlprimary"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/position"
	"github.com/outbox-relay/outbox-relay/relay"
)

// The MySQL lane: the relay against the scripted MySQL 8 primary
// (internal/mysqlprimary), for what MariaDB cannot show — GTID sets and
// their containment across a failover, XA_PREPARE, tagged and anonymous
// GTIDs, TRANSACTION_PAYLOAD, a server that rejects the dump.

// mysqlRelayConfig is a relay reading s's default outbox table (app.outbox)
// into one stdout sink, with its checkpoint at cpPath.
func mysqlRelayConfig(t *testing.T, s *mysqlprimary.Server, cpPath, start string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: %s, password: %s, server_id: %d, heartbeat: 1s, max_reconnect_backoff: 300ms}
tables: [{name: app.outbox}]
checkpoint: {path: %s, interval: 50ms, start: %s}
delivery: {linger: 1ms}
sinks: [{name: out, type: stdout}]
`, s.Port(), s.User(), s.Password(), testserver.ServerID(), cpPath, start)))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// mysqlRun is a relay running in the background.
type mysqlRun struct {
	*run
	t   *testing.T
	out *lines
}

func startMySQLRelay(t *testing.T, cfg *config.Config, out *lines) *mysqlRun {
	t.Helper()
	r := &mysqlRun{run: startRelay(t, cfg, relay.Options{Stdout: out, Logger: testLogger()}), t: t, out: out}
	t.Cleanup(func() { r.stop() })
	return r
}

// stop cancels the relay (as SIGTERM does) and returns its error, nil for a
// clean stop.
func (r *mysqlRun) stop() error {
	r.t.Helper()
	return r.run.stop(r.t)
}

// failed waits for the relay to stop by itself and returns its error.
func (r *mysqlRun) failed() error {
	r.t.Helper()
	err, ok := r.exited(20 * time.Second)
	if !ok {
		r.t.Fatalf("the relay did not stop within 20s; delivered %v", ids(r.out.events(r.t)))
	}
	if err == nil {
		r.t.Fatal("the relay stopped without an error")
	}
	return err
}

// waitIDs waits until the events with want's ids were all delivered and
// returns every line so far.
func waitIDs(t *testing.T, out *lines, want ...string) []jsonline.Line {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := out.events(t)
		have := map[string]bool{}
		for _, l := range got {
			have[l.ID] = true
		}
		missing := 0
		for _, id := range want {
			if !have[id] {
				missing++
			}
		}
		if missing == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 20s for %v; delivered %v", want, ids(got))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ids(ls []jsonline.Line) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.ID
	}
	return out
}

// loadCheckpoint reads sink out's checkpoint from the file.
func loadCheckpoint(t *testing.T, path string) checkpoint.Checkpoint {
	t.Helper()
	st, err := checkpoint.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cp, err := st.Load(context.Background(), "out")
	if err != nil {
		t.Fatalf("load checkpoint: %v", err)
	}
	return cp
}

// waitCheckpoint waits until the saved checkpoint satisfies ok.
func waitCheckpoint(t *testing.T, path string, ok func(checkpoint.Checkpoint) bool) checkpoint.Checkpoint {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := checkpoint.OpenFile(path)
		if err == nil {
			cp, err := st.Load(context.Background(), "out")
			st.Close()
			if err == nil && ok(cp) {
				return cp
			}
			if time.Now().After(deadline) {
				t.Fatalf("checkpoint %+v (%v) not reached within 20s", cp, err)
			}
		} else if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exactlyOnce checks that out holds each of want exactly once, in this
// order, and nothing else.
func exactlyOnce(t *testing.T, out []jsonline.Line, want ...string) {
	t.Helper()
	if got := ids(out); !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want exactly %v", got, want)
	}
}

func row(seq int64, id string) []any {
	return mysqlprimary.OutboxRow(seq, id, "order", "o1", "created", fmt.Sprintf(`{"id": %q}`, id))
}

// 1. start: earliest on a MySQL primary with nothing purged starts by GTID
// from the empty set, so the checkpoints are GTID sets from the first
// transaction on (not file/position forever after).
func TestMySQLEarliestWithEmptyPurgedSavesGTIDSets(t *testing.T) {
	const u = "11111111-0000-0000-0000-000000000001"
	s := mysqlprimary.Start(t, mysqlprimary.Options{ServerUUID: u})
	g1 := s.Insert(row(1, "e1"))
	s.Insert(row(2, "e2"), row(3, "e3"))
	s.Exec("CREATE TABLE app.other (a INT)")
	if s.GTIDPurged() != "" {
		t.Fatalf("gtid_purged %q, want empty", s.GTIDPurged())
	}
	cp := filepath.Join(t.TempDir(), "cp.json")
	out := &lines{}
	r := startMySQLRelay(t, mysqlRelayConfig(t, s, cp, "earliest"), out)
	got := waitIDs(t, out, "e1", "e2", "e3")
	if got[0].GTID != g1 || got[0].BinlogFile != "binlog.000001" || got[0].BinlogPos == 0 {
		t.Errorf("first event's source: gtid %q %s:%d, want gtid %s", got[0].GTID, got[0].BinlogFile, got[0].BinlogPos, g1)
	}
	s.Insert(row(4, "e4"))
	waitIDs(t, out, "e4")
	waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool { return c.Position.GTIDSet == u+":1-4" })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	c := loadCheckpoint(t, cp)
	if c.Flavor != "mysql" || c.Position.GTIDSet != u+":1-4" || c.Position.File != "binlog.000001" {
		t.Fatalf("checkpoint %+v, want flavor mysql and GTID set %s:1-4", c, u)
	}
	exactlyOnce(t, out.events(t), "e1", "e2", "e3", "e4")

	// The start itself was saved as the empty set at the start of the file
	// (a restart before the first transaction resumes there), and a restart
	// now resumes by GTID: nothing again, then what comes next.
	r = startMySQLRelay(t, mysqlRelayConfig(t, s, cp, "earliest"), out)
	s.Insert(row(5, "e5"))
	waitIDs(t, out, "e5")
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, out.events(t), "e1", "e2", "e3", "e4", "e5")
}

// 2. Failover to a promoted replica with another server_uuid whose
// executed set contains the checkpoint: the relay resumes there by GTID
// containment, with nothing lost and nothing delivered twice.
func TestMySQLFailoverToAReplicaWithAnotherUUID(t *testing.T) {
	const a, b = "22222222-0000-0000-0000-00000000000a", "22222222-0000-0000-0000-00000000000b"
	primary := mysqlprimary.Start(t, mysqlprimary.Options{ServerUUID: a, ServerID: 1})
	primary.Insert(row(1, "e1"))
	primary.Insert(row(2, "e2"))
	cp := filepath.Join(t.TempDir(), "cp.json")
	out := &lines{}
	r := startMySQLRelay(t, mysqlRelayConfig(t, primary, cp, "earliest"), out)
	waitIDs(t, out, "e1", "e2")
	primary.Insert(row(3, "e3"))
	waitIDs(t, out, "e3")
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if c := loadCheckpoint(t, cp); c.Position.GTIDSet != a+":1-3" || c.ServerUUID != a {
		t.Fatalf("checkpoint on the old primary %+v", c)
	}
	// Committed on the old primary after the relay stopped, replicated
	// before the failover.
	primary.Insert(row(4, "e4"))
	promoted := primary.StartReplica(t, mysqlprimary.Options{ServerUUID: b, ServerID: 2}, "")
	primary.Close()
	gb := promoted.Insert(row(5, "e5"))

	r = startMySQLRelay(t, mysqlRelayConfig(t, promoted, cp, "earliest"), out)
	got := waitIDs(t, out, "e4", "e5")
	promoted.Insert(row(6, "e6"))
	waitIDs(t, out, "e6")
	waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool { return c.Position.GTIDSet == a+":1-4,"+b+":1-2" })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, out.events(t), "e1", "e2", "e3", "e4", "e5", "e6")
	if got[4].GTID != gb || got[3].GTID != a+":4" {
		t.Errorf("GTIDs after failover: %q, %q; want %s:4, %s", got[3].GTID, got[4].GTID, a, gb)
	}
	if c := loadCheckpoint(t, cp); c.ServerUUID != b {
		t.Errorf("checkpoint after failover names server %q, want the promoted %s", c.ServerUUID, b)
	}
}

// 3. Failover to a server that never executed some GTIDs of the
// checkpoint (a lagging replica): the sink stops with an error naming them
// and the recovery, and nothing is delivered from that server.
func TestMySQLFailoverToAServerLackingCheckpointGTIDsStops(t *testing.T) {
	const a, b = "33333333-0000-0000-0000-00000000000a", "33333333-0000-0000-0000-00000000000b"
	primary := mysqlprimary.Start(t, mysqlprimary.Options{ServerUUID: a, ServerID: 1})
	for i := range 4 {
		primary.Insert(row(int64(i+1), fmt.Sprintf("e%d", i+1)))
	}
	cp := filepath.Join(t.TempDir(), "cp.json")
	out := &lines{}
	r := startMySQLRelay(t, mysqlRelayConfig(t, primary, cp, "earliest"), out)
	waitIDs(t, out, "e1", "e2", "e3", "e4")
	waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool { return c.Position.GTIDSet == a+":1-4" })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	behind := primary.StartReplica(t, mysqlprimary.Options{ServerUUID: b, ServerID: 2}, a+":3-4")
	behind.Insert(row(9, "wrong-1")) // b:1, after a:2 on this server

	before := len(out.events(t))
	r = startMySQLRelay(t, mysqlRelayConfig(t, behind, cp, "earliest"), out)
	err := r.failed()
	if !errors.Is(err, position.ErrNotInHistory) {
		t.Fatalf("relay stopped with %v, want position.ErrNotInHistory", err)
	}
	for _, want := range []string{"sink out", "2 transaction(s) never executed on this server: " + a + ":3-4", "point the relay at a server that has executed them", "remove the sink's checkpoint"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if got := out.events(t)[before:]; len(got) != 0 {
		t.Errorf("delivered %v from a server lacking the checkpoint's GTIDs", ids(got))
	}
	if c := loadCheckpoint(t, cp); c.Position.GTIDSet != a+":1-4" {
		t.Errorf("checkpoint changed to %+v", c)
	}
}

// 4. The server purged GTIDs the checkpoint lacks: a clear stop listing
// them, never a silent skip.
func TestMySQLPurgedGTIDsTheCheckpointLacksStop(t *testing.T) {
	const a = "44444444-0000-0000-0000-00000000000a"
	s := mysqlprimary.Start(t, mysqlprimary.Options{ServerUUID: a})
	s.Insert(row(1, "e1"))
	s.Insert(row(2, "e2"))
	cp := filepath.Join(t.TempDir(), "cp.json")
	out := &lines{}
	r := startMySQLRelay(t, mysqlRelayConfig(t, s, cp, "earliest"), out)
	waitIDs(t, out, "e1", "e2")
	waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool { return c.Position.GTIDSet == a+":1-2" })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	s.Insert(row(3, "lost-3"))
	s.Insert(row(4, "lost-4"))
	if p := s.Purge(""); p != a+":1-4" {
		t.Fatalf("gtid_purged %q", p)
	}
	s.Insert(row(5, "e5"))

	r = startMySQLRelay(t, mysqlRelayConfig(t, s, cp, "earliest"), out)
	err := r.failed()
	if !errors.Is(err, position.ErrLost) {
		t.Fatalf("relay stopped with %v, want position.ErrLost", err)
	}
	for _, want := range []string{"sink out", "2 transaction(s) not yet delivered were purged: " + a + ":3-4", "checkpoint.start: earliest"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	exactlyOnce(t, out.events(t), "e1", "e2")
}

// 5. XA: rows of a prepared transaction wait for its XA COMMIT (delivered
// after rows committed while it was prepared), rows of a rolled-back one
// never come, and the checkpoint never passes a prepared transaction, so a
// restart in the prepared window still delivers its rows at XA COMMIT.
func TestMySQLXACommitAndRollbackAcrossARestart(t *testing.T) {
	const a = "55555555-0000-0000-0000-00000000000a"
	s := mysqlprimary.Start(t, mysqlprimary.Options{ServerUUID: a})
	outbox := s.Outbox()
	xa := func(ids ...string) mysqlprimary.Write {
		w := mysqlprimary.Write{Table: outbox}
		for i, id := range ids {
			w.Rows = append(w.Rows, row(int64(100+i), id))
		}
		return w
	}
	cp := filepath.Join(t.TempDir(), "cp.json")
	out := &lines{}
	r := startMySQLRelay(t, mysqlRelayConfig(t, s, cp, "earliest"), out)

	s.Insert(row(1, "e1"))                  // a:1
	s.XAPrepare("x1", xa("x1-a", "x1-b"))   // a:2
	s.Insert(row(2, "e2"))                  // a:3, committed while x1 is prepared
	s.XAPrepare("x2", xa("x2-rolled-back")) // a:4
	s.XARollback("x2")                      // a:5
	waitIDs(t, out, "e1", "e2")
	gc := s.XACommit("x1") // a:6
	for _, l := range waitIDs(t, out, "x1-a", "x1-b") {
		if strings.HasPrefix(l.ID, "x1") && l.GTID != gc {
			t.Errorf("%s delivered with gtid %q, want its XA COMMIT's %s", l.ID, l.GTID, gc)
		}
	}
	s.Insert(row(3, "e3")) // a:7
	waitIDs(t, out, "e3")
	exactlyOnce(t, out.events(t), "e1", "e2", "x1-a", "x1-b", "e3")
	waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool { return c.Position.GTIDSet == a+":1-7" })

	// A restart while x3 is prepared.
	s.XAPrepare("x3", xa("x3-a")) // a:8
	s.Insert(row(4, "e4"))        // a:9
	waitIDs(t, out, "e4")
	// The checkpoint holds before x3's XA PREPARE while x3 holds rows:
	// the save at the stop, after e4 (a:9) was acknowledged, is a:1-7.
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if c := loadCheckpoint(t, cp); c.Position.GTIDSet != a+":1-7" {
		t.Fatalf("checkpoint at the stop %s, want %s:1-7 (before the prepared x3)", c.Position, a)
	}
	if got := ids(out.events(t)); slices.Contains(got, "x3-a") {
		t.Fatalf("x3's rows delivered while prepared: %v", got)
	}
	before := len(out.events(t))
	r = startMySQLRelay(t, mysqlRelayConfig(t, s, cp, "earliest"), out)
	s.XACommit("x3") // a:10
	s.Insert(row(5, "e5"))
	waitIDs(t, out, "x3-a", "e5")
	waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool { return c.Position.GTIDSet == a+":1-11" })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	after := ids(out.events(t)[before:])
	// e4 was committed after x3's XA PREPARE, so the held checkpoint
	// delivers it again: at least once. x3's rows come once, at XA COMMIT.
	if !slices.Equal(after, []string{"e4", "x3-a", "e5"}) && !slices.Equal(after, []string{"x3-a", "e5"}) {
		t.Fatalf("after the restart delivered %v, want [e4 x3-a e5] (e4 again, at least once) or [x3-a e5]", after)
	}
	for _, l := range out.events(t) {
		if strings.HasPrefix(l.ID, "x2") {
			t.Fatalf("rolled-back XA row %s delivered", l.ID)
		}
	}
}

// 6. MySQL 8.4 tagged GTIDs: the event's gtid is uuid:tag:n, the
// checkpoint's set holds the tag, and a restart resumes from it.
func TestMySQLTaggedGTIDs(t *testing.T) {
	const a = "66666666-0000-0000-0000-00000000000a"
	s := mysqlprimary.Start(t, mysqlprimary.Options{ServerUUID: a, Version: "8.4.2"})
	s.Insert(row(1, "e1"))
	g2 := s.Commit(mysqlprimary.Txn{Tag: "batch", Rows: [][]any{row(2, "e2")}})
	if g2 != a+":batch:1" {
		t.Fatalf("tagged GTID %q", g2)
	}
	cp := filepath.Join(t.TempDir(), "cp.json")
	out := &lines{}
	r := startMySQLRelay(t, mysqlRelayConfig(t, s, cp, "earliest"), out)
	got := waitIDs(t, out, "e1", "e2")
	if got[0].GTID != a+":1" || got[1].GTID != g2 {
		t.Errorf("gtids %q, %q; want %s:1, %s", got[0].GTID, got[1].GTID, a, g2)
	}
	waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool { return c.Position.GTIDSet == a+":1:batch:1" })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	s.Commit(mysqlprimary.Txn{Tag: "batch", Rows: [][]any{row(3, "e3")}})
	s.Insert(row(4, "e4"))
	r = startMySQLRelay(t, mysqlRelayConfig(t, s, cp, "earliest"), out)
	got = waitIDs(t, out, "e3", "e4")
	waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool { return c.Position.GTIDSet == a+":1-2:batch:1-2" })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, out.events(t), "e1", "e2", "e3", "e4")
	if got[2].GTID != a+":batch:2" {
		t.Errorf("gtid after the restart %q", got[2].GTID)
	}
}

// A server that ignores the GTID set a dump asks from (Options.IgnoreSet,
// as Dolt) sends its whole binlog on every connect: the relay passes over
// the transactions its checkpoint holds, tagged and untagged, and delivers
// each event once across a restart.
func TestMySQLServerIgnoringTheGTIDSetDeliversNothingTwice(t *testing.T) {
	const a = "66666666-0000-0000-0000-00000000000b"
	s := mysqlprimary.Start(t, mysqlprimary.Options{ServerUUID: a, Version: "8.4.2", IgnoreSet: true})
	s.Insert(row(1, "e1"))
	s.Commit(mysqlprimary.Txn{Tag: "batch", Rows: [][]any{row(2, "e2")}})
	cp := filepath.Join(t.TempDir(), "cp.json")
	out := &lines{}
	r := startMySQLRelay(t, mysqlRelayConfig(t, s, cp, "earliest"), out)
	waitIDs(t, out, "e1", "e2")
	waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool { return c.Position.GTIDSet == a+":1:batch:1" })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	s.Commit(mysqlprimary.Txn{Tag: "batch", Rows: [][]any{row(3, "e3")}})
	s.Insert(row(4, "e4"))
	r = startMySQLRelay(t, mysqlRelayConfig(t, s, cp, "earliest"), out)
	waitIDs(t, out, "e3", "e4")
	waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool { return c.Position.GTIDSet == a+":1-2:batch:1-2" })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, out.events(t), "e1", "e2", "e3", "e4")
}

// 7. Compressed transactions (binlog_transaction_compression): their rows
// are delivered, and the checkpoint after one resumes without a replay.
func TestMySQLCompressedTransactions(t *testing.T) {
	const a = "77777777-0000-0000-0000-00000000000a"
	s := mysqlprimary.Start(t, mysqlprimary.Options{ServerUUID: a})
	s.Commit(mysqlprimary.Txn{Compressed: true, Rows: [][]any{row(1, "c1"), row(2, "c2")}})
	s.Insert(row(3, "e3"))
	s.Commit(mysqlprimary.Txn{Compressed: true, Rows: [][]any{row(4, "c4")}})
	cp := filepath.Join(t.TempDir(), "cp.json")
	out := &lines{}
	r := startMySQLRelay(t, mysqlRelayConfig(t, s, cp, "earliest"), out)
	got := waitIDs(t, out, "c1", "c2", "e3", "c4")
	if got[0].GTID != a+":1" || string(got[0].Payload) != `{"id":"c1"}` {
		t.Errorf("compressed event %+v", got[0])
	}
	waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool { return c.Position.GTIDSet == a+":1-3" })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if c := loadCheckpoint(t, cp); c.Position.Pos == 0 {
		t.Errorf("checkpoint after a compressed transaction has no binlog position: %+v", c)
	}
	s.Commit(mysqlprimary.Txn{Compressed: true, Rows: [][]any{row(5, "c5")}})
	r = startMySQLRelay(t, mysqlRelayConfig(t, s, cp, "earliest"), out)
	waitIDs(t, out, "c5")
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, out.events(t), "c1", "c2", "e3", "c4", "c5")
}

// 8. gtid_mode OFF: anonymous GTIDs give events with no gtid and
// file/position checkpoints, and a restart resumes from the position.
func TestMySQLAnonymousGTIDs(t *testing.T) {
	s := mysqlprimary.Start(t, mysqlprimary.Options{GTIDMode: "OFF"})
	s.Insert(row(1, "e1"))
	s.Commit(mysqlprimary.Txn{Compressed: true, Rows: [][]any{row(2, "c2")}})
	cp := filepath.Join(t.TempDir(), "cp.json")
	out := &lines{}
	r := startMySQLRelay(t, mysqlRelayConfig(t, s, cp, "earliest"), out)
	got := waitIDs(t, out, "e1", "c2")
	for _, l := range got {
		if l.GTID != "" || l.BinlogFile != "binlog.000001" || l.BinlogPos == 0 {
			t.Errorf("event %s: gtid %q at %s:%d, want no gtid and a file position", l.ID, l.GTID, l.BinlogFile, l.BinlogPos)
		}
	}
	file, end := s.Position()
	waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool { return c.Position.File == file && c.Position.Pos == end })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if c := loadCheckpoint(t, cp); c.Position.GTIDSet != "" {
		t.Errorf("checkpoint with gtid_mode OFF has a GTID set: %+v", c)
	}
	s.Insert(row(3, "e3"))
	s.Rotate()
	s.Insert(row(4, "e4"))
	r = startMySQLRelay(t, mysqlRelayConfig(t, s, cp, "earliest"), out)
	got = waitIDs(t, out, "e3", "e4")
	file, end = s.Position()
	waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool { return c.Position.File == file && c.Position.Pos == end })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, out.events(t), "e1", "c2", "e3", "e4")
	if got[3].BinlogFile != "binlog.000002" {
		t.Errorf("event after the rotation read from %s", got[3].BinlogFile)
	}
}

// 9. A server that rejects the dump command (error 1047): the sink stops
// at once with a clear error, instead of reconnecting forever.
func TestMySQLRejectedDumpStops(t *testing.T) {
	s := mysqlprimary.Start(t, mysqlprimary.Options{RejectDump: 1047})
	s.Insert(row(1, "e1"))
	out := &lines{}
	r := startMySQLRelay(t, mysqlRelayConfig(t, s, filepath.Join(t.TempDir(), "cp.json"), "earliest"), out)
	err := r.failed()
	for _, want := range []string{"sink out", "refused the binlog dump command", "error 1047", "serves replication"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if len(out.events(t)) != 0 {
		t.Errorf("delivered %v", ids(out.events(t)))
	}
}

// xaWrite is outbox rows for an XA transaction.
func xaWrite(s *mysqlprimary.Server, ids ...string) mysqlprimary.Write {
	w := mysqlprimary.Write{Table: s.Outbox()}
	for i, id := range ids {
		w.Rows = append(w.Rows, row(int64(200+i), id))
	}
	return w
}

// count counts deliveries per id.
func count(ls []jsonline.Line) map[string]int {
	n := map[string]int{}
	for _, l := range ls {
		n[l.ID]++
	}
	return n
}

// More XA: one-phase commits deliver at once; two prepared transactions
// committed in the other order each deliver at their own XA COMMIT; a
// stream that drops in the prepared window (the reader reconnects in the
// same run) and a failover in the prepared window (XA COMMIT on the promoted
// server) still deliver the prepared rows, once, at XA COMMIT.
func TestMySQLXAOnePhaseInterleavedReconnectAndFailover(t *testing.T) {
	const a, b = "55555555-0000-0000-0000-00000000001a", "55555555-0000-0000-0000-00000000001b"
	s := mysqlprimary.Start(t, mysqlprimary.Options{ServerUUID: a, ServerID: 1})
	cp := filepath.Join(t.TempDir(), "cp.json")
	out := &lines{}
	r := startMySQLRelay(t, mysqlRelayConfig(t, s, cp, "earliest"), out)

	s.XACommitOnePhase("one", xaWrite(s, "one-a"))
	s.Insert(row(1, "e1"))
	waitIDs(t, out, "one-a", "e1")
	exactlyOnce(t, out.events(t), "one-a", "e1")

	s.XAPrepare("x4", xaWrite(s, "x4-a"))
	s.XAPrepare("x5", xaWrite(s, "x5-a"))
	s.XACommit("x5")
	waitIDs(t, out, "x5-a")
	s.Insert(row(2, "e2"))
	waitIDs(t, out, "e2")
	if n := count(out.events(t)); n["x4-a"] != 0 {
		t.Fatalf("x4 delivered before its XA COMMIT")
	}
	// The stream drops while x4 is prepared: the reader resumes from the
	// held position and must still release x4 at its XA COMMIT.
	s.KillConnections()
	s.XACommit("x4")
	s.Insert(row(3, "e3"))
	waitIDs(t, out, "x4-a", "e3")
	n := count(out.events(t))
	if n["x4-a"] != 1 || n["e3"] != 1 {
		t.Fatalf("after a reconnect in the prepared window: x4-a ×%d, e3 ×%d (want once each); delivered %v", n["x4-a"], n["e3"], ids(out.events(t)))
	}
	got := ids(out.events(t))
	if i, j := slices.Index(got, "x5-a"), slices.Index(got, "x4-a"); i > j {
		t.Errorf("x4 (committed last) delivered before x5: %v", got)
	}

	// Failover in the prepared window: x6 is prepared on the old primary
	// when the relay stops, and committed on the promoted one.
	s.XAPrepare("x6", xaWrite(s, "x6-a", "x6-b"))
	s.Insert(row(4, "e4"))
	waitIDs(t, out, "e4")
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	// a:1 one-phase, 2 e1, 3 x4, 4 x5, 5 XA COMMIT x5, 6 e2, 7 XA COMMIT
	// x4, 8 e3, 9 x6 prepared, 10 e4: the checkpoint holds before a:9.
	if held := loadCheckpoint(t, cp).Position.GTIDSet; held != a+":1-8" {
		t.Fatalf("checkpoint %s, want %s:1-8 (before x6's XA PREPARE)", held, a)
	}
	promoted := s.StartReplica(t, mysqlprimary.Options{ServerUUID: b, ServerID: 2}, "")
	s.Close()
	before := len(out.events(t))
	r = startMySQLRelay(t, mysqlRelayConfig(t, promoted, cp, "earliest"), out)
	promoted.XACommit("x6")
	promoted.Insert(row(5, "e5"))
	waitIDs(t, out, "x6-a", "x6-b", "e5")
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	n = count(out.events(t)[before:])
	if n["x6-a"] != 1 || n["x6-b"] != 1 || n["e5"] != 1 {
		t.Fatalf("after the failover delivered %v, want x6's rows and e5 once", ids(out.events(t)[before:]))
	}
	if c := loadCheckpoint(t, cp); c.Position.GTIDSet != a+":1-10,"+b+":1-2" {
		t.Errorf("checkpoint after the failover %s", c.Position)
	}
}

// A file/position checkpoint on a server with GTIDs on (saved before the
// reader tracked GTIDs): the relay reads that file from its start for the
// executed set, skips what was delivered, and saves GTID sets from then on.
func TestMySQLFilePositionCheckpointWithGTIDsOnUpgradesToGTIDSets(t *testing.T) {
	const a = "88888888-0000-0000-0000-00000000000a"
	s := mysqlprimary.Start(t, mysqlprimary.Options{ServerUUID: a})
	s.Insert(row(1, "old-1"))
	s.Commit(mysqlprimary.Txn{Compressed: true, Rows: [][]any{row(2, "old-2")}})
	file, pos := s.Position()
	s.Insert(row(3, "e3"))
	s.Rotate()
	s.Insert(row(4, "e4"))
	cp := filepath.Join(t.TempDir(), "cp.json")
	st, err := checkpoint.OpenFile(cp)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Save(context.Background(), "out", checkpoint.Checkpoint{Flavor: "mysql", ServerUUID: a, ServerID: 1, Position: event.Position{File: file, Pos: pos}, UpdatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	out := &lines{}
	r := startMySQLRelay(t, mysqlRelayConfig(t, s, cp, "earliest"), out)
	got := waitIDs(t, out, "e3", "e4")
	waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool { return c.Position.GTIDSet == a+":1-4" })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, got, "e3", "e4")
	if got[0].GTID != a+":3" {
		t.Errorf("gtid of e3 %q", got[0].GTID)
	}
}

// XA with gtid_mode OFF: the held checkpoint is a file/position before the
// XA PREPARE, and a restart there (across a binlog rotation) delivers the
// prepared rows at XA COMMIT; a rolled-back one never.
func TestMySQLXAWithAnonymousGTIDsAcrossARestart(t *testing.T) {
	s := mysqlprimary.Start(t, mysqlprimary.Options{GTIDMode: "OFF"})
	cp := filepath.Join(t.TempDir(), "cp.json")
	out := &lines{}
	r := startMySQLRelay(t, mysqlRelayConfig(t, s, cp, "earliest"), out)
	s.Insert(row(1, "e1"))
	file, before := s.Position()
	s.XAPrepare("x1", xaWrite(s, "x1-a"))
	s.XAPrepare("x2", xaWrite(s, "x2-rolled-back"))
	s.Insert(row(2, "e2"))
	waitIDs(t, out, "e1", "e2")
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if c := loadCheckpoint(t, cp); c.Position.File != file || c.Position.Pos != before || c.Position.GTIDSet != "" {
		t.Fatalf("checkpoint %s, want %s:%d (before the XA PREPARE)", c.Position, file, before)
	}
	s.Rotate()
	s.XARollback("x2")
	r = startMySQLRelay(t, mysqlRelayConfig(t, s, cp, "earliest"), out)
	s.XACommit("x1")
	s.Insert(row(3, "e3"))
	waitIDs(t, out, "x1-a", "e3")
	file, end := s.Position()
	waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool { return c.Position.File == file && c.Position.Pos == end })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	n := count(out.events(t))
	if n["x1-a"] != 1 || n["e3"] != 1 || n["e1"] != 1 || n["e2"] < 1 || n["x2-rolled-back"] != 0 {
		t.Fatalf("delivered %v", ids(out.events(t)))
	}
}

// A file/position checkpoint on MySQL 8.4 whose file's PREVIOUS_GTIDS has
// tagged GTIDs of a UUID without untagged ones (here another source's,
// replicated): the executed set the reader takes from it must keep each
// tagged GTID under its own UUID. go-mysql's PreviousGTIDsEvent text drops
// that UUID (":t:1") or, after another UUID, gives its GTIDs to that one
// ("a:1-2:t:1" for "a:1-2,b:t:1").
func TestMySQLFilePositionCheckpointWithTaggedPreviousGTIDs(t *testing.T) {
	const a, b = "88888888-0000-0000-0000-00000000001a", "88888888-0000-0000-0000-00000000001b"
	s := mysqlprimary.Start(t, mysqlprimary.Options{ServerUUID: a, Version: "8.4.2"})
	s.Insert(row(1, "old-1"))
	s.Insert(row(2, "old-2"))
	s.Commit(mysqlprimary.Txn{GTID: b + ":t:1", Rows: [][]any{row(3, "old-3")}}) // replicated from b
	s.Rotate()
	s.Insert(row(4, "old-4"))
	file, pos := s.Position()
	s.Insert(row(5, "e5"))
	cp := filepath.Join(t.TempDir(), "cp.json")
	st, err := checkpoint.OpenFile(cp)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Save(context.Background(), "out", checkpoint.Checkpoint{Flavor: "mysql", ServerUUID: a, ServerID: 1, Position: event.Position{File: file, Pos: pos}, UpdatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	out := &lines{}
	r := startMySQLRelay(t, mysqlRelayConfig(t, s, cp, "earliest"), out)
	waitIDs(t, out, "e5")
	s.Commit(mysqlprimary.Txn{GTID: b + ":t:2", Rows: [][]any{row(6, "e6")}})
	waitIDs(t, out, "e6")
	want := a + ":1-4," + b + ":t:1-2"
	if s.GTIDExecuted() != want {
		t.Fatalf("gtid_executed %s", s.GTIDExecuted())
	}
	waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool { return c.Position.GTIDSet == want })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, out.events(t), "e5", "e6")
}

// testLogger discards the relay's log, or writes it to stderr when
// RELAY_LOG is set (to see why a scenario failed).
func testLogger() *slog.Logger {
	if os.Getenv("RELAY_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// start: earliest after a purge starts by GTID from gtid_purged (here with
// another UUID's GTIDs purged before the first file): only what is still in
// the binlog is delivered, and the checkpoint is the full executed set.
func TestMySQLEarliestAfterAPurge(t *testing.T) {
	const a, old = "99999999-0000-0000-0000-00000000000b", "99999999-0000-0000-0000-00000000000c"
	s := mysqlprimary.Start(t, mysqlprimary.Options{ServerUUID: a, Purged: old + ":1-5"})
	s.Insert(row(1, "purged-1"))
	if p := s.Purge(""); p != a+":1,"+old+":1-5" {
		t.Fatalf("gtid_purged %s", p)
	}
	s.Insert(row(2, "e2"))
	cp := filepath.Join(t.TempDir(), "cp.json")
	out := &lines{}
	r := startMySQLRelay(t, mysqlRelayConfig(t, s, cp, "earliest"), out)
	waitIDs(t, out, "e2")
	waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool { return c.Position.GTIDSet == a+":1-2,"+old+":1-5" })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, out.events(t), "e2")
}

// start: current on MySQL 8.4 (SHOW BINARY LOG STATUS; no SHOW MASTER
// STATUS) with tagged GTIDs executed: nothing before the start, then every
// new transaction, and the start saved as the executed set at once.
func TestMySQLCurrentOn84(t *testing.T) {
	const a = "99999999-0000-0000-0000-00000000000d"
	s := mysqlprimary.Start(t, mysqlprimary.Options{ServerUUID: a, Version: "8.4.2"})
	s.Insert(row(1, "before-1"))
	s.Commit(mysqlprimary.Txn{Tag: "x", Rows: [][]any{row(2, "before-2")}})
	cp := filepath.Join(t.TempDir(), "cp.json")
	out := &lines{}
	r := startMySQLRelay(t, mysqlRelayConfig(t, s, cp, "current"), out)
	waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool { return c.Position.GTIDSet == a+":1:x:1" })
	s.Commit(mysqlprimary.Txn{Tag: "x", Rows: [][]any{row(3, "e3")}})
	waitIDs(t, out, "e3")
	waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool { return c.Position.GTIDSet == a+":1:x:1-2" })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, out.events(t), "e3")
}

// Live failover with source.servers on MySQL: the relay reads primary A;
// A goes away; replica C (listed next) lacks a GTID of the checkpoint and is
// skipped; the promoted B (another server_uuid) serves it by GTID
// containment: nothing lost, nothing twice.
func TestMySQLLiveFailoverSkipsALaggingReplica(t *testing.T) {
	const a, b, c = "abababab-0000-0000-0000-00000000000a", "abababab-0000-0000-0000-00000000000b", "abababab-0000-0000-0000-00000000000c"
	primary := mysqlprimary.Start(t, mysqlprimary.Options{ServerUUID: a, ServerID: 1})
	primary.Insert(row(1, "e1"))
	lagging := primary.StartReplica(t, mysqlprimary.Options{ServerUUID: c, ServerID: 3}, "")
	primary.Insert(row(2, "e2"))
	promoted := primary.StartReplica(t, mysqlprimary.Options{ServerUUID: b, ServerID: 2}, "") // caught up
	cpPath := filepath.Join(t.TempDir(), "cp.json")
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {servers: ["%s", "%s", "%s"], user: %s, password: %s, server_id: %d, heartbeat: 500ms, read_timeout: 1500ms, max_reconnect_backoff: 300ms, failover_after: 1s}
tables: [{name: app.outbox}]
checkpoint: {path: %s, interval: 50ms, start: earliest}
sinks: [{name: out, type: stdout}]
`, primary.Addr(), lagging.Addr(), promoted.Addr(), primary.User(), primary.Password(), testserver.ServerID(), cpPath)))
	if err != nil {
		t.Fatal(err)
	}
	out := &lines{}
	r := startMySQLRelay(t, cfg, out)
	waitIDs(t, out, "e1", "e2")
	waitCheckpoint(t, cpPath, func(c checkpoint.Checkpoint) bool { return c.Position.GTIDSet == a+":1-2" })
	primary.Close()
	gb := promoted.Insert(row(3, "e3"))
	got := waitIDs(t, out, "e3")
	waitCheckpoint(t, cpPath, func(c checkpoint.Checkpoint) bool { return c.Position.GTIDSet == a+":1-2,"+b+":1" })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, out.events(t), "e1", "e2", "e3")
	if got[2].GTID != gb {
		t.Errorf("e3's gtid %q, want %s", got[2].GTID, gb)
	}
	if n := lagging.Streams(); n != 0 {
		t.Errorf("the lagging replica serves %d stream(s)", n)
	}
}
