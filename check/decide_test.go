package check

import (
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/grants"
)

// The MySQL-only checks cannot run here (the tests start MariaDB only), so
// their decisions are tested on the values a MySQL server reports.

func TestVersionDecision(t *testing.T) {
	cases := []struct {
		name, version, comment, configured string
		status                             Status
		detail                             string
	}{
		{"MySQL 8.4 passes", "8.4.3", "MySQL Community Server - GPL", "auto", Pass, "MySQL 8.4.3"},
		{"MySQL 5.7 passes the version check", "5.7.44-log", "MySQL Community Server (GPL)", "auto", Pass, "MySQL 5.7.44-log"},
		{"MySQL 5.6 is too old", "5.6.51-log", "MySQL Community Server (GPL)", "auto", Fail, "MySQL 5.6.51-log is too old"},
		{"MariaDB 10.4 is too old", "10.4.34-MariaDB", "mariadb.org binary distribution", "auto", Fail, "needs MariaDB ≥ 10.5"},
		{"MariaDB 10.5 passes", "10.5.0-MariaDB", "", "auto", Pass, "MariaDB 10.5.0"},
		{"MariaDB with the 5.5.5 prefix is read", "5.5.5-10.11.6-MariaDB", "", "auto", Pass, "MariaDB"},
		{"TiDB is not MySQL", "8.0.11-TiDB-v7.5.0", "", "auto", Fail, "not MySQL or MariaDB"},
		{"an unreadable version fails", "banana", "", "auto", Fail, "not MySQL or MariaDB"},
		{"a flavor that contradicts the config fails", "8.0.36", "MySQL", "mariadb", Fail, "source.flavor is mariadb but the server is mysql"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s server
			s.version, s.comment = c.version, c.comment
			s.flavor, s.major, s.minor, s.patch = parseVersion(c.version, c.comment)
			r := serverResult(s, c.configured)
			if r.Status != c.status || !strings.Contains(r.Detail, c.detail) || (r.Status == Fail && r.Fix == "") {
				t.Errorf("got %s %q fix %q", r.Status, r.Detail, r.Fix)
			}
		})
	}
}

func TestRowMetadataMissingOnOldServersSaysUpgrade(t *testing.T) {
	s := server{version: "5.7.44", flavor: flavorMySQL, vars: map[string]string{}}
	r := rowMetadataResult(s)
	if r.Status != Fail || !strings.Contains(r.Fix, "upgrade the server to MySQL ≥ 8.0.1 or MariaDB ≥ 10.5") {
		t.Errorf("got %s %q fix %q", r.Status, r.Detail, r.Fix)
	}
}

func TestMySQLGTIDModeDecision(t *testing.T) {
	cases := []struct {
		name, mode     string
		gtidCheckpoint bool
		status         Status
		detail, fix    string
	}{
		{"ON passes", "ON", true, Pass, "ON", ""},
		{"ON_PERMISSIVE with a GTID checkpoint fails", "ON_PERMISSIVE", true, Fail, "a sink's checkpoint is a GTID set", "SET GLOBAL gtid_mode = ON"},
		{"ON_PERMISSIVE without one warns", "ON_PERMISSIVE", false, Warn, "file/position checkpoints until it is ON", "SET GLOBAL gtid_mode = ON;"},
		{"OFF_PERMISSIVE with a GTID checkpoint fails", "OFF_PERMISSIVE", true, Fail, "gtid_mode is OFF_PERMISSIVE", "SET GLOBAL gtid_mode = ON_PERMISSIVE"},
		{"OFF_PERMISSIVE without one warns", "OFF_PERMISSIVE", false, Warn, "gtid_mode is OFF_PERMISSIVE", "SET GLOBAL gtid_mode = ON_PERMISSIVE; (wait until"},
		{"OFF warns of the file/pos fallback", "OFF", false, Warn, "falls back to binlog file/position", "SET GLOBAL enforce_gtid_consistency = ON; SET GLOBAL gtid_mode = OFF_PERMISSIVE"},
		{"OFF with a GTID checkpoint fails", "OFF", true, Fail, "cannot resume it", "remove the GTID checkpoints"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := gtidModeResult(map[string]string{"gtid_mode": c.mode}, c.gtidCheckpoint)
			if r.Status != c.status || !strings.Contains(r.Detail, c.detail) || !strings.Contains(r.Fix, c.fix) {
				t.Errorf("got %s %q fix %q", r.Status, r.Detail, r.Fix)
			}
			if c.status != Pass && !strings.Contains(r.Fix, "gtid_mode=ON, enforce_gtid_consistency=ON in my.cnf [mysqld]") {
				t.Errorf("fix does not persist the setting: %q", r.Fix)
			}
		})
	}
}

