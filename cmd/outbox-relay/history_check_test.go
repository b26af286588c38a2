package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// `outbox-relay check` tells two servers built alike apart (server_id 1,
// the same DDL, then 5 and 8 inserts of the same lengths: binlogs laid out
// byte for byte alike) by the commit time of the transaction that ends at
// the checkpoint's File:Pos: the first's checkpoint PASSes on the first
// and FAILs checkpoint_server on the second, naming both commit times and
// the recovery choices.
func TestCheckTellsServersBuiltAlikeApartByCommitTime(t *testing.T) {
	a := testserver.Start(t, testserver.Options{ServerID: 1})
	b := testserver.Start(t, testserver.Options{ServerID: 1})
	build := func(s *testserver.Server, base int64, n int) {
		t.Helper()
		s.Exec(t, "CREATE DATABASE shop", "USE shop; "+outboxtest.Schema)
		conn, err := s.DB(t, "shop").Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for i := range n {
			for _, q := range []string{fmt.Sprintf("SET timestamp = %d", base+int64(i)),
				fmt.Sprintf("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('e%d', 'order', 'o1', 'created', '{}')", i)} {
				if _, err := conn.ExecContext(context.Background(), q); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	build(a, 1_600_000_000, 5)
	// What a relay reading a saves after the 5th insert.
	cp := checkpoint.Checkpoint{Flavor: "mariadb", ServerID: 1, CommitTime: time.Unix(1_600_000_004, 0).UTC(), UpdatedAt: time.Now().UTC()}
	cp.Position.ServerID = 1
	if err := a.DB(t, "").QueryRow("SELECT @@GLOBAL.gtid_binlog_pos").Scan(&cp.Position.GTIDSet); err != nil {
		t.Fatal(err)
	}
	if err := a.DB(t, "").QueryRow("SHOW BINLOG STATUS").Scan(&cp.Position.File, &cp.Position.Pos, new(sql.NullString), new(sql.NullString)); err != nil {
		t.Fatal(err)
	}
	build(b, 1_650_000_000, 8)
	var there sql.NullString
	if err := b.DB(t, "").QueryRow("SELECT BINLOG_GTID_POS(?, ?)", cp.Position.File, cp.Position.Pos).Scan(&there); err != nil || there.String != cp.Position.GTIDSet {
		t.Fatalf("the second server is at %v (%v) at %s: the test needs the same layout", there, err, event.Position{File: cp.Position.File, Pos: cp.Position.Pos})
	}

	for _, c := range []struct {
		s    *testserver.Server
		code int
		want []string
	}{
		{a, 0, []string{"PASS  checkpoint_server", "is in this server's history"}},
		{b, 1, []string{"FAIL  checkpoint_server", "comes from another history",
			fmt.Sprintf("the transaction that ends at %s:%d on this server committed at 2022-04-15T05:20:04Z, the checkpoint's committed at 2020-09-13T12:26:44Z", cp.Position.File, cp.Position.Pos),
			"point source.host/source.port at the server the checkpoint was read from"}},
	} {
		path := filepath.Join(t.TempDir(), "checkpoints.json")
		st, err := checkpoint.OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Save(context.Background(), "out", cp); err != nil {
			t.Fatal(err)
		}
		st.Close()
		cfg := writeFile(t, "relay.yaml", fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d}
tables: [{name: shop.outbox}]
checkpoint: {path: %s}
sinks: [{name: out, type: stdout}]
`, c.s.Port, testserver.ServerID(), path))
		code, out, errOut := runMain(t, context.Background(), "check", "--config", cfg)
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("server on port %d: output lacks %q", c.s.Port, w)
			}
		}
		if code != c.code {
			t.Errorf("server on port %d: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", c.s.Port, code, c.code, out, errOut)
		}
	}
}
