package check

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

// One good server for the package; tests flip dynamic settings on it with
// SET GLOBAL and restore them, so they do not run in parallel.
var srv *testserver.Server

const shop = "shop"

func TestMain(m *testing.M) {
	s, err := testserver.StartServer(testserver.Options{ServerID: 1})
	if err != nil {
		fmt.Fprintf(os.Stderr, "start private mariadbd: %v\n", err)
		os.Exit(1)
	}
	srv = s
	db, err := sql.Open("mysql", s.DSN(""))
	if err == nil {
		_, err = db.Exec("CREATE DATABASE " + shop + "; USE " + shop + "; CREATE TABLE outbox (" +
			"id CHAR(36) NOT NULL PRIMARY KEY, aggregatetype VARCHAR(64) NOT NULL, aggregateid VARCHAR(64) NOT NULL," +
			"type VARCHAR(64) NOT NULL, payload JSON NOT NULL)")
		db.Close()
	}
	if err != nil {
		s.Stop()
		fmt.Fprintf(os.Stderr, "create schema: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	shutdown(s)
	s.Stop()
	os.Exit(code)
}

// shutdown asks the server to stop with SHUTDOWN, which it obeys at once,
// so that Stop does not wait for it.
func shutdown(s *testserver.Server) {
	db, err := sql.Open("mysql", s.DSN(""))
	if err != nil {
		return
	}
	defer db.Close()
	_, _ = db.Exec("SHUTDOWN")
}

// testConfig is a valid config for srv as user; extra YAML lines are
// appended at the top level.
func testConfig(t *testing.T, s *testserver.Server, user, password string, extra ...string) *config.Config {
	t.Helper()
	y := fmt.Sprintf("source: {host: 127.0.0.1, port: %d, user: %s, password: %q, server_id: %d}\n"+
		"checkpoint: {path: %s}\n", s.Port, user, password, testserver.ServerID(), filepath.Join(t.TempDir(), "checkpoints.json"))
	hasTables, hasSinks := false, false
	for _, e := range extra {
		hasTables = hasTables || strings.HasPrefix(e, "tables:")
		hasSinks = hasSinks || strings.HasPrefix(e, "sinks:")
		y += e + "\n"
	}
	if !hasTables {
		y += "tables: [{name: shop.outbox}]\n"
	}
	if !hasSinks {
		y += "sinks: [{name: out, type: stdout}]\n"
	}
	cfg, err := config.Parse([]byte(y))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, y)
	}
	return cfg
}

func runChecks(t *testing.T, cfg *config.Config) Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := Run(ctx, cfg, Options{RetentionMin: 24 * time.Hour})
	if err != nil {
		t.Fatalf("check.Run: %v", err)
	}
	return rep
}

// only returns the single result named name.
func only(t *testing.T, rep Report, name string) Result {
	t.Helper()
	rs := rep.Get(name)
	if len(rs) != 1 {
		t.Fatalf("want one %s result, got %d:\n%s", name, len(rs), printed(rep))
	}
	return rs[0]
}

func printed(rep Report) string {
	var b strings.Builder
	rep.Print(&b)
	return b.String()
}

func expect(t *testing.T, rep Report, r Result, status Status, detail, fix string) {
	t.Helper()
	if r.Status != status || !strings.Contains(r.Detail, detail) || !strings.Contains(r.Fix, fix) {
		t.Errorf("%s: want %s with detail containing %q and fix containing %q, got %s %q fix %q\nreport:\n%s",
			r.Name, status, detail, fix, r.Status, r.Detail, r.Fix, printed(rep))
	}
}

// setGlobal sets a global variable and restores it when the test ends.
func setGlobal(t *testing.T, name, value string) {
	t.Helper()
	db := srv.DB(t, "")
	var old string
	if err := db.QueryRow("SELECT @@GLOBAL." + name).Scan(&old); err != nil {
		t.Fatal(err)
	}
	srv.Exec(t, fmt.Sprintf("SET GLOBAL %s = %s", name, value))
	if _, err := strconv.ParseFloat(old, 64); err != nil {
		old = "'" + old + "'"
	}
	t.Cleanup(func() { srv.Exec(t, fmt.Sprintf("SET GLOBAL %s = %s", name, old)) })
}

func TestAWellConfiguredServerPassesEveryCheck(t *testing.T) {
	setGlobal(t, "gtid_strict_mode", "ON")
	setGlobal(t, "binlog_expire_logs_seconds", "604800")
	rep := runChecks(t, testConfig(t, srv, "root", ""))
	for _, r := range rep.Results {
		if r.Status != Pass {
			t.Errorf("%s is %s: %s", r.Name, r.Status, r.Detail)
		}
	}
	for _, name := range []string{NameServer, NameLogBin, NameBinlogFormat, NameBinlogRowImage, NameBinlogRowMetadata,
		NameGTIDStrictMode, NameLogBinCompress, NamePrivileges, NameServerID, NameTables, NameCheckpointAvailable,
		NameCheckpointServer, NameBinlogRetention} {
		only(t, rep, name)
	}
	// MySQL-only checks are not reported on MariaDB.
	for _, name := range []string{NameGTIDMode, NameEnforceGTIDConsistency, NameBinlogRowValueOptions} {
		if len(rep.Get(name)) != 0 {
			t.Errorf("%s reported on MariaDB", name)
		}
	}
	if t.Failed() {
		t.Log(printed(rep))
	}
}

