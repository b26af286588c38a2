package canal

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/defaults"
)

// ScanConfig is what ScanFile reads one binlog file with: a server and a
// replica id of its own (a scan is a binlog dump like a stream's).
type ScanConfig struct {
	Host     string
	Port     uint16
	User     string
	Password string
	TLS      *tls.Config
	ServerID uint32
	Flavor   string
	// ReadTimeout ends a scan that receives nothing this long. Default 30s.
	ReadTimeout time.Duration
	Logger      *slog.Logger
}

// Mark is where a scan stopped: before a transaction (Found), or at the end
// of what it read of the file (not Found).
type Mark struct {
	// Before is the position just before the transaction: its file, the
	// offset where it starts, and the GTID set (MySQL) or position
	// (MariaDB) of every transaction before it ("" with GTIDs off). A
	// stream started from it reads that transaction first.
	Before event.Position
	// Commit is the transaction's commit time (its commit event's header,
	// whole seconds, as event.Event.CommitTime).
	Commit time.Time
	Found  bool
}

// ScanFile reads the binlog file from its start, up to size bytes (its size
// in SHOW BINARY LOGS when the scan was decided: what is written later is
// not read), and returns the mark before the first transaction for whose
// commit time stop returns true; not Found when no transaction of the file
// up to size makes stop true (Before is then the end of what was read).
// It reads one file only, never the next, and never waits for new events.
func ScanFile(ctx context.Context, cfg ScanConfig, file string, size int64, stop func(commit time.Time) bool) (Mark, error) {
	if cfg.ServerID == 0 {
		return Mark{}, errors.New("canal: a scan needs a replica id")
	}
	syncer := newScanSyncer(cfg, false)
	defer syncer.Close()
	streamer, err := syncer.StartSync(mysql.Position{Name: file, Pos: 4})
	if err != nil {
		return Mark{}, classify(err)
	}
	sc := scan{file: file, flavor: cfg.Flavor, end: event.Position{File: file, Pos: 4}}
	for {
		ev, err := streamer.GetEvent(ctx)
		if err != nil {
			return Mark{}, classify(err)
		}
		m, done, err := sc.on(ev, stop)
		if err != nil || done {
			return m, err
		}
		if int64(ev.Header.LogPos) >= size && ev.Header.LogPos > 0 && sc.started {
			return sc.mark(), nil
		}
	}
}

// newScanSyncer returns a syncer for one read of a file: no retries, no
// rows decoded; events' checksums verified with verify.
func newScanSyncer(cfg ScanConfig, verify bool) *replication.BinlogSyncer {
	defaults.Positive(&cfg.ReadTimeout, 30*time.Second)
	defaults.Logger(&cfg.Logger)
	return replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: cfg.ServerID, Flavor: cfg.Flavor, Host: cfg.Host, Port: cfg.Port, User: cfg.User, Password: cfg.Password,
		TLSConfig: cfg.TLS, ReadTimeout: cfg.ReadTimeout, HeartbeatPeriod: cfg.ReadTimeout / 3,
		DisableRetrySync: true, DiscardGTIDSet: true, FillZeroLogPos: cfg.Flavor == mysql.MariaDBFlavor, VerifyChecksum: verify,
		RowsEventDecodeFunc: func(*replication.RowsEvent, []byte) error { return nil }, // rows are not read
		Logger:              LibraryLogger(cfg.Logger),
	})
}

// scan follows one file's transactions: the GTID state before each, where
// it starts, and its commit.
type scan struct {
	file     string
	flavor   string
	started  bool // the file's own events have begun (after the fake rotate)
	checksum bool
	exec     mysql.GTIDSet
	inTxn    bool
	before   event.Position // the transaction in progress starts here
	end      event.Position // after the last transaction read
}

func (sc *scan) mark() Mark { return Mark{Before: sc.end} }

func (sc *scan) state() string {
	if sc.exec == nil {
		return ""
	}
	return sc.exec.String()
}

