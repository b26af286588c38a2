package source

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/position"
)

// ServerState is what a server says about the GTIDs and binlogs it has: the
// inputs of the resume rule.
type ServerState struct {
	Info  ServerInfo
	Files []BinlogFile
	// MySQL
	Executed, Purged string
	// MariaDB
	BinlogPos, BinlogState, OldestList string
	// History is what ReadHistory read for one position; nil before.
	History *History
}

// History is the server's GTID position at a checkpoint's own File:Pos, on
// the server whose binlog that is (OwnBinlog).
type History struct {
	Pos event.Position
	// At is BINLOG_GTID_POS(File, Pos); nil when no event ends there.
	At *string
	// Commit is what ReadCommit read; nil before.
	Commit *CommitHistory
}

// CommitHistory is when the checkpoint's last transaction committed, and
// when the transaction that ends at its File:Pos committed on the server.
type CommitHistory struct {
	Checkpoint time.Time
	Server     time.Time
	// Found is false when no transaction of the server's binlog ends at
	// File:Pos.
	Found bool
}

// CommitFinder reads the commit time of the transaction that ends at
// file:pos in the server's binlog (canal.CommitFinder): ok false when no
// transaction ends there. size is file's size in SHOW BINARY LOGS.
type CommitFinder interface {
	CommitAt(ctx context.Context, file string, pos uint32, size int64) (at time.Time, ok bool, err error)
}

// ReadServerState reads the server's GTID state and binlog list.
func ReadServerState(ctx context.Context, db *sql.DB, info ServerInfo) (ServerState, error) {
	s := ServerState{Info: info}
	var err error
	if s.Files, err = BinaryLogs(ctx, db); err != nil {
		return s, err
	}
	clean := func(v *string) { *v = strings.ReplaceAll(*v, "\n", "") }
	switch {
	case info.Flavor == mysql.MariaDBFlavor:
		if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_pos, @@GLOBAL.gtid_binlog_state").Scan(&s.BinlogPos, &s.BinlogState); err != nil {
			return s, fmt.Errorf("read gtid_binlog_pos: %w", err)
		}
		if len(s.Files) > 0 {
			if s.OldestList, err = OldestGTIDList(ctx, db, s.Files[0].Name); err != nil {
				return s, err
			}
		}
	case info.GTIDMode:
		if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_executed, @@GLOBAL.gtid_purged").Scan(&s.Executed, &s.Purged); err != nil {
			return s, fmt.Errorf("read gtid_executed and gtid_purged: %w", err)
		}
		clean(&s.Executed)
		clean(&s.Purged)
	}
	return s, nil
}

// OwnBinlog reports whether pos is a MariaDB GTID position read from this
// very server's binlog (it recorded this server's server_id, and the binlog
// coordinates of its last transaction) whose file the server still has:
// then its File:Pos can be checked against its GTIDs (position.MariaDBHistory).
// A replica, even with the same file names, has another server_id; a
// checkpoint of an earlier version recorded none; a purged file leaves
// the GTID rule alone.
func (s ServerState) OwnBinlog(pos event.Position) bool {
	if s.Info.Flavor != mysql.MariaDBFlavor || pos.GTIDSet == "" || pos.File == "" || pos.Pos <= 4 ||
		pos.ServerID == 0 || pos.ServerID != s.Info.ServerID {
		return false
	}
	return slices.Contains(FileNames(s.Files), pos.File)
}

// ReadHistory reads, when OwnBinlog(pos), the server's GTID position at
// pos.File:pos.Pos, for Gaps to compare with pos.
func (s *ServerState) ReadHistory(ctx context.Context, db *sql.DB, pos event.Position) error {
	s.History = nil
	if !s.OwnBinlog(pos) {
		return nil
	}
	var at sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, ?)", pos.File, pos.Pos).Scan(&at); err != nil {
		return fmt.Errorf("read the GTID position at %s:%d (BINLOG_GTID_POS): %w", pos.File, pos.Pos, err)
	}
	h := &History{Pos: pos}
	if at.Valid {
		h.At = &at.String
	}
	s.History = h
	return nil
}

// ReadCommit reads, when ReadHistory read pos's own File:Pos and found
// the checkpoint's GTID position there, when the transaction that ends
// there committed, for Gaps to compare with commit, the checkpoint's
// (position.MariaDBCommit). A zero commit (a checkpoint saved before its
// first transaction, or by a version before 0.2) is not compared: nothing
// is read.
func (s *ServerState) ReadCommit(ctx context.Context, find CommitFinder, pos event.Position, commit time.Time) error {
	h := s.History
	if h == nil || h.Pos != pos || h.At == nil || commit.IsZero() || pos.Table != nil {
		return nil
	}
	if foreign, err := position.MariaDBHistory(pos.GTIDSet, pos.File, pos.Pos, h.At); err != nil || len(foreign) > 0 {
		return nil // Gaps says so; nothing more to read
	}
	i := slices.IndexFunc(s.Files, func(f BinlogFile) bool { return f.Name == pos.File })
	if i < 0 {
		return nil
	}
	at, ok, err := find.CommitAt(ctx, pos.File, pos.Pos, s.Files[i].Size)
	if err != nil {
		return fmt.Errorf("read when the transaction that ends at %s:%d committed: %w", pos.File, pos.Pos, err)
	}
	h.Commit = &CommitHistory{Checkpoint: commit, Server: at, Found: ok}
	return nil
}

