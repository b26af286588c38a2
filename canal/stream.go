package canal

// This file owns the connection and its retry loop: Run reconnects with
// backoff from the last position handed on and fails over to the server
// Config.Pick names; stream starts one binlog dump (a GTID or a file start)
// and reads it; classify sorts the server's refusals into a lost position,
// a fatal error, or one to retry.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/position"
	"github.com/outbox-relay/outbox-relay/retry"
)

// Run streams from the position after from and calls handle for every
// transaction, until ctx ends (then it returns ctx.Err()), handle fails, or
// the position is lost (position.ErrLost). Stream errors are retried forever.
func (r *Reader) Run(ctx context.Context, from event.Position, handle Handler) error {
	pos := from
	bo := retry.Backoff{Policy: r.cfg.Retry}
	cur := Endpoint{Host: r.cfg.Host, Port: r.cfg.Port, TLS: r.cfg.TLS}
	if r.cfg.Pick != nil {
		var err error
		if cur, err = r.pick(ctx, pos, &bo); err != nil {
			return err
		}
	}
	if r.cfg.Observer != nil {
		r.cfg.Observer.Server(cur.Addr(), false)
	}
	var lastErr error
	failingSince := time.Time{}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			wait := bo.Next(lastErr)
			if r.cfg.Observer != nil {
				r.cfg.Observer.Reconnect()
			}
			r.log.Warn("binlog stream reconnecting", slog.Int("attempt", attempt), slog.Duration("wait", wait), slog.String("server", cur.Addr()), slog.String("from", pos.String()))
			if err := retry.Sleep(ctx, wait); err != nil {
				return err
			}
		}
		progressed := false
		err := r.stream(ctx, cur, pos, func(ctx context.Context, txn *event.Txn) error {
			if err := handle(ctx, txn); err != nil {
				return handlerError{err}
			}
			pos = txn.Position
			progressed = true
			return nil
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var he handlerError
		if errors.As(err, &he) {
			return he.err
		}
		if errors.Is(err, errFatal) || (r.cfg.Pick == nil && errors.Is(err, position.ErrLost)) {
			return err
		}
		if progressed || failingSince.IsZero() {
			failingSince = time.Now()
		}
		if progressed {
			bo.Reset()
		}
		lastErr = err
		r.log.Warn("binlog stream error", slog.Any("err", err), slog.String("server", cur.Addr()), slog.String("resume_from", pos.String()))
		if r.cfg.Pick != nil && (errors.Is(err, position.ErrLost) || time.Since(failingSince) >= r.cfg.FailoverAfter) {
			next, err := r.pick(ctx, pos, &bo)
			if err != nil {
				return err
			}
			if next.Addr() != cur.Addr() {
				r.log.Warn("binlog source failover", slog.String("from_server", cur.Addr()), slog.String("to_server", next.Addr()), slog.String("resume_from", pos.String()))
				if r.cfg.Observer != nil {
					r.cfg.Observer.Server(next.Addr(), true)
				}
				cur = next
				bo.Reset()
				attempt = -1 // connect to the new server at once
			}
			failingSince = time.Now()
		}
	}
}

// pick asks Pick for a server until it names one, retrying with backoff
// while none is usable; a position no server can serve ends it.
func (r *Reader) pick(ctx context.Context, pos event.Position, bo *retry.Backoff) (Endpoint, error) {
	for {
		ep, err := r.cfg.Pick(ctx, pos)
		if err == nil {
			return ep, nil
		}
		if errors.Is(err, position.ErrLost) || errors.Is(err, position.ErrNotInHistory) || errors.Is(err, errFatal) || ctx.Err() != nil {
			return Endpoint{}, err
		}
		wait := bo.Next(err)
		r.log.Warn("no source server usable; retrying", slog.Any("err", err), slog.Duration("wait", wait), slog.String("from", pos.String()))
		if err := retry.Sleep(ctx, wait); err != nil {
			return Endpoint{}, err
		}
	}
}

type handlerError struct{ err error }

func (h handlerError) Error() string { return h.err.Error() }

var errFatal = errors.New("fatal binlog error")

