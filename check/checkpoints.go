package check

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
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
			return nil, fmt.Errorf("checkpoint.dsn: read the checkpoint table: %w", err)
		}
		if n == 0 {
			return map[string]checkpoint.Checkpoint{}, nil
		}
		st, err := checkpoint.OpenMySQL(ctx, db, cfg.Checkpoint.Table)
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
		cp, err := store.Load(ctx, key)
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

// oldestGTIDList is the MariaDB GTID position at the start of file: the
// Gtid_list event that heads it, which BINLOG_GTID_POS reads for us; SHOW
// BINLOG EVENTS is the fallback.
func oldestGTIDList(ctx context.Context, db *sql.DB, file string) (string, error) {
	var pos sql.NullString
	err := db.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, 4)", file).Scan(&pos)
	if err == nil && pos.Valid {
		return pos.String, nil
	}
	rows, err2 := db.QueryContext(ctx, "SHOW BINLOG EVENTS IN "+sqlString(file)+" LIMIT 5")
	if err2 != nil {
		return "", fmt.Errorf("read the GTID list of %s: BINLOG_GTID_POS: %v; SHOW BINLOG EVENTS: %w", file, err, err2)
	}
	defer rows.Close()
	for rows.Next() {
		vals, err := canal.ScanRow(rows)
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

func checkpointResults(ctx context.Context, db *sql.DB, s server, cfg *config.Config, cps map[string]checkpoint.Checkpoint, cpErr error) []Result {
	if cpErr != nil {
		return []Result{{Name: NameCheckpointAvailable, Status: Fail,
			Detail: fmt.Sprintf("cannot read the checkpoint store: %v", cpErr),
			Fix:    "fix checkpoint.path / checkpoint.dsn, or restore the checkpoint store from a backup"}}
	}
	if len(cps) == 0 {
		return []Result{
			{Name: NameCheckpointAvailable, Detail: fmt.Sprintf("no sink has a checkpoint yet: each starts at checkpoint.start (%s)", cfg.Checkpoint.Start)},
			{Name: NameCheckpointServer, Detail: "no checkpoint to compare"},
		}
	}
	files, filesErr := canal.BinaryLogs(ctx, db)
	var oldestList string
	var oldestErr error
	if filesErr == nil && len(files) > 0 && s.flavor == flavorMariaDB {
		oldestList, oldestErr = oldestGTIDList(ctx, db, files[0].Name)
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
		owner = append(owner, serverDecision(key, cp, s, recoveryFix(cfg, key, nil)))
	}
	return append(avail, owner...)
}

// recoveryFix names the ways out when a sink's checkpoint cannot resume.
func recoveryFix(cfg *config.Config, key string, files []canal.BinlogFile) string {
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
	missing, n, err := gtidMinus(purged, cp.Position.GTIDSet)
	switch {
	case err != nil:
		r.Status = Fail
		r.Detail = fmt.Sprintf("sink %q: cannot compare its GTID set with gtid_purged: %v", key, err)
		r.Fix = recovery
	case n > 0:
		r.Status = Fail
		r.Detail = fmt.Sprintf("sink %q: its checkpoint is no longer on the server: %d transaction(s) it has not delivered were purged (%s)", key, n, missing)
		r.Fix = recovery
	default:
		r.Detail = fmt.Sprintf("sink %q: every transaction after its checkpoint is still in the binlog", key)
	}
	return r
}

// gtidMinus returns a − b as a GTID set string and the number of
// transactions in it.
func gtidMinus(a, b string) (string, int64, error) {
	ga, err := mysql.ParseMysqlGTIDSet(strings.ReplaceAll(a, "\n", ""))
	if err != nil {
		return "", 0, fmt.Errorf("parse %q: %w", a, err)
	}
	gb, err := mysql.ParseMysqlGTIDSet(strings.ReplaceAll(b, "\n", ""))
	if err != nil {
		return "", 0, fmt.Errorf("parse %q: %w", b, err)
	}
	sa, sb := ga.(*mysql.MysqlGTIDSet), gb.(*mysql.MysqlGTIDSet)
	if sb.Contain(sa) {
		return "", 0, nil
	}
	out := mysql.NewMysqlGTIDSet()
	var n int64
	for u, tags := range *sa {
		for tag, ivs := range tags {
			var sub mysql.IntervalSlice
			if t, ok := (*sb)[u]; ok {
				sub = t[tag]
			}
			diff := intervalsMinus(ivs, sub)
			if len(diff) == 0 {
				continue
			}
			if out[u] == nil {
				out[u] = map[mysql.Tag]mysql.IntervalSlice{}
			}
			out[u][tag] = diff
			for _, iv := range diff {
				n += iv.Stop - iv.Start
			}
		}
	}
	return out.String(), n, nil
}

// intervalsMinus returns a − b; both are [start, stop) intervals.
func intervalsMinus(a, b mysql.IntervalSlice) mysql.IntervalSlice {
	b = slices.Clone(b)
	sort.Slice(b, func(i, j int) bool { return b[i].Start < b[j].Start })
	var out mysql.IntervalSlice
	for _, iv := range a {
		cur := iv
		for _, x := range b {
			if x.Stop <= cur.Start || x.Start >= cur.Stop {
				continue
			}
			if x.Start > cur.Start {
				out = append(out, mysql.Interval{Start: cur.Start, Stop: x.Start})
			}
			cur.Start = x.Stop
			if cur.Start >= cur.Stop {
				break
			}
		}
		if cur.Start < cur.Stop {
			out = append(out, cur)
		}
	}
	return out
}

// mariadbAvailable: a MariaDB GTID position resumes only if, in every domain
// the oldest binlog's GTID list names, it is at or past that list's seq_no.
func mariadbAvailable(key string, cp checkpoint.Checkpoint, oldestFile, oldestList, recovery string) Result {
	r := Result{Name: NameCheckpointAvailable}
	have, err := mariadbPositions(cp.Position.GTIDSet)
	if err != nil {
		r.Status = Fail
		r.Detail = fmt.Sprintf("sink %q: its GTID position %q cannot be read: %v", key, cp.Position.GTIDSet, err)
		r.Fix = recovery
		return r
	}
	oldest, err := mariadbPositions(oldestList)
	if err != nil {
		r.Status = Fail
		r.Detail = fmt.Sprintf("sink %q: the GTID list %q of %s cannot be read: %v", key, oldestList, oldestFile, err)
		return r
	}
	var gaps []string
	for _, d := range sortedDomains(oldest) {
		o := oldest[d]
		c, ok := have[d]
		switch {
		case !ok:
			gaps = append(gaps, fmt.Sprintf("domain %d: the checkpoint has no position, and its transactions up to %d-%d-%d were purged", d, d, o.ServerID, o.SequenceNumber))
		case c.SequenceNumber < o.SequenceNumber:
			gaps = append(gaps, fmt.Sprintf("domain %d: the checkpoint is at seq_no %d but %s starts after %d, so %d transaction(s) (seq_no %d to %d) were purged", d, c.SequenceNumber, oldestFile, o.SequenceNumber, o.SequenceNumber-c.SequenceNumber, c.SequenceNumber+1, o.SequenceNumber))
		}
	}
	if len(gaps) > 0 {
		r.Status = Fail
		r.Detail = fmt.Sprintf("sink %q: its checkpoint %s is no longer on the server: %s", key, cp.Position.GTIDSet, strings.Join(gaps, "; "))
		r.Fix = recovery
		return r
	}
	r.Detail = fmt.Sprintf("sink %q: its checkpoint %s is in the binlogs (oldest %s starts at %s)", key, cp.Position.GTIDSet, oldestFile, orEmpty(oldestList))
	return r
}

// fileAvailable: a file/position checkpoint resumes only if its file exists.
func fileAvailable(key string, cp checkpoint.Checkpoint, files []canal.BinlogFile, recovery string) Result {
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

// mariadbPositions parses a GTID position: one GTID per domain (the last
// listed wins when a domain repeats, as in a GTID list).
func mariadbPositions(s string) (map[uint32]mysql.MariadbGTID, error) {
	out := map[uint32]mysql.MariadbGTID{}
	for _, part := range strings.Split(strings.ReplaceAll(s, "\n", ""), ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		g, err := mysql.ParseMariadbGTID(part)
		if err != nil {
			return nil, err
		}
		if old, ok := out[g.DomainID]; !ok || g.SequenceNumber >= old.SequenceNumber {
			out[g.DomainID] = *g
		}
	}
	return out, nil
}

// mariadbState parses gtid_binlog_state: the last seq_no of every
// (domain, server) pair in the binlog.
func mariadbState(s string) (map[[2]uint32]uint64, error) {
	out := map[[2]uint32]uint64{}
	for _, part := range strings.Split(strings.ReplaceAll(s, "\n", ""), ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		g, err := mysql.ParseMariadbGTID(part)
		if err != nil {
			return nil, err
		}
		out[[2]uint32{g.DomainID, g.ServerID}] = g.SequenceNumber
	}
	return out, nil
}

func sortedDomains(m map[uint32]mysql.MariadbGTID) []uint32 {
	var ds []uint32
	for d := range m {
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds
}

// serverDecision judges whether a checkpoint was taken from this server.
func serverDecision(key string, cp checkpoint.Checkpoint, s server, recovery string) Result {
	r := Result{Name: NameCheckpointServer}
	foreign := func(detail string) Result {
		r.Status = Fail
		r.Detail = fmt.Sprintf("sink %q: %s", key, detail)
		r.Fix = "point source.host/source.port at the server the checkpoint was read from; or, to start afresh on this one, " + strings.TrimPrefix(recovery, "to resume accepting the gap, ")
		return r
	}
	if cp.Flavor != "" && cp.Flavor != s.flavor {
		return foreign(fmt.Sprintf("the checkpoint was saved from a %s server, but this server is %s", cp.Flavor, s.flavor))
	}
	if s.flavor == flavorMySQL {
		uuid := s.vars["server_uuid"]
		if cp.ServerUUID != "" && uuid != "" && cp.ServerUUID != uuid {
			return foreign(fmt.Sprintf("the checkpoint belongs to server %s, but this server is %s", cp.ServerUUID, uuid))
		}
		if cp.Position.GTIDSet != "" {
			ahead, n, err := gtidMinus(cp.Position.GTIDSet, s.vars["gtid_executed"])
			if err != nil {
				return foreign(fmt.Sprintf("cannot compare its GTID set with gtid_executed: %v", err))
			}
			if n > 0 {
				return foreign(fmt.Sprintf("the checkpoint has %d transaction(s) this server never executed (%s): it comes from another server", n, ahead))
			}
		}
		r.Detail = fmt.Sprintf("sink %q: saved from this server (%s)", key, orEmpty(uuid))
		return r
	}
	return mariadbServerDecision(key, cp, s.vars["server_id"], s.vars["gtid_binlog_pos"], s.vars["gtid_binlog_state"], foreign)
}

// mariadbServerDecision: every GTID of the checkpoint must be one this
// server's binlog has written: its domain known, its seq_no not ahead of
// gtid_binlog_pos, and not ahead of what its (domain, server) pair wrote.
func mariadbServerDecision(key string, cp checkpoint.Checkpoint, serverID, binlogPos, binlogState string, foreign func(string) Result) Result {
	r := Result{Name: NameCheckpointServer}
	have, err := mariadbPositions(cp.Position.GTIDSet)
	if err != nil {
		return foreign(fmt.Sprintf("its GTID position %q cannot be read: %v", cp.Position.GTIDSet, err))
	}
	pos, err1 := mariadbPositions(binlogPos)
	state, err2 := mariadbState(binlogState)
	if err := errors.Join(err1, err2); err != nil {
		return foreign(fmt.Sprintf("cannot read the server's gtid_binlog_pos/gtid_binlog_state: %v", err))
	}
	var bad []string
	for _, d := range sortedDomains(have) {
		g := have[d]
		p, ok := pos[d]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("domain %d (of %s) is unknown to this server (gtid_binlog_pos %s)", d, g.String(), orEmpty(binlogPos)))
		case g.SequenceNumber > p.SequenceNumber:
			bad = append(bad, fmt.Sprintf("%s is ahead of this server's %s in domain %d", g.String(), p.String(), d))
		default:
			if last, ok := state[[2]uint32{d, g.ServerID}]; !ok || last < g.SequenceNumber {
				bad = append(bad, fmt.Sprintf("%s was never written to this server's binlog (gtid_binlog_state %s)", g.String(), orEmpty(binlogState)))
			}
		}
	}
	if len(bad) > 0 {
		return foreign("the checkpoint " + cp.Position.GTIDSet + " belongs to another server: " + strings.Join(bad, "; "))
	}
	id, _ := strconv.ParseUint(serverID, 10, 32)
	if cp.ServerID != 0 && uint32(id) != cp.ServerID {
		r.Status = Warn
		r.Detail = fmt.Sprintf("sink %q: the checkpoint was saved from server_id %d, this server is %d; its GTIDs are in this server's binlog history, so this looks like a failover or a changed server_id", key, cp.ServerID, id)
		r.Fix = "nothing, if this server took over from the one the checkpoint was read from; otherwise point source.host/source.port at that server"
		return r
	}
	r.Detail = fmt.Sprintf("sink %q: %s is in this server's history (gtid_binlog_pos %s)", key, orEmpty(cp.Position.GTIDSet), orEmpty(binlogPos))
	return r
}
