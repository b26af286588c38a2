package source

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
)

// ServerInfo is what the relay needs to know about the source server.
type ServerInfo struct {
	Flavor     string // "mysql" or "mariadb"
	Version    string
	ServerUUID string // MySQL @@server_uuid; "" on MariaDB
	ServerID   uint32
	// GTIDMode is true when positions can be GTIDs: always on MariaDB,
	// gtid_mode=ON on MySQL.
	GTIDMode bool
}

// ReadInfo reads the server's flavor, version, identity and GTID mode
// (Inspect also checks the flavor against source.flavor).
func ReadInfo(ctx context.Context, db *sql.DB) (ServerInfo, error) {
	var info ServerInfo
	if err := db.QueryRowContext(ctx, "SELECT VERSION(), @@server_id").Scan(&info.Version, &info.ServerID); err != nil {
		return info, fmt.Errorf("read server version: %w", err)
	}
	if strings.Contains(strings.ToLower(info.Version), "mariadb") {
		info.Flavor = mysql.MariaDBFlavor
		info.GTIDMode = true
		return info, nil
	}
	info.Flavor = mysql.MySQLFlavor
	var mode string
	if err := db.QueryRowContext(ctx, "SELECT @@server_uuid, @@GLOBAL.gtid_mode").Scan(&info.ServerUUID, &mode); err != nil {
		return info, fmt.Errorf("read server_uuid and gtid_mode: %w", err)
	}
	info.GTIDMode = strings.EqualFold(mode, "ON")
	return info, nil
}

// CurrentPosition is the server's position now: where a relay with no
// checkpoint and start=current begins.
func CurrentPosition(ctx context.Context, db *sql.DB, info ServerInfo) (event.Position, error) {
	var pos event.Position
	file, off, err := binlogStatus(ctx, db)
	if err != nil {
		return pos, err
	}
	pos.File, pos.Pos = file, off
	if info.GTIDMode {
		q := "SELECT @@GLOBAL.gtid_executed"
		if info.Flavor == mysql.MariaDBFlavor {
			q = "SELECT @@GLOBAL.gtid_binlog_pos"
		}
		if err := db.QueryRowContext(ctx, q).Scan(&pos.GTIDSet); err != nil {
			return pos, fmt.Errorf("read current GTID position: %w", err)
		}
		pos.GTIDSet = strings.ReplaceAll(pos.GTIDSet, "\n", "")
	}
	return pos, nil
}

// EarliestPosition is the start of the oldest binlog still on the server.
func EarliestPosition(ctx context.Context, db *sql.DB, info ServerInfo) (event.Position, error) {
	files, err := BinaryLogs(ctx, db)
	if err != nil {
		return event.Position{}, err
	}
	if len(files) == 0 {
		return event.Position{}, errors.New("the server lists no binary logs: enable log_bin")
	}
	pos := event.Position{File: files[0].Name, Pos: 4}
	if info.GTIDMode && info.Flavor == mysql.MySQLFlavor {
		// Everything not purged: a GTID start from gtid_purged. When nothing
		// was purged the set is empty, which is a valid GTID start too (the
		// reader starts by GTID from a GTID-less position at a file's start),
		// so every later position carries the executed set.
		if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_purged").Scan(&pos.GTIDSet); err != nil {
			return pos, fmt.Errorf("read gtid_purged: %w", err)
		}
		pos.GTIDSet = strings.ReplaceAll(pos.GTIDSet, "\n", "")
	}
	// MariaDB: file/pos; the reader takes the GTID position from the file's
	// GTID list event.
	return pos, nil
}

// BinlogFile is one row of SHOW BINARY LOGS.
type BinlogFile struct {
	Name string
	Size int64
}

// BinaryLogs lists the binlog files the server still has, oldest first.
func BinaryLogs(ctx context.Context, db *sql.DB) ([]BinlogFile, error) {
	rows, err := db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return nil, fmt.Errorf("SHOW BINARY LOGS: %w (the relay's user needs REPLICATION CLIENT, and log_bin must be on)", err)
	}
	defer rows.Close()
	var files []BinlogFile
	for rows.Next() {
		vals, err := ScanRow(rows)
		if err != nil {
			return nil, err
		}
		f := BinlogFile{Name: vals[0]}
		if len(vals) > 1 {
			f.Size, _ = strconv.ParseInt(vals[1], 10, 64)
		}
		files = append(files, f)
	}
	return files, rows.Err()
}