func TestAWrongDynamicSettingIsReportedWithItsFix(t *testing.T) {
	cases := []struct {
		name, variable, value string
		check                 string
		status                Status
		detail, fix           string
	}{
		{"statement-based binlog fails", "binlog_format", "'STATEMENT'", NameBinlogFormat, Fail,
			"binlog_format is STATEMENT", "SET GLOBAL binlog_format = 'ROW' and binlog_format=ROW in my.cnf [mysqld]"},
		{"mixed binlog fails", "binlog_format", "'MIXED'", NameBinlogFormat, Fail,
			"binlog_format is MIXED", "SET GLOBAL binlog_format = 'ROW'"},
		{"a minimal row image fails", "binlog_row_image", "'MINIMAL'", NameBinlogRowImage, Fail,
			"binlog_row_image is MINIMAL", "SET GLOBAL binlog_row_image = 'FULL' and binlog_row_image=FULL in my.cnf"},
		{"minimal row metadata fails", "binlog_row_metadata", "'MINIMAL'", NameBinlogRowMetadata, Fail,
			"binlog_row_metadata is MINIMAL", "SET GLOBAL binlog_row_metadata = 'FULL' and binlog_row_metadata=FULL in my.cnf [mysqld] (supported by MySQL ≥ 8.0.1 and MariaDB ≥ 10.5)"},
		{"no row metadata fails", "binlog_row_metadata", "'NO_LOG'", NameBinlogRowMetadata, Fail,
			"binlog_row_metadata is NO_LOG", "SET GLOBAL binlog_row_metadata = 'FULL'"},
		{"a compressed binlog warns (the relay reads it)", "log_bin_compress", "ON", NameLogBinCompress, Warn,
			"log_bin_compress is ON: outbox-relay reads", "SET GLOBAL log_bin_compress = 'OFF'"},
		{"gtid_strict_mode off warns", "gtid_strict_mode", "OFF", NameGTIDStrictMode, Warn,
			"gtid_strict_mode is OFF", "SET GLOBAL gtid_strict_mode = 'ON' and gtid_strict_mode=ON in my.cnf"},
		{"binlogs that never expire warn", "binlog_expire_logs_seconds", "0", NameBinlogRetention, Warn,
			"never expire", "SET GLOBAL binlog_expire_logs_seconds = 86400"},
		{"a retention under --retention-min warns", "binlog_expire_logs_seconds", "3600", NameBinlogRetention, Warn,
			"expire after 1h (binlog_expire_logs_seconds = 3600), less than --retention-min 1d", "SET GLOBAL binlog_expire_logs_seconds = 86400"},
		{"a retention in days above the minimum passes", "expire_logs_days", "2", NameBinlogRetention, Pass,
			"binlogs are kept 2d", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			setGlobal(t, c.variable, c.value)
			rep := runChecks(t, testConfig(t, srv, "root", ""))
			expect(t, rep, only(t, rep, c.check), c.status, c.detail, c.fix)
			if c.status == Fail && len(rep.Failed()) != 1 {
				t.Errorf("want only %s to fail:\n%s", c.check, printed(rep))
			}
		})
	}
}

func TestAllowFailDowngradesANamedFailure(t *testing.T) {
	setGlobal(t, "binlog_format", "'STATEMENT'")
	rep, err := Run(context.Background(), testConfig(t, srv, "root", ""), Options{AllowFail: []string{NameBinlogFormat}})
	if err != nil {
		t.Fatal(err)
	}
	r := only(t, rep, NameBinlogFormat)
	if r.Status != Warn || !r.Downgraded || len(rep.Failed()) != 0 {
		t.Errorf("want a downgraded WARN and no FAIL, got %+v\n%s", r, printed(rep))
	}
	if _, err := Run(context.Background(), testConfig(t, srv, "root", ""), Options{AllowFail: []string{"binlog_fromat"}}); err == nil || !strings.Contains(err.Error(), "binlog_format") {
		t.Errorf("a misspelt --allow-fail: want an error listing the checks, got %v", err)
	}
}

func TestBinaryLoggingOffFails(t *testing.T) {
	s := testserver.Start(t, testserver.Options{NoBinlog: true})
	t.Cleanup(func() { shutdown(s) })
	s.Exec(t, "CREATE DATABASE shop", "CREATE TABLE shop.outbox (id CHAR(36) PRIMARY KEY, aggregatetype VARCHAR(64), aggregateid VARCHAR(64), type VARCHAR(64), payload JSON)")
	cfg := testConfig(t, s, "root", "")
	// A checkpoint whose availability cannot be judged without binlogs.
	writeCheckpoint(t, cfg, "out", checkpoint.Checkpoint{Flavor: "mariadb", ServerID: 1, Position: posOf("", "binlog.000001", 4)})
	rep := runChecks(t, cfg)
	expect(t, rep, only(t, rep, NameLogBin), Fail, "binary logging is off", "log_bin=mysql-bin")
	expect(t, rep, only(t, rep, NameCheckpointAvailable), Warn, "cannot be listed", "log_bin")
}

