package relay_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/position"
)

// mariaRelayConfig is a relay reading s's shop.outbox into one stdout sink,
// with its checkpoint at cpPath.
func mariaRelayConfig(t *testing.T, s *testserver.Server, cpPath string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s, max_reconnect_backoff: 300ms}
tables: [{name: shop.outbox}]
checkpoint: {path: %s, interval: 50ms, start: earliest}
delivery: {linger: 1ms}
sinks: [{name: out, type: stdout}]
`, s.Port, testserver.ServerID(), cpPath)))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func insertEvent(t *testing.T, s *testserver.Server, id, note string) string {
	t.Helper()
	db := s.DB(t, "shop")
	if _, err := db.Exec("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, 'order', 'o1', 'created', JSON_OBJECT('note', ?))", id, note); err != nil {
		t.Fatal(err)
	}
	return gtidPos(t, s)
}

func gtidPos(t *testing.T, s *testserver.Server) string {
	t.Helper()
	var pos string
	if err := s.DB(t, "").QueryRow("SELECT @@GLOBAL.gtid_binlog_pos").Scan(&pos); err != nil {
		t.Fatal(err)
	}
	return pos
}

// Two unrelated MariaDB servers, both with the default server_id 1, both
// reach GTID 0-1-N with different rows (the quickstart run first against
// another server on its port, then against its own). A checkpoint read
// from the first is refused on the second, with the recovery choices, and
// nothing of the second is delivered: resuming by GTID alone would skip its
// row b-1.
func TestACheckpointFromAnUnrelatedMariaDBWithTheSameGTIDIsRefused(t *testing.T) {
	a := testserver.Start(t, testserver.Options{ServerID: 1})
	b := testserver.Start(t, testserver.Options{ServerID: 1})
	for _, s := range []*testserver.Server{a, b} {
		s.Exec(t, "CREATE DATABASE shop", "USE shop; "+outboxtest.Schema)
	}
	cp := filepath.Join(t.TempDir(), "cp.json")
	out := &lines{}
	r := startMySQLRelay(t, mariaRelayConfig(t, a, cp), out)
	ga := insertEvent(t, a, "a-1", strings.Repeat("a much longer row on the first server ", 8))
	waitIDs(t, out, "a-1")
	saved := waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool { return c.Position.GTIDSet == ga })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if saved.Position.ServerID != 1 || saved.Position.File == "" || saved.Position.Pos <= 4 {
		t.Fatalf("the checkpoint does not record whose binlog coordinates it holds: %+v", saved.Position)
	}

	if gb := insertEvent(t, b, "b-1", "short"); gb != ga {
		t.Fatalf("the second server is at %s, not at the first's %s: the test needs both at the same GTID", gb, ga)
	}
	insertEvent(t, b, "b-2", "short")

	before := len(out.events(t))
	r = startMySQLRelay(t, mariaRelayConfig(t, b, cp), out)
	err := r.failed()
	if !errors.Is(err, position.ErrNotInHistory) {
		t.Fatalf("relay stopped with %v, want position.ErrNotInHistory", err)
	}
	for _, want := range []string{"sink out", "another history", fmt.Sprintf("at %s:%d", saved.Position.File, saved.Position.Pos),
		"point the relay at the server it was read from", "remove the sink's checkpoint to start afresh from checkpoint.start"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if got := out.events(t)[before:]; len(got) != 0 {
		t.Errorf("delivered %v from a server with another history", ids(got))
	}
	if c := loadCheckpoint(t, cp); c.Position != saved.Position {
		t.Errorf("checkpoint changed to %+v", c.Position)
	}
}

// The check of a checkpoint's binlog coordinates applies only on the server
// whose binlog they are: a checkpoint read from the primary resumes on its
// replica (whose binlog files have the same names, at other offsets) and
// back on the primary, each event delivered once.
func TestACheckpointMovesBetweenAPrimaryAndItsReplica(t *testing.T) {
	primary := testserver.Start(t, testserver.Options{ServerID: 41})
	// Without checksums every event of the replica's binlog is 4 bytes
	// shorter: same file names, other offsets.
	replica := testserver.Start(t, testserver.Options{ServerID: 42, ExtraArgs: []string{"--log-slave-updates", "--read-only", "--binlog-checksum=NONE"}})
	replicate(t, primary, replica)
	primary.Exec(t, "CREATE DATABASE shop", "USE shop; "+outboxtest.Schema)
	caughtUp := func(want string) {
		t.Helper()
		eventually.Within(t, 20*time.Second, "the replica to apply "+want, func() bool {
			var got string
			replica.DB(t, "").QueryRow("SELECT @@GLOBAL.gtid_slave_pos").Scan(&got)
			return got == want
		})
	}
	caughtUp(gtidPos(t, primary))

	cp := filepath.Join(t.TempDir(), "cp.json")
	out := &lines{}
	run := func(s *testserver.Server, id string) checkpoint.Checkpoint {
		t.Helper()
		r := startMySQLRelay(t, mariaRelayConfig(t, s, cp), out)
		g := insertEvent(t, primary, id, "x")
		caughtUp(g)
		waitIDs(t, out, id)
		c := waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool {
			return c.Position.ServerID == uint32(sID(t, s)) && strings.Contains(c.Position.GTIDSet, g)
		})
		if err := r.stop(); err != nil {
			t.Fatalf("relay on server_id %d: %v", sID(t, s), err)
		}
		return c
	}
	run(primary, "e1")
	onPrimary := run(primary, "e2") // the primary's own coordinates, checked and agreeing
	// On the replica, the primary's coordinates are not where that GTID
	// ends: only the server_id tells that they are not the replica's own.
	var there *string
	if err := replica.DB(t, "").QueryRow("SELECT BINLOG_GTID_POS(?, ?)", onPrimary.Position.File, onPrimary.Position.Pos).Scan(&there); err != nil {
		t.Fatal(err)
	}
	if there != nil && *there == onPrimary.Position.GTIDSet {
		t.Fatalf("the replica's binlog has %s at %s:%d too: the test needs other offsets", *there, onPrimary.Position.File, onPrimary.Position.Pos)
	}
	run(replica, "e3")
	run(primary, "e4")
	exactlyOnce(t, out.events(t), "e1", "e2", "e3", "e4")
}

func sID(t *testing.T, s *testserver.Server) int {
	t.Helper()
	var id int
	if err := s.DB(t, "").QueryRow("SELECT @@server_id").Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// insertTimed inserts events with ids at the given commit times (SET
// timestamp), one transaction each, and returns the server's GTID position
// after the last.
func insertTimed(t *testing.T, s *testserver.Server, at time.Time, ids ...string) string {
	t.Helper()
	conn, err := s.DB(t, "shop").Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i, id := range ids {
		if _, err := conn.ExecContext(context.Background(), "SET timestamp = ?", at.Unix()+int64(i)); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(context.Background(), "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, 'order', 'o1', 'created', JSON_OBJECT('note', ?))", id, id); err != nil {
			t.Fatal(err)
		}
	}
	return gtidPos(t, s)
}

// Two servers built alike (the default server_id 1, the same DDL, then 5
// and 8 single-row inserts of the same sizes) have binlogs laid out byte
// for byte alike: at the checkpoint's File:Pos both binlogs are at its
// GTID. Only the transactions' commit times tell them apart. A checkpoint
// read from the first is refused on the second, with the recovery choices;
// resuming would deliver the second's last 3 events and skip its first 5.
func TestACheckpointFromAnotherServerWithTheSameBinlogLayoutIsRefused(t *testing.T) {
	a := testserver.Start(t, testserver.Options{ServerID: 1})
	b := testserver.Start(t, testserver.Options{ServerID: 1})
	for _, s := range []*testserver.Server{a, b} {
		s.Exec(t, "CREATE DATABASE shop", "USE shop; "+outboxtest.Schema)
	}
	cp := filepath.Join(t.TempDir(), "cp.json")
	out := &lines{}
	r := startMySQLRelay(t, mariaRelayConfig(t, a, cp), out)
	ga := insertTimed(t, a, time.Unix(1_600_000_000, 0), "a1", "a2", "a3", "a4", "a5")
	waitIDs(t, out, "a1", "a2", "a3", "a4", "a5")
	saved := waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool { return c.Position.GTIDSet == ga })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if want := time.Unix(1_600_000_004, 0).UTC(); !saved.CommitTime.Equal(want) {
		t.Fatalf("the checkpoint's commit_time is %v, want %v", saved.CommitTime, want)
	}

	insertTimed(t, b, time.Unix(1_650_000_000, 0), "b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8")
	var there *string
	if err := b.DB(t, "").QueryRow("SELECT BINLOG_GTID_POS(?, ?)", saved.Position.File, saved.Position.Pos).Scan(&there); err != nil {
		t.Fatal(err)
	}
	if there == nil || *there != saved.Position.GTIDSet {
		t.Fatalf("the second server's binlog is at %v at %s:%d, not at %s: the test needs the same layout", there, saved.Position.File, saved.Position.Pos, saved.Position.GTIDSet)
	}

	before := len(out.events(t))
	r = startMySQLRelay(t, mariaRelayConfig(t, b, cp), out)
	err := r.failed()
	if !errors.Is(err, position.ErrNotInHistory) {
		t.Fatalf("relay stopped with %v, want position.ErrNotInHistory", err)
	}
	for _, want := range []string{"sink out", "another history", "on this server committed at 2022-04-15T05:20:04Z, the checkpoint's committed at 2020-09-13T12:26:44Z",
		"point the relay at the server it was read from", "remove the sink's checkpoint to start afresh from checkpoint.start"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if got := out.events(t)[before:]; len(got) != 0 {
		t.Errorf("delivered %v from a server with another history", ids(got))
	}
	if c := loadCheckpoint(t, cp); c.Position != saved.Position {
		t.Errorf("checkpoint changed to %+v", c.Position)
	}
}

// On the server a checkpoint was read from, its commit time agrees with the
// binlog's, after the binlog rotated and the server restarted; a checkpoint
// without one (saved by a version before 0.2) is not compared. Each event
// is delivered once.
func TestACheckpointResumesOnItsOwnServerAfterRotationAndRestart(t *testing.T) {
	s := testserver.Start(t, testserver.Options{ServerID: 1})
	s.Exec(t, "CREATE DATABASE shop", "USE shop; "+outboxtest.Schema)
	cp := filepath.Join(t.TempDir(), "cp.json")
	out := &lines{}
	run := func(at time.Time, id string) checkpoint.Checkpoint {
		t.Helper()
		r := startMySQLRelay(t, mariaRelayConfig(t, s, cp), out)
		g := insertTimed(t, s, at, id)
		waitIDs(t, out, id)
		c := waitCheckpoint(t, cp, func(c checkpoint.Checkpoint) bool { return c.Position.GTIDSet == g })
		if err := r.stop(); err != nil {
			t.Fatalf("relay resuming before %s: %v", id, err)
		}
		return c
	}
	c := run(time.Unix(1_600_000_000, 0), "e1")
	if c.CommitTime.IsZero() {
		t.Fatalf("the checkpoint has no commit time: %+v", c)
	}
	s.Exec(t, "FLUSH BINARY LOGS")
	s.Restart(t)
	run(time.Unix(1_600_000_100, 0), "e2") // resumes from e1's checkpoint in the file before
	s.Exec(t, "FLUSH BINARY LOGS")
	c = run(time.Unix(1_600_000_200, 0), "e3")

	// As a version before 0.2 saved it: no commit_time.
	st, err := checkpoint.OpenFile(cp)
	if err != nil {
		t.Fatal(err)
	}
	c.CommitTime = time.Time{}
	if err := st.Save(context.Background(), "out", c); err != nil {
		t.Fatal(err)
	}
	st.Close()
	run(time.Unix(1_600_000_300, 0), "e4")
	exactlyOnce(t, out.events(t), "e1", "e2", "e3", "e4")
}