func TestMySQLOnlySettings(t *testing.T) {
	cases := []struct {
		name   string
		r      Result
		status Status
		fix    string
	}{
		{"enforce_gtid_consistency ON passes", enforceGTIDResult(map[string]string{"enforce_gtid_consistency": "ON"}), Pass, ""},
		{"enforce_gtid_consistency OFF warns", enforceGTIDResult(map[string]string{"enforce_gtid_consistency": "OFF"}), Warn, "enforce_gtid_consistency=ON in my.cnf"},
		{"enforce_gtid_consistency WARN warns", enforceGTIDResult(map[string]string{"enforce_gtid_consistency": "WARN"}), Warn, "SET GLOBAL enforce_gtid_consistency = 'ON'"},
		{"PARTIAL_JSON fails", rowValueOptionsResult(map[string]string{"binlog_row_value_options": "PARTIAL_JSON"}), Fail, "SET GLOBAL binlog_row_value_options = ''"},
		{"empty binlog_row_value_options passes", rowValueOptionsResult(map[string]string{"binlog_row_value_options": ""}), Pass, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.r.Status != c.status || !strings.Contains(c.r.Fix, c.fix) {
				t.Errorf("got %s %q fix %q", c.r.Status, c.r.Detail, c.r.Fix)
			}
		})
	}
}

func TestRetentionDecision(t *testing.T) {
	cases := []struct {
		name   string
		vars   map[string]string
		status Status
		detail string
	}{
		{"MySQL 8's 30-day default passes", map[string]string{"binlog_expire_logs_seconds": "2592000", "expire_logs_days": "0"}, Pass, "kept 30d"},
		{"MySQL 5.7's expire_logs_days is read", map[string]string{"expire_logs_days": "3"}, Pass, "kept 3d (expire_logs_days = 3)"},
		{"an hour warns", map[string]string{"binlog_expire_logs_seconds": "3600"}, Warn, "less than --retention-min 1d"},
		{"auto purge off never expires", map[string]string{"binlog_expire_logs_seconds": "2592000", "binlog_expire_logs_auto_purge": "OFF"}, Warn, "never expire (binlog_expire_logs_auto_purge = OFF)"},
		{"nothing set never expires", map[string]string{}, Warn, "never expire"},
		{"a total size limit warns", map[string]string{"binlog_expire_logs_seconds": "2592000", "max_binlog_total_size": "1073741824"}, Warn, "max_binlog_total_size = 1073741824"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := retentionResult(c.vars, 24*time.Hour)
			if r.Status != c.status || !strings.Contains(r.Detail, c.detail) || (r.Status != Pass && r.Fix == "") {
				t.Errorf("got %s %q fix %q", r.Status, r.Detail, r.Fix)
			}
		})
	}
}

