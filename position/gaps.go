package position

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

// ErrLost means a server no longer has what comes after a position: it
// purged those binlogs, or rejects the position as foreign. canal's Reader
// returns it from Run; Gaps.Err wraps it.
var ErrLost = errors.New("binlog position is no longer available on the server")

// ErrNotInHistory means a server never executed some transactions of a
// position: it is behind the server the position was read from, or has
// another history. Resuming there would skip or replay. Gaps.Err wraps it.
var ErrNotInHistory = errors.New("the server has not executed every transaction of the checkpoint")

// Gaps says why a server cannot serve a position. The rule is GTID
// arithmetic — a server's identity (server_uuid, server_id) plays no part,
// so a promoted replica serves the checkpoints read from its old primary:
// the position's GTIDs must all be executed on the server, and every GTID
// the server purged must be in the position. One exception, MariaDB only
// (MariaDBHistory): on the very server whose binlog the position was read
// from (the same server_id) while that binlog file is still there, the
// GTID position at the position's File:Pos must be the position's own, and
// the transaction that ends there must have committed when the position's
// last one did (MariaDBCommit).
type Gaps struct {
	// Purged lists what the server no longer has of what comes after the
	// position (it would have to send it, and cannot).
	Purged []string
	// Missing lists what the position holds that the server never executed.
	Missing []string
	// Foreign lists why the server's history is not the position's,
	// although it holds the position's GTIDs (MariaDBHistory).
	Foreign []string
}

// None reports whether the server can serve the position.
func (g Gaps) None() bool { return len(g.Purged) == 0 && len(g.Missing) == 0 && len(g.Foreign) == 0 }

// MariaDBHistory compares a MariaDB checkpoint's GTID position with the GTID
// position the server's binlog holds at the checkpoint's own File:Pos
// (BINLOG_GTID_POS; at is nil when no transaction ends there). Ask it only
// of the server whose binlog File is (the server_id the position recorded)
// while File is still among its binlogs: there, a position read from this
// binlog has, in every domain, the GTID the binlog has at File:Pos. Any
// other answer proves the checkpoint was read from another server's binlog
// (two unrelated servers with the same server_id, say the default 1, both
// write 0-1-4) — a different history, where resuming by GTID would skip or
// resend unrelated transactions. It returns what differs; none when the
// histories agree.
func MariaDBHistory(checkpoint, file string, pos uint32, at *string) ([]string, error) {
	if at == nil {
		return []string{fmt.Sprintf("no transaction of this server's binlog ends at %s:%d, where the checkpoint's last one ended: it was read from the binlog of another server with the same server_id", file, pos)}, nil
	}
	have, err := MariaDBPositions(checkpoint)
	if err != nil {
		return nil, fmt.Errorf("read the checkpoint's GTID position %q: %w", checkpoint, err)
	}
	got, err := MariaDBPositions(*at)
	if err != nil {
		return nil, fmt.Errorf("read the server's GTID position at %s:%d %q: %w", file, pos, *at, err)
	}
	var diff []string
	for _, d := range SortedDomains(have) {
		c := have[d]
		g, ok := got[d]
		switch {
		case !ok:
			diff = append(diff, fmt.Sprintf("at %s:%d this server's binlog has no GTID of domain %d, where the checkpoint has %s", file, pos, d, c.String()))
		case g != c:
			diff = append(diff, fmt.Sprintf("at %s:%d this server's binlog is at %s, where the checkpoint has %s", file, pos, g.String(), c.String()))
		}
	}
	if len(diff) > 0 {
		diff = append(diff, "the checkpoint was read from the binlog of another server with the same server_id")
	}
	return diff, nil
}

// MariaDBCommit compares a MariaDB checkpoint's commit time (its last
// transaction's, whole seconds; never zero here) with the commit time of
// the transaction that ends at the checkpoint's File:Pos in the server's
// binlog (found false: none ends there). Ask it where MariaDBHistory found
// the histories agreeing: two servers built alike (the same server_id, the
// same statements) have binlogs laid out byte for byte alike, so the same
// GTID ends at the same File:Pos on both; only when each transaction
// committed tells them apart. On the server the checkpoint was read from,
// the transaction that ends at File:Pos is the checkpoint's last one, and
// committed when the checkpoint says. It returns what differs; none when
// the histories agree.
func MariaDBCommit(file string, pos uint32, checkpoint, server time.Time, found bool) []string {
	switch {
	case !found:
		return []string{fmt.Sprintf("no transaction of this server's binlog ends at %s:%d, where the checkpoint's last one ended: it was read from the binlog of another server with the same server_id", file, pos)}
	case !server.Equal(checkpoint):
		return []string{fmt.Sprintf("the transaction that ends at %s:%d on this server committed at %s, the checkpoint's committed at %s: it was read from the binlog of another server with the same server_id whose binlog is laid out alike (built by the same statements)",
			file, pos, server.UTC().Format(time.RFC3339), checkpoint.UTC().Format(time.RFC3339))}
	}
	return nil
}

