package check

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/position"
	"github.com/outbox-relay/outbox-relay/source"
)

// loadCheckpoints reads the stored checkpoint of every pipeline that has
// one, without creating anything: a missing checkpoint file or table means
// no checkpoints yet.
func loadCheckpoints(ctx context.Context, cfg *config.Config) (map[string]checkpoint.Checkpoint, error) {
	var store checkpoint.Store
	switch cfg.Checkpoint.Store {
	case "mysql":
		db, err := checkpoint.OpenDB(cfg.Checkpoint.DSN.Reveal())
		if err != nil {
			return nil, err
		}
		defer db.Close()
		var n int
		err = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", cfg.Checkpoint.Table).Scan(&n)
		if err != nil {
			return nil, checkpoint.Denied(ctx, db, fmt.Errorf("checkpoint.dsn: read the checkpoint table: %w", err))
		}
		if n == 0 {
			return map[string]checkpoint.Checkpoint{}, nil
		}
		st, err := checkpoint.OpenMySQLReadOnly(db, cfg.Checkpoint.Table)
		if err != nil {
			return nil, err
		}
		store = st
	default:
		if _, err := os.Stat(cfg.Checkpoint.Path); errors.Is(err, fs.ErrNotExist) {
			return map[string]checkpoint.Checkpoint{}, nil
		}
		st, err := checkpoint.OpenFile(cfg.Checkpoint.Path)
		if err != nil {
			return nil, err
		}
		store = st
	}
	defer store.Close()
	out := map[string]checkpoint.Checkpoint{}
	for _, key := range cfg.PipelineNames() {
		cp, _, err := gateway.CursorOf(ctx, store, key) // a webhook endpoint without its own: the shared one
		if errors.Is(err, checkpoint.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[key] = cp
	}
	return out, nil
}

func hasGTIDCheckpoint(cps map[string]checkpoint.Checkpoint) bool {
	for _, cp := range cps {
		if cp.Position.GTIDSet != "" {
			return true
		}
	}
	return false
}

func checkpointResults(ctx context.Context, db *sql.DB, s server, cfg *config.Config, cps map[string]checkpoint.Checkpoint, cpErr error, commits source.CommitFinder) []Result {
	if cpErr != nil {
		return []Result{{Name: NameCheckpointAvailable, Status: Fail,
			Detail: fmt.Sprintf("cannot read the checkpoint store: %v", cpErr),
			Fix:    storeFix(cfg)}}
	}
	if len(cps) == 0 {
		return []Result{
			{Name: NameCheckpointAvailable, Detail: fmt.Sprintf("no sink has a checkpoint yet: each starts at checkpoint.start (%s)", cfg.Checkpoint.Start)},
			{Name: NameCheckpointServer, Detail: "no checkpoint to compare"},
		}
	}
	files, filesErr := source.BinaryLogs(ctx, db)
	var oldestList string
	var oldestErr error
	if filesErr == nil && len(files) > 0 && s.flavor == flavorMariaDB {
		oldestList, oldestErr = source.OldestGTIDList(ctx, db, files[0].Name)
	}
	var avail, owner []Result
	for _, key := range cfg.PipelineNames() {
		cp, ok := cps[key]
		if !ok {
			continue
		}
		recovery := recoveryFix(cfg, key, files)
		var a Result
		switch {
		case filesErr != nil:
			a = Result{Name: NameCheckpointAvailable, Status: Warn,
				Detail: fmt.Sprintf("sink %q: not checked, the server's binlogs cannot be listed: %v", key, filesErr),
				Fix:    "see the log_bin and privileges checks"}
		case cp.Position.GTIDSet != "" && s.flavor == flavorMySQL:
			a = mysqlAvailable(key, cp, s.vars["gtid_purged"], recovery)
		case cp.Position.GTIDSet != "" && s.flavor == flavorMariaDB && oldestErr != nil:
			a = Result{Name: NameCheckpointAvailable, Status: Warn,
				Detail: fmt.Sprintf("sink %q: not checked: %v", key, oldestErr),
				Fix:    "grant the relay's user REPLICATION SLAVE and BINLOG MONITOR"}
		case cp.Position.GTIDSet != "" && s.flavor == flavorMariaDB:
			a = mariadbAvailable(key, cp, files[0].Name, oldestList, recovery)
		default:
			a = fileAvailable(key, cp, files, recovery)
		}
		avail = append(avail, a)
		owner = append(owner, serverDecision(key, cp, s, history(ctx, db, s, files, cp, commits), recoveryFix(cfg, key, nil)))
	}
	return append(avail, owner...)
}

// recoveryFix names the ways out when a sink's checkpoint cannot resume.
func recoveryFix(cfg *config.Config, key string, files []source.BinlogFile) string {
	remove := fmt.Sprintf("with the relay stopped, delete the %q entry from \"checkpoints\" in %s", key, cfg.Checkpoint.Path)
	if cfg.Checkpoint.Store == "mysql" {
		remove = fmt.Sprintf("DELETE FROM `%s` WHERE name = %s in the checkpoint.dsn database", cfg.Checkpoint.Table, sqlString(key))
	}
	earliest := "checkpoint.start: earliest (deliver from the oldest binlog still on the server: only what was purged is lost)"
	if len(files) > 0 {
		var total int64
		for _, f := range files {
			total += f.Size
		}
		earliest = fmt.Sprintf("checkpoint.start: earliest (deliver from %s, the oldest binlog still on the server, reading %d file(s), %s: only what was purged is lost)", files[0].Name, len(files), bytesText(total))
	}
	return fmt.Sprintf("to resume accepting the gap, %s and restart with %s, or with checkpoint.start: current (start now: everything since the checkpoint is skipped)", remove, earliest)
}

func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// mysqlAvailable: a MySQL GTID checkpoint resumes only if every purged GTID
// is in it (the server would otherwise have to send what it no longer has).
func mysqlAvailable(key string, cp checkpoint.Checkpoint, purged, recovery string) Result {
	r := Result{Name: NameCheckpointAvailable}
	g, err := position.MySQLGaps(cp.Position.GTIDSet, cp.Position.GTIDSet, purged)
	switch {
	case err != nil:
		r.Status = Fail
		r.Detail = fmt.Sprintf("sink %q: %v", key, err)
		r.Fix = recovery
	case len(g.Purged) > 0:
		r.Status = Fail
		r.Detail = fmt.Sprintf("sink %q: its checkpoint is no longer on the server: %s", key, strings.Join(g.Purged, "; "))
		r.Fix = recovery
	default:
		r.Detail = fmt.Sprintf("sink %q: every transaction after its checkpoint is still in the binlog", key)
	}
	return r
}

// mariadbAvailable: a MariaDB GTID position resumes only if, in every domain
// the oldest binlog's GTID list names, it is at or past that list's seq_no.
func mariadbAvailable(key string, cp checkpoint.Checkpoint, oldestFile, oldestList, recovery string) Result {
	r := Result{Name: NameCheckpointAvailable}
	// Only the purged side here: the server side is checkpoint_server's.
	g, err := position.MariaDBGaps(cp.Position.GTIDSet, cp.Position.GTIDSet, "", oldestFile, oldestList)
	if err != nil {
		r.Status = Fail
		r.Detail = fmt.Sprintf("sink %q: %v", key, err)
		r.Fix = recovery
		return r
	}
	if len(g.Purged) > 0 {
		r.Status = Fail
		r.Detail = fmt.Sprintf("sink %q: its checkpoint %s is no longer on the server: %s", key, cp.Position.GTIDSet, strings.Join(g.Purged, "; "))
		r.Fix = recovery
		return r
	}
	r.Detail = fmt.Sprintf("sink %q: its checkpoint %s is in the binlogs (oldest %s starts at %s)", key, cp.Position.GTIDSet, oldestFile, orEmpty(oldestList))
	return r
}

// fileAvailable: a file/position checkpoint resumes only if its file exists.
func fileAvailable(key string, cp checkpoint.Checkpoint, files []source.BinlogFile, recovery string) Result {
	r := Result{Name: NameCheckpointAvailable}
	if len(files) == 0 {
		r.Status = Fail
		r.Detail = fmt.Sprintf("sink %q: the server lists no binary logs, so %s is gone", key, cp.Position)
		r.Fix = recovery
		return r
	}
	for _, f := range files {
		if f.Name == cp.Position.File {
			r.Detail = fmt.Sprintf("sink %q: binlog %s is still on the server", key, f.Name)
			return r
		}
	}
	r.Status = Fail
	r.Detail = fmt.Sprintf("sink %q: its checkpoint's binlog %s was purged; the oldest binlog is now %s", key, cp.Position.File, files[0].Name)
	if a, b, ok := fileNumbers(cp.Position.File, files[0].Name); ok && b > a {
		r.Detail += fmt.Sprintf(" (%d file(s) purged that the sink had not finished)", b-a)
	}
	r.Fix = recovery
	return r
}

// fileNumbers returns the numeric suffixes of two binlog names of one base.
func fileNumbers(a, b string) (int64, int64, bool) {
	ba, na, ok1 := strings.Cut(a, ".")
	bb, nb, ok2 := strings.Cut(b, ".")
	if !ok1 || !ok2 || ba != bb {
		return 0, 0, false
	}
	x, err1 := strconv.ParseInt(na, 10, 64)
	y, err2 := strconv.ParseInt(nb, 10, 64)
	return x, y, err1 == nil && err2 == nil
}

// history is what differs between a MariaDB checkpoint and the binlog of
// the server it was read from, when this is that server and still has the
// file (source.ServerState.OwnBinlog): the GTID position at its File:Pos,
// and, with commits, when the transaction that ends there committed. None
// otherwise, or when it cannot be read (the relay's own resume check reads
// it again and says why).
func history(ctx context.Context, db *sql.DB, s server, files []source.BinlogFile, cp checkpoint.Checkpoint, commits source.CommitFinder) []string {
	pos := cp.Position
	id, _ := strconv.ParseUint(s.vars["server_id"], 10, 32)
	st := source.ServerState{Info: source.ServerInfo{Flavor: s.flavor, ServerID: uint32(id)}, Files: files}
	if s.flavor != flavorMariaDB || st.ReadHistory(ctx, db, pos) != nil || st.History == nil {
		return nil
	}
	diff, err := position.MariaDBHistory(pos.GTIDSet, pos.File, pos.Pos, st.History.At)
	if err != nil || len(diff) > 0 || commits == nil {
		return diff
	}
	if st.ReadCommit(ctx, commits, pos, cp.CommitTime) != nil || st.History.Commit == nil {
		return nil
	}
	c := st.History.Commit
	return position.MariaDBCommit(pos.File, pos.Pos, c.Checkpoint, c.Server, c.Found)
}

// serverDecision judges whether this server can serve a checkpoint by GTID
// arithmetic: every GTID of the checkpoint executed here, and, on the
// MariaDB server whose binlog the checkpoint was read from, that binlog
// agreeing at the checkpoint's File:Pos (foreign lists what differs). The
// server's identity decides nothing else (after a failover the new primary
// serves the checkpoints read from the old one); a changed identity is only
// reported.
func serverDecision(key string, cp checkpoint.Checkpoint, s server, foreignHistory []string, recovery string) Result {
	r := Result{Name: NameCheckpointServer}
	foreign := func(detail string) Result {
		r.Status = Fail
		r.Detail = fmt.Sprintf("sink %q: %s", key, detail)
		r.Fix = "point source.host/source.port at a server that executed them (the one the checkpoint was read from, or a replica that caught up), or wait for this one to catch up; or, to start afresh on this one, " + strings.TrimPrefix(recovery, "to resume accepting the gap, ")
		return r
	}
	if cp.Flavor != "" && cp.Flavor != s.flavor {
		return foreign(fmt.Sprintf("the checkpoint was saved from a %s server, but this server is %s", cp.Flavor, s.flavor))
	}
	if cp.Position.GTIDSet == "" {
		r.Detail = fmt.Sprintf("sink %q: a file/position checkpoint (%s): its file is checked by checkpoint_available", key, cp.Position)
		return r
	}
	var (
		g   position.Gaps
		err error
	)
	if s.flavor == flavorMySQL {
		g, err = position.MySQLGaps(cp.Position.GTIDSet, s.vars["gtid_executed"], "")
	} else {
		g, err = position.MariaDBGaps(cp.Position.GTIDSet, s.vars["gtid_binlog_pos"], s.vars["gtid_binlog_state"], "", "")
	}
	if err != nil {
		return foreign(err.Error())
	}
	if len(g.Missing) > 0 {
		return foreign("this server has not executed every transaction of the checkpoint " + cp.Position.GTIDSet + ": " + strings.Join(g.Missing, "; "))
	}
	if len(foreignHistory) > 0 {
		r := foreign("the checkpoint " + cp.Position.GTIDSet + " comes from another history: " + strings.Join(foreignHistory, "; "))
		r.Fix = "point source.host/source.port at the server the checkpoint was read from; or, if this server is the one to read (the checkpoint is another server's: a relay pointed at the wrong server, a server rebuilt under an old server_id), " + strings.TrimPrefix(recovery, "to resume accepting the gap, ")
		return r
	}
	if s.flavor == flavorMySQL {
		uuid := s.vars["server_uuid"]
		if cp.ServerUUID != "" && uuid != "" && cp.ServerUUID != uuid {
			r.Detail = fmt.Sprintf("sink %q: saved from server %s; this server (%s) has executed every GTID of it, so it resumes here (a failover, or reading another replica)", key, cp.ServerUUID, uuid)
			return r
		}
		r.Detail = fmt.Sprintf("sink %q: every GTID of the checkpoint is executed on this server (%s)", key, orEmpty(uuid))
		return r
	}
	id, _ := strconv.ParseUint(s.vars["server_id"], 10, 32)
	if cp.ServerID != 0 && uint32(id) != cp.ServerID {
		r.Status = Warn
		r.Detail = fmt.Sprintf("sink %q: the checkpoint was saved from server_id %d, this server is %d; its GTIDs are in this server's binlog history, so this looks like a failover or a changed server_id", key, cp.ServerID, id)
		r.Fix = "nothing, if this server took over from the one the checkpoint was read from; otherwise point source.host/source.port at that server"
		return r
	}
	r.Detail = fmt.Sprintf("sink %q: %s is in this server's history (gtid_binlog_pos %s)", key, orEmpty(cp.Position.GTIDSet), orEmpty(s.vars["gtid_binlog_pos"]))
	return r
}

// storeFix is the fix for a checkpoint store that cannot be read: a MySQL
// store's error names the GRANT it lacks, when it lacks one.
func storeFix(cfg *config.Config) string {
	if cfg.Checkpoint.Store == "mysql" {
		return "fix checkpoint.dsn (server, user, password, database), or run the GRANT the error names (the store's user needs " + checkpoint.StoreGrants + " on its database)"
	}
	return "fix checkpoint.path, or restore the file from a backup"
}