// createUser makes a user with the given grants and a password.
func createUser(t *testing.T, name string, grants ...string) *config.Config {
	t.Helper()
	srv.Exec(t, fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY 'pw'", name))
	t.Cleanup(func() { srv.Exec(t, fmt.Sprintf("DROP USER '%s'@'%%'", name)) })
	for _, g := range grants {
		srv.Exec(t, strings.ReplaceAll(g, "USER", fmt.Sprintf("'%s'@'%%'", name)))
	}
	return testConfig(t, srv, name, "pw")
}

func TestPrivilegesAreReadFromTheGrants(t *testing.T) {
	cases := []struct {
		name   string
		grants []string
		status Status
		detail string
		fix    string
	}{
		{"a user with no privileges is told every GRANT", nil, Fail,
			"lacks REPLICATION SLAVE (to read the binlog), REPLICATION CLIENT (BINLOG MONITOR) (to read binlog positions and files), SELECT on shop.outbox",
			"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'p_none'@'%'; GRANT SELECT ON `shop`.`outbox` TO 'p_none'@'%';"},
		{"the documented grants pass", []string{"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO USER", "GRANT SELECT ON shop.outbox TO USER"}, Pass,
			"has REPLICATION SLAVE, REPLICATION CLIENT and SELECT", ""},
		{"missing REPLICATION CLIENT fails", []string{"GRANT REPLICATION SLAVE ON *.* TO USER", "GRANT SELECT ON shop.* TO USER"}, Fail,
			"lacks REPLICATION CLIENT", "GRANT REPLICATION CLIENT ON *.* TO 'p_noclient'@'%';"},
		{"REPLICATION SLAVE ADMIN is not REPLICATION SLAVE", []string{"GRANT REPLICATION SLAVE ADMIN, BINLOG MONITOR ON *.* TO USER", "GRANT SELECT ON shop.outbox TO USER"}, Fail,
			"lacks REPLICATION SLAVE (to read the binlog)", "GRANT REPLICATION SLAVE ON *.* TO 'p_slaveadmin'@'%';"},
		{"REPLICATION REPLICA and BINLOG MONITOR count", []string{"GRANT REPLICATION REPLICA, BINLOG MONITOR ON *.* TO USER", "GRANT SELECT ON shop.outbox TO USER"}, Pass,
			"has REPLICATION SLAVE", ""},
		{"SELECT on some columns only fails", []string{"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO USER", "GRANT SELECT (id, payload) ON shop.outbox TO USER"}, Fail,
			"SELECT on shop.outbox (granted on some columns only)", "GRANT SELECT ON `shop`.`outbox` TO 'p_columns'@'%';"},
		{"SELECT on another table fails", []string{"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO USER", "GRANT SELECT ON mysql.user TO USER"}, Fail,
			"lacks SELECT on shop.outbox", "GRANT SELECT ON `shop`.`outbox`"},
		{"a database wildcard grant counts", []string{"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO USER", "GRANT SELECT ON `sh_p`.* TO USER"}, Pass,
			"has REPLICATION SLAVE", ""},
		{"ALL PRIVILEGES counts", []string{"GRANT ALL PRIVILEGES ON *.* TO USER"}, Pass, "has REPLICATION SLAVE", ""},
		{"grants through a default role count", []string{"CREATE ROLE IF NOT EXISTS relay_role",
			"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO relay_role", "GRANT SELECT ON shop.outbox TO relay_role",
			"GRANT relay_role TO USER", "SET DEFAULT ROLE relay_role FOR USER"}, Pass, "has REPLICATION SLAVE", ""},
	}
	users := []string{"p_none", "p_readme", "p_noclient", "p_slaveadmin", "p_replica", "p_columns", "p_other", "p_wildcard", "p_all", "p_role"}
	t.Cleanup(func() { srv.Exec(t, "DROP ROLE IF EXISTS relay_role") })
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := createUser(t, users[i], c.grants...)
			rep := runChecks(t, cfg)
			expect(t, rep, only(t, rep, NamePrivileges), c.status, c.detail, c.fix)
		})
	}
}

// A webhook sink's endpoints table is read by the relay's user too: the
// privileges line asks for SELECT on it, naming the GRANT, as for an
// outbox table.
func TestPrivilegesAskForSelectOnTheEndpointsTable(t *testing.T) {
	hooks := "sinks: [{name: hooks, type: webhook, webhook: {endpoints_table: {table: shop.outbox_endpoints}}}]"
	documented := []string{"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO USER", "GRANT SELECT ON shop.outbox TO USER"}
	srv.Exec(t, strings.Replace(webhook.EndpointsTableSchema, "CREATE TABLE IF NOT EXISTS outbox_endpoints", "CREATE TABLE shop.outbox_endpoints", 1),
		"CREATE USER 'p_endpoints'@'%' IDENTIFIED BY 'pw'")
	t.Cleanup(func() { srv.Exec(t, "DROP USER 'p_endpoints'@'%'", "DROP TABLE shop.outbox_endpoints") })
	for _, g := range documented {
		srv.Exec(t, strings.ReplaceAll(g, "USER", "'p_endpoints'@'%'"))
	}
	rep := runChecks(t, testConfig(t, srv, "p_endpoints", "pw", hooks))
	expect(t, rep, only(t, rep, NamePrivileges), Fail, "lacks SELECT on shop.outbox_endpoints", "GRANT SELECT ON `shop`.`outbox_endpoints` TO 'p_endpoints'@'%';")
	srv.Exec(t, "GRANT SELECT ON shop.outbox_endpoints TO 'p_endpoints'@'%'")
	rep = runChecks(t, testConfig(t, srv, "p_endpoints", "pw", hooks))
	expect(t, rep, only(t, rep, NamePrivileges), Pass, "SELECT on every outbox table (and endpoints table)", "")
}

