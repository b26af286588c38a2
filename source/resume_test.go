package source_test

import (
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/source"
)

func TestOwnBinlogOnlyOnTheServerWhoseBinlogThePositionIs(t *testing.T) {
	maria := source.ServerState{Info: source.ServerInfo{Flavor: mysql.MariaDBFlavor, ServerID: 1},
		Files: []source.BinlogFile{{Name: "binlog.000002"}, {Name: "binlog.000003"}}}
	mysqlSrv := maria
	mysqlSrv.Info.Flavor = mysql.MySQLFlavor
	at := event.Position{GTIDSet: "0-1-4", File: "binlog.000003", Pos: 997, ServerID: 1}
	with := func(f func(*event.Position)) event.Position { p := at; f(&p); return p }
	for _, tc := range []struct {
		name  string
		state source.ServerState
		pos   event.Position
		want  bool
	}{
		{"read from this server's binlog, still there", maria, at, true},
		{"read from another server_id (a primary, a replica)", maria, with(func(p *event.Position) { p.ServerID = 2 }), false},
		{"saved by an earlier version (no server_id)", maria, with(func(p *event.Position) { p.ServerID = 0 }), false},
		{"its file was purged", maria, with(func(p *event.Position) { p.File = "binlog.000001" }), false},
		{"no GTIDs", maria, with(func(p *event.Position) { p.GTIDSet = "" }), false},
		{"the start of a file", maria, with(func(p *event.Position) { p.Pos = 4 }), false},
		{"a MySQL server (GTIDs name their server's UUID)", mysqlSrv, at, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.state.OwnBinlog(tc.pos); got != tc.want {
				t.Errorf("OwnBinlog(%+v) = %v, want %v", tc.pos, got, tc.want)
			}
		})
	}
}