// stream runs one syncer from pos until an error.
//
// The executed GTID set is tracked here, for both flavors and every kind of
// start, from the start set (a GTID start), the first file's PREVIOUS_GTIDS
// (MySQL) or GTID list (MariaDB) event (a file start), and each transaction's
// GTID event; go-mysql's own tracking (GTID starts only) is not used.
func (r *Reader) stream(ctx context.Context, ep Endpoint, pos event.Position, handle Handler) error {
	narrow := &narrowCache{r: r} // the syncer's goroutine's
	st := &txnState{file: pos.File, last: pos, server: ep.Addr()}
	var end inlineEnd
	first := true
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID:              r.cfg.ServerID,
		Flavor:                r.cfg.Flavor,
		Host:                  ep.Host,
		Port:                  ep.Port,
		User:                  r.cfg.User,
		Password:              r.cfg.Password,
		TLSConfig:             ep.TLS,
		HeartbeatPeriod:       r.cfg.HeartbeatPeriod,
		ReadTimeout:           r.cfg.ReadTimeout,
		Dialer:                lazyDeadlineDialer(deadlineSlack(r.cfg.ReadTimeout)),
		DisableRetrySync:      true, // a fresh syncer per attempt, from our own position
		DiscardGTIDSet:        true, // tracked by txnState, for every kind of start
		RenderJSONAsMySQLText: true,
		// Temporal columns as time.Time, not fmt.Sprintf'd strings: every
		// column of an outbox row is decoded, and formatting a DATETIME was
		// the costliest part of it. The few mapped ones are formatted as
		// go-mysql would have (tableMap.str).
		ParseTime:           true,
		FillZeroLogPos:      r.cfg.Flavor == mysql.MariaDBFlavor,
		EventCacheCount:     1, // the stream's end alone travels by go-mysql's channel (inline.go)
		RowsEventDecodeFunc: func(re *replication.RowsEvent, data []byte) error { return r.decodeRows(narrow, re, data) },
		Logger:              LibraryLogger(r.log),
		// Each event is handled on the syncer's goroutine as it is parsed
		// (inline.go).
		SynchronousEventHandler: inline(func(ev *replication.BinlogEvent) error {
			if r.cfg.Observer != nil {
				if first {
					r.cfg.Observer.Connected()
					first = false
				}
				r.cfg.Observer.BinlogEvent()
			}
			return r.onEvent(ctx, st, ev, handle)
		}, &end),
	})
	defer syncer.Close()

	var (
		streamer *replication.BinlogStreamer
		err      error
	)
	mode, err := r.startMode(pos)
	if err != nil {
		return err
	}
	switch mode {
	case startGTID:
		st.exec, err = mysql.ParseGTIDSet(r.cfg.Flavor, pos.GTIDSet)
		if err != nil {
			return fmt.Errorf("%w: parse GTID set %q: %v", errFatal, pos.GTIDSet, err)
		}
		streamer, err = syncer.StartSyncGTID(st.exec.Clone())
	case startFileTracked:
		// GTIDs are on but the position has none: read the file from its
		// start, take the executed set from its PREVIOUS_GTIDS / GTID list
		// event, and skip the transactions up to pos (handed on before).
		st.track = true
		if pos.Pos > 4 {
			st.skipFile, st.skipTo = pos.File, pos.Pos
		}
		streamer, err = syncer.StartSync(mysql.Position{Name: pos.File, Pos: 4})
	default:
		streamer, err = syncer.StartSync(mysql.Position{Name: pos.File, Pos: max(pos.Pos, 4)})
	}
	if err != nil {
		return classifyDump(err, pos.GTIDSet)
	}
	return end.wait(ctx, streamer, pos.GTIDSet)
}

type startMode int

const (
	startFile        startMode = iota // file/position; no GTIDs to track
	startGTID                         // COM_BINLOG_DUMP_GTID from the position's set
	startFileTracked                  // file start, GTIDs tracked from the file's header events
)

// startMode chooses how to ask the server for pos. With GTIDs on, a position
// without a GTID set is either the start of a file before any GTID (an
// empty set: a GTID start, which every MySQL-protocol server serves) or a
// file/position saved before GTIDs were tracked (read that file from its
// start, so the executed set is known from then on).
func (r *Reader) startMode(pos event.Position) (startMode, error) {
	switch {
	case pos.GTIDSet != "":
		return startGTID, nil
	case r.cfg.Flavor == mysql.MariaDBFlavor && pos.File == "":
		return startGTID, nil
	case r.cfg.Flavor == mysql.MariaDBFlavor:
		return startFileTracked, nil // MariaDB always has GTIDs
	case r.cfg.GTIDMode && pos.Pos <= 4:
		return startGTID, nil
	case r.cfg.GTIDMode:
		return startFileTracked, nil
	case pos.File == "":
		return 0, fmt.Errorf("%w: no start position (gtid_mode is OFF, so a file and position are needed)", errFatal)
	}
	return startFile, nil
}

// ignoredSet is how a server that read no GTID set from a dump names the
// set it was sent, in its error 1236.
const ignoredSet = "The GTID set sent by the replica is ''"

// classifyDump is classify for the errors of a dump asked from GTID set
// sent. A server that answers as if the set were empty when it was not
// ignored it (Dolt reads it only with BINLOG_THROUGH_GTID, which go-mysql
// does not send, and refuses a dump that arrives while a commit is in
// flight as "purged", naming that commit): its refusal says nothing of
// our position, and the dump is retried.
func classifyDump(err error, sent string) error {
	var me *mysql.MyError
	if sent != "" && errors.As(err, &me) && me.Code == 1236 && strings.Contains(me.Message, ignoredSet) {
		return fmt.Errorf("the server ignored the GTID set the dump sent and refused it while a commit was in flight; retried: %s (error %d)", me.Message, me.Code)
	}
	return classify(err)
}

// classify turns the server's refusal to serve a position into
// position.ErrLost, and refusals that no retry can cure into errFatal.
func classify(err error) error {
	var me *mysql.MyError
	if errors.As(err, &me) {
		if isSameServerID(me.Code, me.Message) { // another replica took our server_id: not retried
			return fmt.Errorf("%w: %w: %s (error %d)", errFatal, ErrServerIDInUse, me.Message, me.Code)
		}
		switch me.Code {
		case 1236: // ER_MASTER_FATAL_ERROR_READING_BINLOG: purged, or unknown GTID
			return fmt.Errorf("%w: %s (error %d); `outbox-relay check` shows the gap and the recovery choices (remove the sink's checkpoint and start from checkpoint.start: earliest or current)", position.ErrLost, me.Message, me.Code)
		case 1045, 1227, 1044: // access denied, missing privilege
			return fmt.Errorf("%w: %s (error %d): grant REPLICATION SLAVE and REPLICATION CLIENT to the relay's user", errFatal, me.Message, me.Code)
		case 1047, 1235: // ER_UNKNOWN_COM_ERROR, ER_NOT_SUPPORTED_YET: no binlog dump here
			return fmt.Errorf("%w: the server refused the binlog dump command: %s (error %d); point the relay at a MySQL or MariaDB server (or a replica) that serves replication, with log_bin on", errFatal, me.Message, me.Code)
		}
	}
	return err
}