// registerReplica connects a binlog reader with server id id that
// registers itself as host, and waits until the server lists it.
func registerReplica(t *testing.T, id uint32, host string) {
	t.Helper()
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: id, Flavor: mysql.MariaDBFlavor, Host: srv.Host, Port: uint16(srv.Port), User: "root", Localhost: host,
		Logger: slog.New(slog.DiscardHandler),
	})
	t.Cleanup(syncer.Close)
	var file string
	var pos uint32
	if err := srv.DB(t, "").QueryRow("SHOW BINLOG STATUS").Scan(&file, &pos, new(sql.NullString), new(sql.NullString)); err != nil {
		t.Fatal(err)
	}
	if _, err := syncer.StartSync(mysql.Position{Name: file, Pos: pos}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		rows, err := srv.DB(t, "").Query("SHOW SLAVE HOSTS")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var sid uint32
			var h, port, master string
			if err := rows.Scan(&sid, &h, &port, &master); err != nil {
				t.Fatal(err)
			}
			if sid == id {
				n++
			}
		}
		rows.Close()
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %d never registered", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestServerIDCollisions(t *testing.T) {
	t.Run("the server's own id fails", func(t *testing.T) {
		cfg := testConfig(t, srv, "root", "")
		cfg.Source.ServerID = 1
		rep := runChecks(t, cfg)
		// ids 1..3: the sink's stream and the two replay slots (replay.max_running)
		expect(t, rep, only(t, rep, NameServerID), Fail, "the server's own server_id is 1", "set source.server_id to 4")
	})
	t.Run("the second sink's id colliding with the server fails", func(t *testing.T) {
		cfg := testConfig(t, srv, "root", "", "sinks: [{name: a, type: stdout}, {name: b, type: stdout}]")
		cfg.Source.ServerID = 0 // ids 0..3: sink b is replica 1, the replay slots 2 and 3
		rep := runChecks(t, cfg)
		expect(t, rep, only(t, rep, NameServerID), Fail, "replica ids 0..3 collide", "source.server_id+3")
	})
	t.Run("a connected replica with the relay's id fails", func(t *testing.T) {
		registerReplica(t, 5001, "other-replica")
		cfg := testConfig(t, srv, "root", "", "sinks: [{name: a, type: stdout}, {name: b, type: stdout}]")
		cfg.Source.ServerID = 5000
		rep := runChecks(t, cfg)
		expect(t, rep, only(t, rep, NameServerID), Fail, "connected replica other-replica uses server_id 5001", "set source.server_id to 5004")
	})
	t.Run("a replica of this host with the relay's id only warns", func(t *testing.T) {
		host, _ := os.Hostname()
		registerReplica(t, 5100, host)
		cfg := testConfig(t, srv, "root", "")
		cfg.Source.ServerID = 5100
		rep := runChecks(t, cfg)
		expect(t, rep, only(t, rep, NameServerID), Warn, "another relay on this host with a copied config", "set source.server_id")
	})
	t.Run("a user who cannot list replicas is warned", func(t *testing.T) {
		cfg := createUser(t, "sid_user", "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO USER", "GRANT SELECT ON shop.outbox TO USER")
		rep := runChecks(t, cfg)
		expect(t, rep, only(t, rep, NameServerID), Warn, "could not be listed", "GRANT REPLICATION MASTER ADMIN ON *.* TO 'sid_user'@'%';")
	})
}