// FileNames returns the files' names, in order.
func FileNames(files []BinlogFile) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.Name
	}
	return out
}

func binlogStatus(ctx context.Context, db *sql.DB) (string, uint32, error) {
	var lastErr error
	for _, q := range []string{"SHOW BINARY LOG STATUS", "SHOW MASTER STATUS"} {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			lastErr = err
			continue
		}
		defer rows.Close()
		if !rows.Next() {
			if err := rows.Err(); err != nil {
				return "", 0, err
			}
			return "", 0, errors.New("the server reports no binlog status: binary logging is off; start the server with log_bin (--log-bin)")
		}
		vals, err := ScanRow(rows)
		if err != nil {
			return "", 0, err
		}
		pos, _ := strconv.ParseUint(vals[1], 10, 32)
		return vals[0], uint32(pos), nil
	}
	return "", 0, fmt.Errorf("read binlog status: %w (the relay's user needs REPLICATION CLIENT)", lastErr)
}

// ScanRow reads the current row as strings (NULL as ""), whatever its
// columns: SHOW statements differ between servers and versions.
func ScanRow(rows *sql.Rows) ([]string, error) {
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = v.String
	}
	return out, nil
}

// CheckTables verifies that every outbox table exists and has every mapped
// column, so a wrong mapping is an error at startup, not at the first event.
func CheckTables(ctx context.Context, db *sql.DB, tables []config.Table) error {
	var problems []string
	for _, t := range tables {
		schema, name := t.SchemaTable()
		rows, err := db.QueryContext(ctx, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", schema, name)
		if err != nil {
			return fmt.Errorf("read columns of %s.%s: %w", schema, name, err)
		}
		have := map[string]bool{}
		for rows.Next() {
			var c string
			if err := rows.Scan(&c); err != nil {
				rows.Close()
				return err
			}
			have[strings.ToLower(c)] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(have) == 0 {
			problems = append(problems, fmt.Sprintf("outbox table %s.%s does not exist (or the relay's user cannot SELECT it): create it, or fix tables[].name", schema, name))
			continue
		}
		check := func(field, col string) {
			if col = config.Column(col); col != "" && !have[strings.ToLower(col)] {
				problems = append(problems, fmt.Sprintf("outbox table %s.%s has no column %q for %s: set tables[].columns.%s to an existing column", schema, name, col, field, field))
			}
		}
		check("id", t.Columns.ID)
		check("aggregate_type", t.Columns.AggregateType)
		check("aggregate_id", t.Columns.AggregateID)
		check("type", t.Columns.Type)
		check("payload", t.Columns.Payload)
		if config.PayloadPath(t.Columns.TraceParent) == nil {
			check("traceparent", t.Columns.TraceParent)
		}
		if config.PayloadPath(t.Columns.TraceState) == nil {
			check("tracestate", t.Columns.TraceState)
		}
		for _, h := range t.Headers {
			if !have[strings.ToLower(h)] {
				problems = append(problems, fmt.Sprintf("outbox table %s.%s has no column %q listed in headers: remove it from tables[].headers or add the column", schema, name, h))
			}
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// ReplicaOf returns the primary a server replicates from ("" when it does
// not), and whether that could be read at all.
func ReplicaOf(ctx context.Context, db *sql.DB) (string, bool) {
	for _, q := range []string{"SHOW REPLICA STATUS", "SHOW SLAVE STATUS"} {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			continue
		}
		cols, _ := rows.Columns()
		host, port := "", ""
		found := false
		for rows.Next() {
			found = true
			vals, err := ScanRow(rows)
			if err != nil {
				break
			}
			for i, c := range cols {
				switch strings.ToLower(c) {
				case "master_host", "source_host":
					host = vals[i]
				case "master_port", "source_port":
					port = vals[i]
				}
			}
		}
		rows.Close()
		if !found {
			return "", true
		}
		if host == "" {
			host = "a primary"
		} else if port != "" {
			host += ":" + port
		}
		return host, true
	}
	// MariaDB 10.5+ wants SLAVE MONITOR for SHOW SLAVE STATUS, but tells
	// anyone whether its replication threads run and which GTIDs it has
	// replicated: running means a replica; neither means none.
	var name, running, slavePos string
	if err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Slave_running'").Scan(&name, &running); err != nil {
		return "", false
	}
	if strings.EqualFold(running, "ON") {
		return "a primary", true
	}
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_slave_pos").Scan(&slavePos); err == nil && slavePos == "" {
		return "", true
	}
	return "", false // a stopped replica, perhaps
}