// Gaps applies the resume rule (package position) to pos, and, when
// ReadHistory read pos's own File:Pos, position.MariaDBHistory (and
// position.MariaDBCommit when ReadCommit read its commit time).
func (s ServerState) Gaps(pos event.Position) (position.Gaps, error) {
	switch {
	case pos.GTIDSet != "" && s.Info.Flavor == mysql.MariaDBFlavor:
		oldest := ""
		if len(s.Files) > 0 {
			oldest = s.Files[0].Name
		}
		g, err := position.MariaDBGaps(pos.GTIDSet, s.BinlogPos, s.BinlogState, oldest, s.OldestList)
		if err != nil || s.History == nil || s.History.Pos != pos {
			return g, err
		}
		g.Foreign, err = position.MariaDBHistory(pos.GTIDSet, pos.File, pos.Pos, s.History.At)
		if c := s.History.Commit; err == nil && len(g.Foreign) == 0 && c != nil {
			g.Foreign = position.MariaDBCommit(pos.File, pos.Pos, c.Checkpoint, c.Server, c.Found)
		}
		return g, err
	case pos.GTIDSet != "" && s.Info.GTIDMode:
		return position.MySQLGaps(pos.GTIDSet, s.Executed, s.Purged)
	case pos.GTIDSet != "":
		return position.Gaps{Missing: []string{"the checkpoint is a GTID set but gtid_mode is OFF on this server"}}, nil
	case s.Info.GTIDMode && s.Info.Flavor == mysql.MySQLFlavor && pos.Pos <= 4:
		// The start of a file before any GTID: the empty set.
		return position.MySQLGaps("", s.Executed, s.Purged)
	}
	return position.FileGaps(pos, FileNames(s.Files)), nil
}

// CheckResume tells whether the server can serve a stream from pos. Its
// error wraps position.ErrLost (the server purged what comes after pos) or
// position.ErrNotInHistory (pos holds transactions the server never
// executed, or was read from another server's binlog with the same GTIDs),
// lists the transactions, and names the recovery choices.
func CheckResume(ctx context.Context, db *sql.DB, info ServerInfo, pos event.Position) error {
	return CheckResumeAt(ctx, db, info, pos, time.Time{}, nil)
}

// CheckResumeAt is CheckResume for a checkpoint whose last transaction
// committed at commit (checkpoint.Checkpoint.CommitTime; zero: unknown):
// on the MariaDB server whose binlog pos was read from (OwnBinlog), the
// transaction that ends at pos.File:pos.Pos must have committed then too,
// as find reads it (ReadCommit). A nil find reads nothing.
func CheckResumeAt(ctx context.Context, db *sql.DB, info ServerInfo, pos event.Position, commit time.Time, find CommitFinder) error {
	s, err := ReadServerState(ctx, db, info)
	if err != nil {
		return err
	}
	if err := s.ReadHistory(ctx, db, pos); err != nil {
		return err
	}
	if find != nil {
		if err := s.ReadCommit(ctx, find, pos, commit); err != nil {
			return err
		}
	}
	g, err := s.Gaps(pos)
	if err != nil {
		return err
	}
	return g.Err(pos)
}

// OldestGTIDList is the MariaDB GTID position at the start of file: the
// Gtid_list event that heads it, which BINLOG_GTID_POS reads for us; SHOW
// BINLOG EVENTS is the fallback.
func OldestGTIDList(ctx context.Context, db *sql.DB, file string) (string, error) {
	var pos sql.NullString
	err := db.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, 4)", file).Scan(&pos)
	if err == nil && pos.Valid {
		return pos.String, nil
	}
	rows, err2 := db.QueryContext(ctx, "SHOW BINLOG EVENTS IN "+quote(file)+" LIMIT 5")
	if err2 != nil {
		return "", fmt.Errorf("read the GTID list of %s: BINLOG_GTID_POS: %v; SHOW BINLOG EVENTS: %w", file, err, err2)
	}
	defer rows.Close()
	for rows.Next() {
		vals, err := ScanRow(rows)
		if err != nil {
			return "", err
		}
		if len(vals) >= 6 && vals[2] == "Gtid_list" {
			return strings.Trim(vals[5], "[]"), nil
		}
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no Gtid_list event at the start of %s", file)
}

// quote makes s a single-quoted SQL string literal.
func quote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", "''").Replace(s) + "'"
}