func TestMySQLGrantsAreParsed(t *testing.T) {
	tables := []config.Table{{Name: "shop.outbox"}, {Name: "billing.outbox"}}
	cases := []struct {
		name   string
		lines  []string
		status Status
		detail string
	}{
		{"MySQL 8 grants with db and table levels pass", []string{
			"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `relay`@`%`",
			"GRANT SELECT ON `shop`.* TO `relay`@`%`",
			"GRANT SELECT, INSERT ON `billing`.`outbox` TO `relay`@`%`"}, Pass, "has REPLICATION SLAVE"},
		{"SUPER counts as REPLICATION CLIENT on MySQL", []string{
			"GRANT SUPER, REPLICATION SLAVE ON *.* TO `relay`@`%`", "GRANT SELECT ON *.* TO `relay`@`%`"}, Pass, "has"},
		{"a role grant line alone grants nothing", []string{
			"GRANT USAGE ON *.* TO `relay`@`%`", "GRANT `relay_role`@`%` TO `relay`@`%`"}, Fail, "lacks REPLICATION SLAVE"},
		{"SELECT on another database does not count", []string{
			"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `relay`@`%`", "GRANT SELECT ON `shop`.* TO `relay`@`%`"}, Fail, "lacks SELECT on billing.outbox"},
		{"ALL PRIVILEGES WITH GRANT OPTION passes", []string{
			"GRANT ALL PRIVILEGES ON *.* TO `relay`@`%` WITH GRANT OPTION"}, Pass, "has"},
		{"ALL on a database gives SELECT", []string{
			"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `relay`@`%`", "GRANT ALL PRIVILEGES ON `shop`.* TO `relay`@`%`", "GRANT ALL ON `billing`.`outbox` TO `relay`@`%`"}, Pass, "has"},
		{"a procedure grant is no table grant", []string{
			"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `relay`@`%`", "GRANT EXECUTE ON PROCEDURE `shop`.`outbox` TO `relay`@`%`"}, Fail, "lacks SELECT on shop.outbox"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := privilegesDecision(evaluate(grants.Parse(c.lines), flavorMySQL, tables), "'relay'@'%'", flavorMySQL, tables)
			if r.Status != c.status || !strings.Contains(r.Detail, c.detail) {
				t.Errorf("got %s %q fix %q", r.Status, r.Detail, r.Fix)
			}
		})
	}
	if !grants.DBMatches(`shop\_1`, "shop_1") || grants.DBMatches(`shop\_1`, "shopx1") || !grants.DBMatches("shop_1", "shopx1") || !grants.DBMatches("sh%", "shop") {
		t.Error("database wildcard matching is wrong")
	}
}

func TestMySQLCheckpointAvailability(t *testing.T) {
	const u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	const v = "4e11fa47-71ca-11e1-9e33-c80aa9429562"
	cases := []struct {
		name, cp, purged string
		status           Status
		detail           string
	}{
		{"nothing purged passes", u + ":1-100", "", Pass, "still in the binlog"},
		{"purged GTIDs inside the checkpoint pass", u + ":1-100", u + ":1-50", Pass, "still in the binlog"},
		{"purged GTIDs past the checkpoint fail and are counted", u + ":1-100", u + ":1-150", Fail, "50 transaction(s) not yet delivered were purged: " + u + ":101-150"},
		{"a purged server uuid the checkpoint lacks fails", u + ":1-100", u + ":1-100," + v + ":1-7", Fail, "7 transaction(s)"},
		{"a gap in the middle is counted", u + ":1-10:20-30", u + ":1-30", Fail, "9 transaction(s) not yet delivered were purged: " + u + ":11-19"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cp := checkpoint.Checkpoint{Flavor: "mysql", Position: posOf(c.cp, "", 0)}
			r := mysqlAvailable("out", cp, c.purged, "RECOVERY")
			if r.Status != c.status || !strings.Contains(r.Detail, c.detail) || (c.status == Fail && r.Fix != "RECOVERY") {
				t.Errorf("got %s %q fix %q", r.Status, r.Detail, r.Fix)
			}
		})
	}
}

func TestMySQLCheckpointServer(t *testing.T) {
	const u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	const other = "5e11fa47-71ca-11e1-9e33-c80aa9429562"
	s := server{flavor: flavorMySQL, vars: map[string]string{"server_uuid": u, "gtid_executed": u + ":1-100"}}
	cases := []struct {
		name   string
		cp     checkpoint.Checkpoint
		status Status
		detail string
	}{
		{"this server's checkpoint passes", checkpoint.Checkpoint{Flavor: "mysql", ServerUUID: u, Position: posOf(u+":1-90", "", 0)}, Pass, "every GTID of the checkpoint is executed on this server"},
		{"another server whose history holds the checkpoint passes (a failover)", checkpoint.Checkpoint{Flavor: "mysql", ServerUUID: other, Position: posOf(u+":1-90", "", 0)}, Pass, "saved from server " + other},
		{"another server that lacks the checkpoint's GTIDs fails and lists them", checkpoint.Checkpoint{Flavor: "mysql", ServerUUID: other, Position: posOf(u+":1-90,"+other+":1-3", "", 0)}, Fail, "3 transaction(s) never executed on this server: " + other + ":1-3"},
		{"GTIDs this server never executed fail", checkpoint.Checkpoint{Flavor: "mysql", ServerUUID: u, Position: posOf(u+":1-120", "", 0)}, Fail, "20 transaction(s) never executed on this server: " + u + ":101-120"},
		{"a MariaDB checkpoint fails", checkpoint.Checkpoint{Flavor: "mariadb", Position: posOf("0-1-5", "", 0)}, Fail, "saved from a mariadb server"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := serverDecision("out", c.cp, s, nil, "to resume accepting the gap, DELETE IT")
			if r.Status != c.status || !strings.Contains(r.Detail, c.detail) || (c.status == Fail && !strings.Contains(r.Fix, "DELETE IT")) {
				t.Errorf("got %s %q fix %q", r.Status, r.Detail, r.Fix)
			}
		})
	}
}