// MySQLGaps applies the rule to MySQL GTID sets: checkpoint ⊆ executed and
// purged ⊆ checkpoint.
func MySQLGaps(checkpoint, executed, purged string) (Gaps, error) {
	var g Gaps
	missing, n, err := GTIDMinus(checkpoint, executed)
	if err != nil {
		return g, fmt.Errorf("compare the checkpoint with gtid_executed: %w", err)
	}
	if n > 0 {
		g.Missing = append(g.Missing, fmt.Sprintf("%d transaction(s) never executed on this server: %s", n, missing))
	}
	gone, n, err := GTIDMinus(purged, checkpoint)
	if err != nil {
		return g, fmt.Errorf("compare the checkpoint with gtid_purged: %w", err)
	}
	if n > 0 {
		g.Purged = append(g.Purged, fmt.Sprintf("%d transaction(s) not yet delivered were purged: %s", n, gone))
	}
	return g, nil
}

// MariaDBGaps applies the rule to MariaDB GTID positions (one GTID per
// domain): in every domain of the position, the server's binlog wrote that
// GTID (its gtid_binlog_pos is not behind it, and gtid_binlog_state has its
// domain-server pair at or past it); in every domain of the oldest binlog's
// GTID list, the position is at or past that list.
func MariaDBGaps(checkpoint, binlogPos, binlogState, oldestFile, oldestList string) (Gaps, error) {
	var g Gaps
	have, err := MariaDBPositions(checkpoint)
	if err != nil {
		return g, fmt.Errorf("read the checkpoint's GTID position %q: %w", checkpoint, err)
	}
	pos, err1 := MariaDBPositions(binlogPos)
	state, err2 := MariaDBState(binlogState)
	oldest, err3 := MariaDBPositions(oldestList)
	if err := errors.Join(err1, err2, err3); err != nil {
		return g, fmt.Errorf("read the server's gtid_binlog_pos, gtid_binlog_state or GTID list of %s: %w", oldestFile, err)
	}
	for _, d := range SortedDomains(have) {
		c := have[d]
		p, ok := pos[d]
		switch {
		case !ok:
			g.Missing = append(g.Missing, fmt.Sprintf("domain %d (of %s) is unknown to this server (gtid_binlog_pos %s)", d, c.String(), orNone(binlogPos)))
		case c.SequenceNumber > p.SequenceNumber:
			g.Missing = append(g.Missing, fmt.Sprintf("%s is ahead of this server's %s in domain %d", c.String(), p.String(), d))
		default:
			if last, ok := state[[2]uint32{d, c.ServerID}]; !ok || last < c.SequenceNumber {
				g.Missing = append(g.Missing, fmt.Sprintf("%s was never written to this server's binlog (gtid_binlog_state %s)", c.String(), orNone(binlogState)))
			}
		}
	}
	for _, d := range SortedDomains(oldest) {
		o := oldest[d]
		c, ok := have[d]
		switch {
		case !ok:
			g.Purged = append(g.Purged, fmt.Sprintf("domain %d: the checkpoint has no position, and its transactions up to %d-%d-%d were purged", d, d, o.ServerID, o.SequenceNumber))
		case c.SequenceNumber < o.SequenceNumber:
			g.Purged = append(g.Purged, fmt.Sprintf("domain %d: the checkpoint is at seq_no %d but %s starts after %d, so %d transaction(s) (seq_no %d to %d) were purged", d, c.SequenceNumber, oldestFile, o.SequenceNumber, o.SequenceNumber-c.SequenceNumber, c.SequenceNumber+1, o.SequenceNumber))
		}
	}
	return g, nil
}

// FileGaps: a file/position (GTIDs off) resumes only while its file is
// among the server's binlogs (files, oldest first).
func FileGaps(pos event.Position, files []string) Gaps {
	var g Gaps
	for _, f := range files {
		if f == pos.File {
			return g
		}
	}
	oldest := "none"
	if len(files) > 0 {
		oldest = files[0]
	}
	g.Purged = append(g.Purged, fmt.Sprintf("binlog %s was purged (the oldest is now %s)", pos.File, oldest))
	return g
}

// Err is nil when there are no gaps; otherwise an error for pos that lists
// them and the recovery choices.
func (g Gaps) Err(pos event.Position) error {
	switch {
	case len(g.Foreign) > 0:
		return fmt.Errorf("%w: checkpoint %s comes from another history: %s; point the relay at the server it was read from, or, if this server is the one to read and the checkpoint is another server's (a relay pointed at the wrong server, a server rebuilt under an old server_id), remove the sink's checkpoint to start afresh from checkpoint.start (earliest sends everything this server still has; `outbox-relay check` shows how)",
			ErrNotInHistory, pos, strings.Join(g.Foreign, "; "))
	case len(g.Missing) > 0:
		return fmt.Errorf("%w: checkpoint %s: %s; point the relay at a server that has executed them (the one it was read from, or a replica that has caught up), or wait for this server to catch up, or remove the sink's checkpoint to start afresh from checkpoint.start (`outbox-relay check` shows how)",
			ErrNotInHistory, pos, strings.Join(g.Missing, "; "))
	case len(g.Purged) > 0:
		return fmt.Errorf("%w: checkpoint %s: %s; restore the purged binlogs, or read from a server that still has them, or accept the gap by removing the sink's checkpoint and starting from checkpoint.start: earliest (`outbox-relay check` shows how)",
			ErrLost, pos, strings.Join(g.Purged, "; "))
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "(empty)"
	}
	return s
}
