package canal

// This file owns CommitFinder: the commit time of the transaction that
// ends at a binlog position, read from the server's binlog.

import (
	"context"
	"errors"
	"fmt"
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
// dump (ScanConfig's replica id), from its start or from a transaction
// boundary it remembers, up to the position. Finds are one at a time (the
// dumps share the replica id) and their answers are kept, so asking again
// for a position costs nothing. Safe for concurrent use.
type CommitFinder struct {
	cfg ScanConfig

	mu    sync.Mutex
	found map[filePos]commitAt
	marks map[string][]uint32 // per file, ascending transaction boundaries
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

// readCommitAt reads file from from (4, or where a transaction starts) up
// to pos, calling mark with the end of each transaction on the way.
func readCommitAt(ctx context.Context, cfg ScanConfig, file string, from, pos uint32, mark func(end uint32)) (time.Time, bool, error) {
	if cfg.ServerID == 0 {
		return time.Time{}, false, errors.New("canal: reading a commit time needs a replica id")
	}
	syncer := newScanSyncer(cfg)
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
