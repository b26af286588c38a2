package canal

// This file owns CommitFinder: the commit time of the transaction that
// ends at a binlog position, read from the server's binlog.

import (
	"context"
	"errors"
	"fmt"
	"github.com/outbox-relay/outbox-relay/internal/defaults"
	"slices"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// markEvery is how far apart, at least, the transaction boundaries a
// CommitFinder remembers of a file are: a later find in that file reads on
// from the last one before its position, so that a gateway's endpoints,
// each at its own position in one file, do not each read the file from
// its start.
const markEvery = 1 << 20

// CommitFinder finds the commit time of the transaction that ends at a
// binlog position (its commit event's header, whole seconds, as
// event.Event.CommitTime): what tells two servers with the same server_id
// whose binlogs are laid out alike apart (package source, CheckResumeAt).
// SHOW BINLOG EVENTS shows no times, so it reads the file with a binlog
// dump (ScanConfig's replica id). An InnoDB transaction ends with an XID
// event of a fixed size, so it first reads the one event that would start
// that many bytes before the position (checksums verified: an offset that
// is no event's start fails them, or the server refuses it); otherwise (a
// COMMIT query, a DDL) it reads the file from its start, or from a
// transaction boundary it remembers, up to the position. Finds are one at
// a time (the dumps share the replica id) and their answers are kept, so
// asking again for a position costs nothing. Safe for concurrent use.
type CommitFinder struct {
	cfg ScanConfig

	mu    sync.Mutex
	found map[filePos]commitAt
	marks map[string][]uint32 // per file, ascending transaction boundaries
	reads [2]int              // finds answered by one XID event, by reading the file
}

type filePos struct {
	file string
	pos  uint32
}

type commitAt struct {
	at time.Time
	ok bool
}

// NewCommitFinder returns a finder reading with cfg (its ServerID is a
// replica id no stream of the relay uses).
func NewCommitFinder(cfg ScanConfig) *CommitFinder {
	return &CommitFinder{cfg: cfg, found: map[filePos]commitAt{}, marks: map[string][]uint32{}}
}

// CommitAt returns the commit time of the transaction whose commit event
// ends at pos in file, and ok false when no transaction ends there (pos
// is another event's end). size is the file's size in SHOW BINARY LOGS:
// nothing past it is read, and a pos past it is not found.
func (f *CommitFinder) CommitAt(ctx context.Context, file string, pos uint32, size int64) (time.Time, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := filePos{file, pos}
	if c, ok := f.found[key]; ok {
		return c.at, c.ok, nil
	}
	if int64(pos) > size {
		return time.Time{}, false, nil
	}
	if at, ok := readXIDAt(ctx, f.cfg, file, pos); ok {
		f.reads[0]++
		f.found[key] = commitAt{at, true}
		return at, true, nil
	}
	f.reads[1]++
	from := uint32(4)
	marks := f.marks[file]
	if i, _ := slices.BinarySearch(marks, pos); i > 0 {
		from = marks[i-1]
	}
	at, ok, err := readCommitAt(ctx, f.cfg, file, from, pos, func(end uint32) {
		if m := f.marks[file]; end >= from+markEvery && (len(m) == 0 || end >= m[len(m)-1]+markEvery) {
			f.marks[file] = append(m, end)
		}
	})
	if err != nil {
		return time.Time{}, false, err
	}
	f.found[key] = commitAt{at, ok}
	return at, ok, nil
}

// xidSize is the size of an XID event (header, xid, CRC32 checksum or none).
var xidSize = [...]uint32{19 + 8 + 4, 19 + 8}

// readXIDAt reads the XID event that ends at pos, if one does: a dump that
// starts xidSize bytes before pos, whose first event must be that XID event
// (checksums verified). ok is false for anything else: the caller reads the
// file instead. It never waits for the server long: a start that is no
// event's start may leave the server waiting for the rest of an event.
func readXIDAt(ctx context.Context, cfg ScanConfig, file string, pos uint32) (time.Time, bool) {
	for _, size := range xidSize {
		if pos < 4+size {
			continue
		}
		if at, ok := readOneXID(ctx, cfg, file, pos, size); ok {
			return at, true
		}
	}
	return time.Time{}, false
}

func readOneXID(ctx context.Context, cfg ScanConfig, file string, pos, size uint32) (time.Time, bool) {
	if cfg.ServerID == 0 {
		return time.Time{}, false
	}
	cfg.ReadTimeout = min(cfg.ReadTimeout, 5*time.Second)
	defaults.Positive(&cfg.ReadTimeout, 5*time.Second)
	syncer := newScanSyncer(cfg, true)
	defer syncer.Close()
	streamer, err := syncer.StartSync(mysql.Position{Name: file, Pos: pos - size})
	if err != nil {
		return time.Time{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.ReadTimeout)
	defer cancel()
	for {
		ev, err := streamer.GetEvent(ctx)
		if err != nil {
			return time.Time{}, false
		}
		switch e := ev.Event.(type) {
		case *replication.RotateEvent:
			continue // the fake one naming the file
		case *replication.FormatDescriptionEvent:
			crc := e.ChecksumAlgorithm == replication.BINLOG_CHECKSUM_ALG_CRC32
			if crc != (size == xidSize[0]) {
				return time.Time{}, false // the file's XID events are of the other size
			}
			continue
		case *replication.XIDEvent:
			h := ev.Header
			return time.Unix(int64(h.Timestamp), 0).UTC(), h.LogPos == pos && h.EventSize == size
		}
		return time.Time{}, false
	}
}

// readCommitAt reads file from from (4, or where a transaction starts) up
// to pos, calling mark with the end of each transaction on the way.
func readCommitAt(ctx context.Context, cfg ScanConfig, file string, from, pos uint32, mark func(end uint32)) (time.Time, bool, error) {
	if cfg.ServerID == 0 {
		return time.Time{}, false, errors.New("canal: reading a commit time needs a replica id")
	}
	syncer := newScanSyncer(cfg, false)
	defer syncer.Close()
	streamer, err := syncer.StartSync(mysql.Position{Name: file, Pos: from})
	if err != nil {
		return time.Time{}, false, classify(err)
	}
	sc := scan{file: file, flavor: cfg.Flavor}
	for {
		ev, err := streamer.GetEvent(ctx)
		if err != nil {
			return time.Time{}, false, fmt.Errorf("read the commit time at %s:%d: %w", file, pos, classify(err))
		}
		var at time.Time
		committed := false
		_, done, err := sc.on(ev, func(t time.Time) bool { at, committed = t, true; return false })
		if err != nil || done {
			return time.Time{}, false, err
		}
		end := ev.Header.LogPos
		if !sc.started || end == 0 || ev.Header.EventType == replication.FORMAT_DESCRIPTION_EVENT {
			continue
		}
		if end >= pos {
			return at, committed && end == pos, nil
		}
		if committed {
			mark(end)
		}
	}
}
