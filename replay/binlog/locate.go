package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/replay"
	"github.com/outbox-relay/outbox-relay/source"
)

// Locator finds the binlog position of a time from the binlog's own
// timestamps: it lists the binary logs, binary-searches them by the commit
// time of each file's first transaction (one short read per file it
// probes), and reads forward within one file only (or, past a file without
// transactions, the next).
type Locator struct {
	DB   *sql.DB
	Info source.ServerInfo
	Scan canal.ScanConfig
	// Scanned counts the files read (tests, and the log line).
	Scanned int
}

// Locate returns the position just before the first transaction committed
// at or after t (the binlog's commit times have whole seconds: t is cut to
// the second before). A t before the oldest binary log's first transaction
// is replay.ErrPurged unless nothing was ever purged (then the start of the
// oldest binary log); a t after every transaction is the end of the
// binlog as listed.
func (l *Locator) Locate(ctx context.Context, t time.Time) (event.Position, error) {
	t = t.UTC().Truncate(time.Second)
	files, err := source.BinaryLogs(ctx, l.DB)
	if err != nil {
		return event.Position{}, err
	}
	if len(files) == 0 {
		return event.Position{}, errors.New("the server lists no binary logs: enable log_bin")
	}
	firsts := make([]*canal.Mark, len(files))
	first := func(i int) (canal.Mark, error) {
		if firsts[i] == nil {
			m, err := l.scan(ctx, files[i], func(time.Time) bool { return true })
			if err != nil {
				return canal.Mark{}, err
			}
			firsts[i] = &m
		}
		return *firsts[i], nil
	}
	// atOrBefore: the file's first transaction (or, for a file without
	// any, that of the nearest file before it with one) committed at or
	// before t: monotonic in i, as commit times are in binlog order.
	atOrBefore := func(i int) (bool, error) {
		for ; i >= 0; i-- {
			m, err := first(i)
			if err != nil {
				return false, err
			}
			if m.Found {
				return !m.Commit.After(t), nil
			}
		}
		return true, nil // no transaction in or before the file
	}
	m0, err := first(0)
	if err != nil {
		return event.Position{}, err
	}
	// The first transaction the server holds (in the oldest binary log,
	// or the first after it with one: the oldest may hold none) is at or
	// after t: the purged files may have held transactions of the window
	// (commit times have whole seconds: one of the same second may be
	// before it).
	mk := m0
	for k := 1; !mk.Found && k < len(files); k++ {
		if mk, err = first(k); err != nil {
			return event.Position{}, err
		}
	}
	if mk.Found && !mk.Commit.Before(t) {
		// Transactions before the oldest file: its GTID list (MariaDB) or
		// PREVIOUS_GTIDS (MySQL), the state before its first transaction,
		// is not empty.
		if m0.Before.GTIDSet != "" || !l.Info.GTIDMode {
			return event.Position{}, fmt.Errorf("%w: its oldest binary log %s holds no transaction before one committed at %s, after %s: replay with --source table (the outbox table's retained rows), or from a later time", replay.ErrPurged, files[0].Name, mk.Commit.Format(time.RFC3339), t.Format(time.RFC3339))
		}
		return m0.Before, nil
	}
	// The last file whose first transaction is at or before t.
	lo, hi := 0, len(files)-1 // atOrBefore(lo) holds
	for lo < hi {
		mid := (lo + hi + 1) / 2
		ok, err := atOrBefore(mid)
		if err != nil {
			return event.Position{}, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	// Read forward from the file of that transaction (lo may be a file
	// without transactions after it).
	for lo > 0 {
		m, err := first(lo)
		if err != nil {
			return event.Position{}, err
		}
		if m.Found {
			break
		}
		lo--
	}
	var end event.Position
	for i := lo; i < len(files); i++ {
		m, err := l.scan(ctx, files[i], func(c time.Time) bool { return !c.Before(t) })
		if err != nil {
			return event.Position{}, err
		}
		if m.Found {
			return m.Before, nil
		}
		end = m.Before
	}
	return end, nil
}

func (l *Locator) scan(ctx context.Context, f source.BinlogFile, stop func(time.Time) bool) (canal.Mark, error) {
	l.Scanned++
	m, err := canal.ScanFile(ctx, l.Scan, f.Name, f.Size, stop)
	if err != nil {
		return canal.Mark{}, fmt.Errorf("read binary log %s: %w", f.Name, err)
	}
	return m, nil
}