// on handles one event; done when the scan is over (m is then its result).
func (sc *scan) on(ev *replication.BinlogEvent, stop func(time.Time) bool) (m Mark, done bool, err error) {
	start := ev.Header.LogPos - ev.Header.EventSize
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		if name := rotateName(ev, e); name != sc.file {
			return sc.mark(), true, nil // the file ended
		}
	case *replication.FormatDescriptionEvent:
		sc.started = true
		sc.checksum = e.ChecksumAlgorithm == replication.BINLOG_CHECKSUM_ALG_CRC32
	case *replication.PreviousGTIDsEvent:
		set, err := previousGTIDs(ev, sc.checksum)
		if err != nil {
			return Mark{}, true, fmt.Errorf("PREVIOUS_GTIDS of %s: %v", sc.file, err)
		}
		sc.exec = set
		sc.end = event.Position{File: sc.file, Pos: ev.Header.LogPos, GTIDSet: sc.state()}
	case *replication.MariadbGTIDListEvent:
		set, _ := mysql.ParseMariadbGTIDSet("")
		for i := range e.GTIDs {
			_ = set.(*mysql.MariadbGTIDSet).AddSet(&e.GTIDs[i])
		}
		sc.exec = set
		sc.end = event.Position{File: sc.file, Pos: ev.Header.LogPos, GTIDSet: sc.state()}
	case *replication.GTIDEvent:
		sc.before = event.Position{File: sc.file, Pos: start, GTIDSet: sc.state()}
		sc.inTxn = false
		if ev.Header.EventType != replication.ANONYMOUS_GTID_EVENT && sc.exec != nil {
			u, err := uuid.FromBytes(e.SID)
			if err != nil {
				return Mark{}, true, fmt.Errorf("GTID event: %v", err)
			}
			sc.exec.(*mysql.MysqlGTIDSet).AddGTID(u, e.GNO)
		}
	case *replication.GtidTaggedLogEvent:
		sc.before = event.Position{File: sc.file, Pos: start, GTIDSet: sc.state()}
		sc.inTxn = false
		if sc.exec != nil {
			u, err := uuid.FromBytes(e.SID)
			if err != nil {
				return Mark{}, true, fmt.Errorf("tagged GTID event: %v", err)
			}
			sc.exec.(*mysql.MysqlGTIDSet).AddGTIDWithTag(u, e.Tag, e.GNO)
		}
	case *replication.MariadbGTIDEvent:
		sc.before = event.Position{File: sc.file, Pos: start, GTIDSet: sc.state()}
		sc.inTxn = !e.IsStandalone()
		if sc.exec != nil {
			_ = sc.exec.(*mysql.MariadbGTIDSet).AddSet(&e.GTID)
		}
	case *replication.QueryEvent:
		q := bytes.TrimSpace(e.Query)
		switch {
		case hasPrefixFold(q, "BEGIN") || hasPrefixFold(q, "XA START"):
			if sc.before.File == "" { // GTIDs off: the transaction starts here
				sc.before = event.Position{File: sc.file, Pos: start}
			}
			sc.inTxn = true
			return Mark{}, false, nil
		case hasPrefixFold(q, "COMMIT") || hasPrefixFold(q, "XA END") || !sc.inTxn:
			return sc.commit(ev, stop)
		}
	case *replication.XIDEvent:
		return sc.commit(ev, stop)
	}
	return Mark{}, false, nil
}

func (sc *scan) commit(ev *replication.BinlogEvent, stop func(time.Time) bool) (Mark, bool, error) {
	at := time.Unix(int64(ev.Header.Timestamp), 0).UTC()
	before := sc.before
	if before.File == "" {
		before = sc.end
	}
	sc.inTxn = false
	sc.before = event.Position{}
	sc.end = event.Position{File: sc.file, Pos: ev.Header.LogPos, GTIDSet: sc.state()}
	if stop(at) {
		return Mark{Before: before, Commit: at, Found: true}, true, nil
	}
	return Mark{}, false, nil
}