// A MariaDB checkpoint whose GTIDs this server holds passes, unless this is
// the server whose binlog it was read from and that binlog disagrees at its
// File:Pos (another server's history with the same server_id and GTIDs).
func TestMariaDBCheckpointServer(t *testing.T) {
	s := server{flavor: flavorMariaDB, vars: map[string]string{"server_id": "1", "gtid_binlog_pos": "0-1-9", "gtid_binlog_state": "0-1-9"}}
	cp := checkpoint.Checkpoint{Flavor: "mariadb", ServerID: 1, Position: posOf("0-1-4", "binlog.000001", 997)}
	if r := serverDecision("out", cp, s, nil, "to resume accepting the gap, DELETE IT"); r.Status != Pass {
		t.Errorf("the same history: got %s %q", r.Status, r.Detail)
	}
	r := serverDecision("out", cp, s, []string{"no transaction of this server's binlog ends at binlog.000001:997"}, "to resume accepting the gap, DELETE IT")
	for _, want := range []string{"comes from another history", "binlog.000001:997"} {
		if r.Status != Fail || !strings.Contains(r.Detail, want) {
			t.Errorf("another history: got %s %q, want FAIL with %q", r.Status, r.Detail, want)
		}
	}
	for _, want := range []string{"point source.host/source.port at the server the checkpoint was read from", "DELETE IT"} {
		if !strings.Contains(r.Fix, want) {
			t.Errorf("another history: fix %q lacks %q", r.Fix, want)
		}
	}
	if strings.Contains(r.Fix, "wait for this one to catch up") {
		t.Errorf("waiting cannot mend another history: %q", r.Fix)
	}
}

func TestMariaDBAvailabilityAcrossDomains(t *testing.T) {
	cases := []struct {
		name, cp, oldest string
		status           Status
		detail           string
	}{
		{"at the list passes", "0-1-10,1-2-5", "0-1-10,1-2-5", Pass, "is in the binlogs"},
		{"a domain behind fails", "0-1-10,1-2-3", "0-1-10,1-2-5", Fail, "domain 1: the checkpoint is at seq_no 3 but binlog.000009 starts after 5, so 2 transaction(s) (seq_no 4 to 5) were purged"},
		{"a missing domain fails", "0-1-10", "0-1-10,1-2-5", Fail, "domain 1: the checkpoint has no position"},
		{"an empty list passes", "0-1-10", "", Pass, "is in the binlogs"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := mariadbAvailable("out", checkpoint.Checkpoint{Position: posOf(c.cp, "", 0)}, "binlog.000009", c.oldest, "RECOVERY")
			if r.Status != c.status || !strings.Contains(r.Detail, c.detail) {
				t.Errorf("got %s %q fix %q", r.Status, r.Detail, r.Fix)
			}
		})
	}
}

func TestServerIDDecisionWithReplicas(t *testing.T) {
	s := server{flavor: flavorMySQL, user: "'relay'@'%'"}
	r := serverIDDecision(idRange{100, 3}, 1, []replica{{ID: 102, Host: "db2"}}, nil, "relayhost", false, s)
	if r.Status != Fail || !strings.Contains(r.Detail, "connected replica db2 uses server_id 102") || !strings.Contains(r.Fix, "set source.server_id to 103") {
		t.Errorf("got %s %q fix %q", r.Status, r.Detail, r.Fix)
	}
	if r := serverIDDecision(idRange{100, 3}, 1, []replica{{ID: 102, Host: "db2"}}, nil, "relayhost", true, s); r.Status != Warn || !strings.Contains(r.Detail, "standby") {
		t.Errorf("with checkpoint.lock, a collision from another host is the active relay's: %+v", r)
	}
	r = serverIDDecision(idRange{100, 3}, 1, []replica{{ID: 103, Host: "db2"}}, nil, "relayhost", false, s)
	if r.Status != Pass {
		t.Errorf("a replica just past the range: got %s %q", r.Status, r.Detail)
	}
}