func TestOutboxTableColumnsAndTypes(t *testing.T) {
	srv.Exec(t,
		"CREATE TABLE shop.int_payload (id CHAR(36) PRIMARY KEY, aggregatetype VARCHAR(64), aggregateid VARCHAR(64), type VARCHAR(64), payload INT)",
		"CREATE TABLE shop.enum_type (id CHAR(36) PRIMARY KEY, aggregatetype VARCHAR(64), aggregateid VARCHAR(64), type ENUM('created','paid'), payload LONGBLOB)",
		"CREATE TABLE shop.int_id (id BIGINT PRIMARY KEY, aggregatetype VARCHAR(64), aggregateid VARCHAR(64), type VARCHAR(64), payload TEXT)",
		"CREATE TABLE shop.date_agg (id BINARY(16) PRIMARY KEY, aggregatetype VARCHAR(64), aggregateid DATETIME, type VARCHAR(64), payload JSON)",
		"CREATE TABLE shop.reliable (idempotency_key BINARY(16) PRIMARY KEY, topic VARCHAR(64), aggregate_id VARCHAR(64), payload MEDIUMBLOB, trace VARCHAR(64))",
	)
	t.Cleanup(func() {
		srv.Exec(t, "DROP TABLE shop.int_payload, shop.enum_type, shop.int_id, shop.date_agg, shop.reliable")
	})
	cases := []struct {
		name, table string
		status      Status
		detail, fix string
	}{
		{"a missing table fails", "{name: shop.nope}", Fail, "shop.nope does not exist", "fix tables[].name"},
		{"a missing column fails", "{name: shop.outbox, columns: {aggregate_id: agg}}", Fail, `no column "agg" for aggregate_id`, "set tables[].columns.aggregate_id"},
		{"a missing header column fails", "{name: shop.outbox, headers: [trace]}", Fail, `no column "trace" listed in headers`, `remove "trace" from tables[].headers`},
		{"an INT payload fails", "{name: shop.int_payload}", Fail, `payload column "payload" is int`, "ALTER TABLE shop.int_payload MODIFY payload JSON"},
		{"an ENUM type fails", "{name: shop.enum_type}", Fail, `type column "type" is enum: the binlog carries its index`, "ALTER TABLE shop.enum_type MODIFY type VARCHAR(64)"},
		{"a DATETIME aggregate id fails", "{name: shop.date_agg}", Fail, `aggregate_id column "aggregateid" is datetime`, "MODIFY aggregateid VARCHAR(64)"},
		{"an integer id warns", "{name: shop.int_id}", Warn, `id column "id" is bigint`, "time-ordered UUIDs (UUIDv7) in CHAR(36)"},
		{"a mapped table with binary ids passes", "{name: shop.reliable, columns: {id: idempotency_key, aggregate_type: '-', aggregate_id: aggregate_id, type: topic, payload: payload}, headers: [trace]}", Pass,
			"shop.reliable: idempotency_key binary, aggregate_id varchar, topic varchar, payload mediumblob", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := runChecks(t, testConfig(t, srv, "root", "", "tables: ["+c.table+"]"))
			expect(t, rep, only(t, rep, NameTables), c.status, c.detail, c.fix)
		})
	}
}

func posOf(gtid, file string, pos uint32) event.Position {
	return event.Position{GTIDSet: gtid, File: file, Pos: pos}
}

// writeCheckpoint saves cp for key in cfg's checkpoint file.
func writeCheckpoint(t *testing.T, cfg *config.Config, key string, cp checkpoint.Checkpoint) {
	t.Helper()
	st, err := checkpoint.OpenFile(cfg.Checkpoint.Path)
	if err != nil {
		t.Fatal(err)
	}
	cp.UpdatedAt = time.Now().UTC()
	if err := st.Save(context.Background(), key, cp); err != nil {
		t.Fatal(err)
	}
}

// current is the server's binlog position now.
func current(t *testing.T) (gtid, file string, pos uint32) {
	t.Helper()
	db := srv.DB(t, "")
	if err := db.QueryRow("SELECT @@GLOBAL.gtid_binlog_pos").Scan(&gtid); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SHOW BINLOG STATUS").Scan(&file, &pos, new(sql.NullString), new(sql.NullString)); err != nil {
		t.Fatal(err)
	}
	return gtid, file, pos
}

func insertEvents(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		srv.Exec(t, fmt.Sprintf("INSERT INTO shop.outbox VALUES (UUID(), 'order', 'o%d', 'created', '{}')", i))
	}
}

func TestCheckpointOnThisServerPasses(t *testing.T) {
	insertEvents(t, 1)
	gtid, file, pos := current(t)
	cfg := testConfig(t, srv, "root", "", "sinks: [{name: a, type: stdout}, {name: b, type: stdout}]")
	writeCheckpoint(t, cfg, "a", checkpoint.Checkpoint{Flavor: "mariadb", ServerID: 1, Position: posOf(gtid, file, pos)})
	writeCheckpoint(t, cfg, "b", checkpoint.Checkpoint{Flavor: "mariadb", ServerID: 1, Position: posOf("", file, pos)})
	rep := runChecks(t, cfg)
	for _, name := range []string{NameCheckpointAvailable, NameCheckpointServer} {
		rs := rep.Get(name)
		if len(rs) != 2 || rs[0].Status != Pass || rs[1].Status != Pass {
			t.Errorf("want two PASS %s lines:\n%s", name, printed(rep))
		}
	}
}

