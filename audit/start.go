package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/position"
)

// StartSlack is how much earlier than a From time a binlog file must have
// begun for the audit to start reading there: a transaction's commit time
// is its COMMIT's start on the server's clock (or its origin's, on a
// replica), never later than the file it is written to was rotated away,
// unless clocks step back or differ by more than this between a primary
// and its replica.
const StartSlack = 10 * time.Minute

// FileStart is what heads a binlog file: when it was begun (its format
// description event's time) and the GTID state before its first
// transaction ("" with GTIDs off, or none before it).
type FileStart struct {
	File  string
	Begun time.Time
	GTIDs string
}

// ReadFileStart reads the first events of file with the reader config rc.
func ReadFileStart(ctx context.Context, rc canal.Config, file string) (FileStart, error) {
	fs := FileStart{File: file}
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: rc.ServerID, Flavor: rc.Flavor, Host: rc.Host, Port: rc.Port, User: rc.User, Password: rc.Password,
		TLSConfig: rc.TLS, HeartbeatPeriod: rc.HeartbeatPeriod, ReadTimeout: rc.ReadTimeout, DisableRetrySync: true,
		Logger: canal.LibraryLogger(rc.Logger),
	})
	defer syncer.Close()
	st, err := syncer.StartSync(mysql.Position{Name: file, Pos: 4})
	if err != nil {
		return fs, fmt.Errorf("read the start of binlog %s: %w", file, err)
	}
	for {
		ev, err := st.GetEvent(ctx)
		if err != nil {
			return fs, fmt.Errorf("read the start of binlog %s: %w", file, err)
		}
		switch e := ev.Event.(type) {
		case *replication.FormatDescriptionEvent:
			fs.Begun = time.Unix(int64(ev.Header.Timestamp), 0).UTC()
		case *replication.MariadbGTIDListEvent:
			// The list has the last GTID of every (domain, server); a start
			// position has the latest of each domain.
			latest := map[uint32]mysql.MariadbGTID{}
			for _, g := range e.GTIDs {
				if old, ok := latest[g.DomainID]; !ok || g.SequenceNumber > old.SequenceNumber {
					latest[g.DomainID] = g
				}
			}
			var parts []string
			for _, d := range position.SortedDomains(latest) {
				g := latest[d]
				parts = append(parts, g.String())
			}
			fs.GTIDs = strings.Join(parts, ",")
			return fs, nil
		case *replication.PreviousGTIDsEvent:
			fs.GTIDs = e.GTIDSets
			return fs, nil
		case *replication.RotateEvent, *replication.GenericEvent:
		default:
			if !fs.Begun.IsZero() { // a file without a GTID list (GTIDs off on MySQL)
				return fs, nil
			}
		}
	}
}

// StartFor returns where an audit From time starts reading: the start of
// the last of files (the server's binlogs, oldest first) that began at
// least StartSlack before from, found by binary search over the files'
// first events; the oldest file when none did.
func StartFor(ctx context.Context, rc canal.Config, files []string, from time.Time) (event.Position, FileStart, error) {
	if len(files) == 0 {
		return event.Position{}, FileStart{}, errors.New("the server lists no binary logs: enable log_bin")
	}
	limit := from.Add(-StartSlack)
	lo, hi := 0, len(files)-1 // files[lo] is a safe start; find the last one that is
	best, err := ReadFileStart(ctx, rc, files[0])
	if err != nil {
		return event.Position{}, FileStart{}, err
	}
	for lo < hi {
		mid := (lo + hi + 1) / 2
		fs, err := ReadFileStart(ctx, rc, files[mid])
		if err != nil {
			return event.Position{}, FileStart{}, err
		}
		if fs.Begun.After(limit) {
			hi = mid - 1
		} else {
			lo, best = mid, fs
		}
	}
	pos := event.Position{File: best.File, Pos: 4}
	if best.GTIDs != "" && (rc.Flavor == mysql.MariaDBFlavor || rc.GTIDMode) {
		pos.GTIDSet = best.GTIDs
	}
	return pos, best, nil
}
