package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/mysqlprimary"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

func scriptedCheckConfig(t *testing.T, s *mysqlprimary.Server, cpPath string) string {
	return writeFile(t, "relay.yaml", fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: %s, password: %s, server_id: %d}
tables: [{name: app.outbox}]
checkpoint: {path: %s, start: earliest}
sinks: [{name: out, type: stdout}]
`, s.Port(), s.User(), s.Password(), testserver.ServerID(), cpPath))
}

func saveCheckpoint(t *testing.T, path string, cp checkpoint.Checkpoint) {
	t.Helper()
	st, err := checkpoint.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cp.UpdatedAt = time.Now()
	if err := st.Save(context.Background(), "out", cp); err != nil {
		t.Fatal(err)
	}
}

// outbox-relay check against the scripted MySQL 8.0 and 8.4 primaries: a
// good setup runs every check to the end with no FAIL, and every query it
// sends is one the scripted server answers (as MySQL would).
func TestCheckCommandOnScriptedMySQL(t *testing.T) {
	for _, version := range []string{"8.0.36", "8.4.2"} {
		t.Run(version, func(t *testing.T) {
			s := mysqlprimary.Start(t, mysqlprimary.Options{Version: version, ServerID: 7})
			s.Insert(mysqlprimary.OutboxRow(1, "e1", "order", "o1", "created", `{}`))
			cpPath := filepath.Join(t.TempDir(), "checkpoints.json")
			cfg := scriptedCheckConfig(t, s, cpPath)
			code, out, errOut := runMain(t, context.Background(), "check", "--config", cfg)
			if code != 0 || strings.Contains(out, "FAIL") || !strings.Contains(out, "PASS  binlog_format") ||
				!strings.Contains(out, "PASS  gtid_mode") || !strings.Contains(out, "PASS  binlog_retention") {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			// With a GTID checkpoint (tagged on 8.4) the resume rule passes.
			set := s.GTIDExecuted()
			if version == "8.4.2" {
				s.Commit(mysqlprimary.Txn{Tag: "batch", Rows: [][]any{mysqlprimary.OutboxRow(2, "e2", "order", "o1", "created", `{}`)}})
				set = s.GTIDExecuted()
				if !strings.Contains(set, ":batch:1") {
					t.Fatalf("gtid_executed %s", set)
				}
			}
			saveCheckpoint(t, cpPath, checkpoint.Checkpoint{Flavor: "mysql", ServerUUID: s.ServerUUID(), ServerID: 7, Position: event.Position{GTIDSet: set, File: "binlog.000001", Pos: 4}})
			code, out, errOut = runMain(t, context.Background(), "check", "--config", cfg)
			if code != 0 || strings.Contains(out, "FAIL") || !strings.Contains(out, "PASS  checkpoint_available      sink \"out\": every transaction after its checkpoint is still in the binlog") ||
				!strings.Contains(out, "PASS  checkpoint_server         sink \"out\": every GTID of the checkpoint is executed on this server") {
				t.Fatalf("with checkpoint %s: exit %d\nstdout:\n%s\nstderr:\n%s", set, code, out, errOut)
			}
			if u := s.UnknownQueries(); len(u) > 0 {
				t.Errorf("check sent queries the scripted primary does not answer: %q", u)
			}
		})
	}
}

// check applies the resume rule of a failover: a promoted replica with
// another server_uuid that executed the checkpoint passes; one lacking some
// of its GTIDs FAILs naming them; purged GTIDs the checkpoint lacks FAIL
// naming them.
func TestCheckCommandOnScriptedMySQLFailover(t *testing.T) {
	const a, b = "c0c0c0c0-0000-0000-0000-00000000000a", "c0c0c0c0-0000-0000-0000-00000000000b"
	primary := mysqlprimary.Start(t, mysqlprimary.Options{ServerUUID: a, ServerID: 1})
	for i := range 4 {
		primary.Insert(mysqlprimary.OutboxRow(int64(i+1), fmt.Sprintf("e%d", i+1), "order", "o1", "created", `{}`))
	}
	cp := checkpoint.Checkpoint{Flavor: "mysql", ServerUUID: a, ServerID: 1, Position: event.Position{GTIDSet: a + ":1-3", File: "binlog.000001", Pos: 4}}
	run := func(s *mysqlprimary.Server) (int, string) {
		t.Helper()
		cpPath := filepath.Join(t.TempDir(), "checkpoints.json")
		saveCheckpoint(t, cpPath, cp)
		code, out, _ := runMain(t, context.Background(), "check", "--config", scriptedCheckConfig(t, s, cpPath))
		return code, out
	}

	promoted := primary.StartReplica(t, mysqlprimary.Options{ServerUUID: b, ServerID: 2}, "")
	promoted.Insert(mysqlprimary.OutboxRow(9, "e9", "order", "o1", "created", `{}`))
	if code, out := run(promoted); code != 0 || strings.Contains(out, "FAIL") ||
		!strings.Contains(out, "saved from server "+a+"; this server ("+b+") has executed every GTID of it") {
		t.Errorf("promoted replica: exit %d\n%s", code, out)
	}

	behind := primary.StartReplica(t, mysqlprimary.Options{ServerUUID: b, ServerID: 3}, a+":3-4")
	if code, out := run(behind); code != 1 || !strings.Contains(out, "FAIL  checkpoint_server") ||
		!strings.Contains(out, "1 transaction(s) never executed on this server: "+a+":3") {
		t.Errorf("lagging replica: exit %d\n%s", code, out)
	}

	primary.Purge("")
	if code, out := run(primary); code != 1 || !strings.Contains(out, "FAIL  checkpoint_available") ||
		!strings.Contains(out, "1 transaction(s) not yet delivered were purged: "+a+":4") || !strings.Contains(out, "checkpoint.start: earliest") {
		t.Errorf("purged: exit %d\n%s", code, out)
	}
}