// On the server a MariaDB checkpoint was read from, checkpoint_server
// compares its commit_time with the commit time of the transaction that
// ends at its File:Pos, as the relay's resume check does: another second is
// another history (two servers built alike), the same second passes, and a
// checkpoint without one is compared by GTID position alone.
func TestCheckpointOfAServerBuiltAlikeFailsByItsCommitTime(t *testing.T) {
	at := time.Unix(1_600_000_000, 0).UTC()
	conn, err := srv.DB(t, "").Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{fmt.Sprintf("SET timestamp = %d", at.Unix()), "INSERT INTO shop.outbox VALUES (UUID(), 'order', 'o1', 'created', '{}')"} {
		if _, err := conn.ExecContext(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	gtid, file, pos := current(t)
	commits := canal.NewCommitFinder(canal.ScanConfig{Host: "127.0.0.1", Port: uint16(srv.Port), User: "root",
		ServerID: testserver.ServerID() + 800, Flavor: "mariadb"})
	for _, c := range []struct {
		name   string
		commit time.Time
		status Status
		detail string
	}{
		{"the same commit time passes", at, Pass, "is in this server's history"},
		{"another commit time fails", at.Add(-time.Hour), Fail,
			fmt.Sprintf("comes from another history: the transaction that ends at %s:%d on this server committed at 2020-09-13T12:26:40Z, the checkpoint's committed at 2020-09-13T11:26:40Z", file, pos)},
		{"no commit time is not compared", time.Time{}, Pass, "is in this server's history"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(t, srv, "root", "")
			p := posOf(gtid, file, pos)
			p.ServerID = 1
			writeCheckpoint(t, cfg, "out", checkpoint.Checkpoint{Flavor: "mariadb", ServerID: 1, Position: p, CommitTime: c.commit})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rep, err := Run(ctx, cfg, Options{RetentionMin: 24 * time.Hour, Commits: commits})
			if err != nil {
				t.Fatal(err)
			}
			fix := ""
			if c.status == Fail {
				fix = "point source.host/source.port at the server the checkpoint was read from"
			}
			expect(t, rep, only(t, rep, NameCheckpointServer), c.status, c.detail, fix)
		})
	}
}

func TestPurgedCheckpointFailsWithTheRecoveryChoices(t *testing.T) {
	insertEvents(t, 1)
	gtid, file, pos := current(t)
	cfg := testConfig(t, srv, "root", "", "sinks: [{name: gtid, type: stdout}, {name: filepos, type: stdout}]")
	writeCheckpoint(t, cfg, "gtid", checkpoint.Checkpoint{Flavor: "mariadb", ServerID: 1, Position: posOf(gtid, file, pos)})
	writeCheckpoint(t, cfg, "filepos", checkpoint.Checkpoint{Flavor: "mariadb", ServerID: 1, Position: posOf("", file, pos)})

	srv.Exec(t, "FLUSH BINARY LOGS")
	insertEvents(t, 3)
	srv.Exec(t, "FLUSH BINARY LOGS")
	newest := purgeAllBut(t)

	rep := runChecks(t, cfg)
	rs := rep.Get(NameCheckpointAvailable)
	if len(rs) != 2 {
		t.Fatalf("want two checkpoint_available lines:\n%s", printed(rep))
	}
	recovery := []string{`delete the "gtid" entry from "checkpoints" in ` + cfg.Checkpoint.Path, "checkpoint.start: earliest (deliver from " + newest, "checkpoint.start: current"}
	seq := gtid[strings.LastIndex(gtid, "-")+1:]
	expect(t, rep, rs[0], Fail, fmt.Sprintf("sink \"gtid\": its checkpoint %s is no longer on the server: domain 0: the checkpoint is at seq_no %s but %s starts after", gtid, seq, newest), recovery[0])
	expect(t, rep, rs[0], Fail, "so 3 transaction(s)", recovery[1])
	expect(t, rep, rs[0], Fail, "were purged", recovery[2])
	expect(t, rep, rs[1], Fail, fmt.Sprintf("sink \"filepos\": its checkpoint's binlog %s was purged; the oldest binlog is now %s (2 file(s) purged", file, newest), `delete the "filepos" entry`)
	// The checkpoints are still this server's.
	servers := rep.Get(NameCheckpointServer)
	expect(t, rep, servers[0], Pass, "in this server's history", "")
	expect(t, rep, servers[1], Pass, "a file/position checkpoint", "")
}

// purgeAllBut purges every binlog but the newest. The server keeps a file
// that a dump thread still reads or that its binlog checkpoint still needs, so
// it retries, ending dump threads left by earlier tests.
func purgeAllBut(t *testing.T) string {
	t.Helper()
	_, newest, _ := current(t)
	db := srv.DB(t, "")
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := db.Exec("PURGE BINARY LOGS TO '" + newest + "'"); err != nil {
			t.Fatal(err)
		}
		var oldest string
		if err := db.QueryRow("SHOW BINARY LOGS").Scan(&oldest, new(sql.NullString)); err != nil {
			t.Fatal(err)
		}
		if oldest == newest {
			return newest
		}
		if time.Now().After(deadline) {
			t.Fatalf("binlogs before %s were never purged (oldest %s)", newest, oldest)
		}
		rows, err := db.Query("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		rows.Close()
		for _, id := range ids {
			_, _ = db.Exec(fmt.Sprintf("KILL %d", id))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestForeignCheckpointFails(t *testing.T) {
	gtid, file, pos := current(t)
	cases := []struct {
		name   string
		cp     checkpoint.Checkpoint
		status Status
		detail string
	}{
		{"a seq_no ahead of the server fails", checkpoint.Checkpoint{Flavor: "mariadb", ServerID: 1, Position: posOf("0-1-999999", file, pos)}, Fail,
			"0-1-999999 is ahead of this server's"},
		{"an unknown domain fails", checkpoint.Checkpoint{Flavor: "mariadb", ServerID: 1, Position: posOf("7-1-3", file, pos)}, Fail,
			"domain 7 (of 7-1-3) is unknown to this server"},
		{"a GTID of a server id this server never had fails", checkpoint.Checkpoint{Flavor: "mariadb", ServerID: 9, Position: posOf("0-9-1", file, pos)}, Fail,
			"0-9-1 was never written to this server's binlog"},
		{"a MySQL checkpoint fails", checkpoint.Checkpoint{Flavor: "mysql", ServerUUID: "3e11fa47-71ca-11e1-9e33-c80aa9429562", Position: posOf("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", "", 0)}, Fail,
			"saved from a mysql server, but this server is mariadb"},
		{"another server_id with this history warns", checkpoint.Checkpoint{Flavor: "mariadb", ServerID: 2, Position: posOf(gtid, file, pos)}, Warn,
			"saved from server_id 2, this server is 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(t, srv, "root", "")
			writeCheckpoint(t, cfg, "out", c.cp)
			rep := runChecks(t, cfg)
			fix := "otherwise point source.host/source.port at that server"
			if c.status == Fail {
				fix = "point source.host/source.port at a server that executed them"
				fix += " (the one the checkpoint was read from, or a replica that caught up), or wait for this one to catch up; or, to start afresh on this one, with the relay stopped, delete the \"out\" entry"
			}
			expect(t, rep, only(t, rep, NameCheckpointServer), c.status, c.detail, fix)
		})
	}
}

func TestUnreadableCheckpointFileFails(t *testing.T) {
	cfg := testConfig(t, srv, "root", "")
	if err := os.WriteFile(cfg.Checkpoint.Path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	rep := runChecks(t, cfg)
	expect(t, rep, only(t, rep, NameCheckpointAvailable), Fail, "cannot read the checkpoint store", "restore the file from a backup")
}

func TestUnreachableServerIsAnErrorNamingHostPortAndUser(t *testing.T) {
	cfg := testConfig(t, srv, "root", "")
	cfg.Source.User = "nobody"
	_, err := Run(context.Background(), cfg, Options{})
	want := fmt.Sprintf(`connect to source 127.0.0.1:%d as "nobody"`, srv.Port)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "Access denied") {
		t.Errorf("want %q with the server's error, got %v", want, err)
	}
}

func TestEndpointsTableIsReadAsTheRelayWould(t *testing.T) {
	srv.Exec(t, strings.Replace(webhook.EndpointsTableSchema, "CREATE TABLE IF NOT EXISTS outbox_endpoints", "CREATE TABLE shop.hooks_endpoints", 1),
		"INSERT INTO shop.hooks_endpoints (id, url, tenant) VALUES ('a', 'https://a.example/hook', NULL), ('b', 'https://b.example/hook', NULL)",
		"UPDATE shop.hooks_endpoints SET enabled = 0 WHERE id = 'b'")
	t.Cleanup(func() { srv.Exec(t, "DROP TABLE shop.hooks_endpoints") })
	sinks := func(table, tenant string) string {
		return fmt.Sprintf("sinks: [{name: hooks, type: webhook, webhook: {endpoints_table: {table: %s%s}}}]", table, tenant)
	}
	rep := runChecks(t, testConfig(t, srv, "root", "", sinks("shop.hooks_endpoints", "")))
	rs := rep.Get(NameTables)
	expect(t, rep, rs[len(rs)-1], Pass, "sink hooks: endpoints table shop.hooks_endpoints: 2 endpoints, 1 enabled", "")

	rep = runChecks(t, testConfig(t, srv, "root", "", sinks("shop.nope", "")))
	rs = rep.Get(NameTables)
	expect(t, rep, rs[len(rs)-1], Fail, "sink hooks: endpoints table", "deploy/outbox_endpoints.sql")

	rep = runChecks(t, testConfig(t, srv, "root", "", sinks("shop.hooks_endpoints", ", tenant_header: tenant")))
	rs = rep.Get(NameTables)
	expect(t, rep, rs[len(rs)-1], Fail, `tenant_header "tenant" is not a header of any outbox table`, "tables[].headers")

	// Bad rows WARN, one per line: the relay skips them and runs the
	// others. A row with a configured endpoint's name is named too, also
	// when it only differs from it in case.
	srv.Exec(t, "INSERT INTO shop.hooks_endpoints (id, url) VALUES ('c', 'http://10.1.2.3/hook'), ('d', 'ftp://d.example/'), ('BILLING', 'https://e.example/')")
	rep = runChecks(t, testConfig(t, srv, "root", "",
		"sinks: [{name: hooks, type: webhook, webhook: {endpoints: [{name: billing, url: \"https://billing.example/\"}], endpoints_table: {table: shop.hooks_endpoints}}}]"))
	rs = rep.Get(NameTables)
	r := rs[len(rs)-1]
	expect(t, rep, r, Warn, "sink hooks: endpoints table shop.hooks_endpoints: 2 endpoints, 1 enabled; 3 row(s) cannot be used", "endpoints_table.defaults.egress.allow")
	lines := strings.Split(r.Detail, "\n")
	if len(lines) != 4 || !strings.Contains(lines[1], `row "c"`) || !strings.Contains(lines[2], `row "d"`) || !strings.Contains(lines[3], `row "BILLING": has the name of endpoint hooks/billing`) {
		t.Errorf("want one line per bad row (c, d, BILLING), got %q", r.Detail)
	}
	if strings.Contains(r.Fix, "deploy/outbox_endpoints.sql") || !strings.Contains(r.Fix, "rename") || !strings.Contains(r.Fix, "no restart") {
		t.Errorf("fix %q does not fit bad rows", r.Fix)
	}
	var out bytes.Buffer
	PrintResult(&out, r)
	if n := strings.Count(out.String(), "\n"); n != 5 {
		t.Errorf("printed %d lines, want 5 (result, 3 rows, fix):\n%s", n, out.String())
	}
}

// The documented grants for the relay's user (docs/source.md) are what check
// asks for: a user given exactly those GRANT lines gets no WARN or FAIL about its
// privileges (privileges, server_id, log_slave_updates, tables).
func TestTheDocumentedGrantsSatisfyCheck(t *testing.T) {
	b, err := os.ReadFile("../docs/source.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "The relay's user")
	if !ok {
		t.Fatal(`docs/source.md has no "The relay's user" section`)
	}
	_, block, _ := strings.Cut(after, "```sql\n")
	block, _, _ = strings.Cut(block, "```")
	var grants []string
	for _, l := range strings.Split(block, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "GRANT ") {
			grants = append(grants, strings.TrimSuffix(strings.ReplaceAll(l, "'relay'@'%'", "USER"), ";"))
		}
	}
	if len(grants) == 0 {
		t.Fatalf("no GRANT in the block of docs/source.md:\n%s", block)
	}
	rep := runChecks(t, createUser(t, "p_readme_block", grants...))
	for _, name := range []string{NamePrivileges, NameServerID, NameReplicaUpdates, NameTables} {
		for _, r := range rep.Get(name) {
			if r.Status != Pass {
				t.Errorf("with the documented grants %v, %s is %s:\n%s", grants, name, r.Status, printed(rep))
			}
		}
	}
}

// A table the user may not read is told the GRANT, not to create it; a
// table that does not exist is told to create it.
func TestATableNotGrantedGetsAGrantNotACreate(t *testing.T) {
	cfg := createUser(t, "p_notable", "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO USER", "GRANT SELECT ON mysql.user TO USER")
	rep := runChecks(t, cfg)
	r := only(t, rep, NameTables)
	expect(t, rep, r, Fail, "cannot be read by 'p_notable'@'%'", "GRANT SELECT ON `shop`.`outbox` TO 'p_notable'@'%';")
	if strings.Contains(r.Fix, "CREATE TABLE") {
		t.Errorf("a table that exists but is not granted is told to create it: %s", r.Fix)
	}
	cfg = createUser(t, "p_nosuchtable", "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO USER", "GRANT SELECT ON shop.* TO USER")
	cfg.Tables = []config.Table{{Name: "shop.no_such_outbox"}}
	rep = runChecks(t, cfg)
	expect(t, rep, only(t, rep, NameTables), Fail, "does not exist", "CREATE TABLE `shop`.`no_such_outbox`")
}

// The endpoints table's rows are read for insecure settings too: a row's
// http:// url with credentials, plain and enc:v1 signing secrets, each a
// WARN naming the rows and quoting no secret.
func TestEndpointsTableRowsAreCheckedForInsecureSettings(t *testing.T) {
	const (
		plain = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		key   = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
		// plain, encrypted with key as enc:v1 (no associated data).
		v1 = "enc:v1:Zml4ZWRub25jZTEybSkL6qT1vHpgHF2smGz7ZSczwe+Y6Wf9qhmnB1ovikXaMyN06xcjOYSUjtSIHjCOzLJutDW4"
	)
	v2, err := webhook.EncryptSecret(key, plain, webhook.SecretRow{Table: "shop.insecure_endpoints", ID: "good", URL: "https://good.example/hook"})
	if err != nil {
		t.Fatal(err)
	}
	srv.Exec(t, strings.Replace(webhook.EndpointsTableSchema, "CREATE TABLE IF NOT EXISTS outbox_endpoints", "CREATE TABLE shop.insecure_endpoints", 1))
	t.Cleanup(func() { srv.Exec(t, "DROP TABLE shop.insecure_endpoints") })
	db := srv.DB(t, "shop")
	if _, err := db.Exec("INSERT INTO insecure_endpoints (id, url, secrets) VALUES ('good', 'https://good.example/hook', ?), ('plain', 'https://p.example/hook', ?), ('old', 'https://o.example/hook', ?), ('cred', 'http://u:PLANTEDpw@c.example/hook', NULL)", v2, plain, v1); err != nil {
		t.Fatal(err)
	}
	rep := runChecks(t, testConfig(t, srv, "root", "", fmt.Sprintf("sinks: [{name: hooks, type: webhook, webhook: {endpoints_table: {table: shop.insecure_endpoints, secrets_key: %q}}}]", key)))
	rs := rep.Get(NameInsecureSettings)
	if len(rs) != 3 {
		t.Fatalf("want 3 insecure_settings results, got %d:\n%s", len(rs), printed(rep))
	}
	expect(t, rep, rs[0], Warn, `sink hooks: endpoints table shop.insecure_endpoints, row "cred": url http://xxxxx@c.example/hook is http://`, "https://")
	expect(t, rep, rs[1], Warn, "holds plain signing secrets (rows plain)", "outbox-relay endpoints encrypt-secret --table shop.insecure_endpoints --id ID --url URL")
	expect(t, rep, rs[2], Warn, "holds enc:v1 secrets (rows old), which are not bound to their row", "store the enc:v2 value")
	if out := printed(rep); strings.Contains(out, "PLANTED") || strings.Contains(out, plain[6:]) || strings.Contains(out, key) {
		t.Errorf("the report quotes a secret:\n%s", out)
	}
}
