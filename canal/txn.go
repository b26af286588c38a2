package canal

// This file owns the transaction buffer: txnState, what the reader holds of
// the transaction in progress and of prepared XA transactions, and commit,
// which finishes its events (commit time, source, trace context, generated
// ids) and hands it on at the position a restart must resume from.

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/printable"
)

// txnState is the reader's view of the transaction in progress.
type txnState struct {
	server string // "host:port" being read
	file   string
	inTxn  bool // a BEGIN (or XA START) was read
	gtid   string
	events []*event.Event
	tables map[uint64]*tableMap
	// changes and watched: the rows and TABLE_MAPs of watched tables; nil
	// when the reader watches none.
	changes []event.Change
	watched map[uint64]*watchMap

	// exec is the executed GTID set including the transaction in progress;
	// nil when GTIDs are off, or until a file start's header event.
	exec  mysql.GTIDSet
	track bool // file start: take exec from the first PREVIOUS_GTIDS / GTID list
	// checksum: the file's events end with a CRC32 (its FORMAT_DESCRIPTION says).
	checksum bool
	// fileServer is the server_id of the server whose binlog file is being
	// read (its FORMAT_DESCRIPTION event's), 0 until that event.
	fileServer uint32
	// skipFile/skipTo: a tracked file start resumes a position inside the
	// file; transactions ending at or before it were handed on already.
	skipFile string
	skipTo   uint32
	// had: the transaction in progress is in exec already, a server that
	// ignored the dump's GTID set sent it again (Dolt reads the set only
	// with BINLOG_THROUGH_GTID, which go-mysql does not send): it was
	// handed on before, or is before the start, and is not handed on.
	had bool

	// own: the transaction has rows in a table of Config.Own; others: in
	// any other table.
	own, others bool

	xa       string                // the XA transaction in progress (its xid as logged), "" if none
	prepared map[string]preparedXA // XA PREPAREd rows waiting for XA COMMIT / ROLLBACK
	// hold is where a restart must resume while prepared holds rows: the
	// position before the oldest of those transactions. Positions handed
	// on stay there, so a checkpoint never skips a prepared transaction.
	hold *event.Position
	last event.Position // the position after the last transaction read
}

// preparedXA is what an XA PREPAREd transaction holds until its XA COMMIT.
type preparedXA struct {
	events  []*event.Event
	changes []event.Change
}

// release forgets a prepared transaction once it is committed or rolled back.
func (st *txnState) release(id string) {
	delete(st.prepared, id)
	if len(st.prepared) == 0 {
		st.hold = nil
	}
}

func (st *txnState) begin() {
	st.had = false
	st.inTxn = false
	st.gtid = ""
	st.events = nil
	st.tables = nil
	st.changes = nil
	st.watched = nil
	st.own, st.others = false, false
	st.xa = ""
}

func (r *Reader) commit(ctx context.Context, st *txnState, ev *replication.BinlogEvent, handle Handler) error {
	pos := event.Position{File: st.file, Pos: ev.Header.LogPos, Server: st.server, ServerID: st.fileServer}
	if st.exec != nil {
		pos.GTIDSet = gtidSet(st.exec)
	}
	if st.skipTo > 0 {
		if st.file == st.skipFile && pos.Pos <= st.skipTo {
			st.begin() // handed on before the restart
			return nil
		}
		st.skipTo = 0
	}
	if st.had {
		st.begin() // in the start set: a server that ignored it sent it
		return nil
	}
	if st.own && !st.others && len(st.events) == 0 && len(st.changes) == 0 && st.xa == "" {
		st.begin() // the relay's own write (a checkpoint save): nothing to hand on
		return nil
	}
	commitTime := time.Unix(int64(ev.Header.Timestamp), 0).UTC()
	for i, e := range st.events {
		e.CommitTime = commitTime
		e.Source = event.Source{GTID: st.gtid, File: pos.File, Pos: pos.Pos}
		if !finishTrace(e) {
			r.badTraceParent(e)
		}
		if e.ID == "" {
			e.ID = GeneratedID(e.Table, e.Source, i)
			r.log.Warn("outbox row with an empty or NULL id: delivered with a generated id", slog.String("table", e.Table),
				slog.String("gtid", e.Source.GTID), slog.Int("row", i), slog.String("event_id", e.ID))
		}
	}
	st.last = pos
	if st.hold != nil {
		pos = *st.hold
	}
	txn := &event.Txn{Events: st.events, Changes: st.changes, Position: pos, CommitTime: commitTime, Held: st.hold != nil}
	st.begin()
	if r.cfg.Observer != nil {
		r.cfg.Observer.Transaction(commitTime)
	}
	return handle(ctx, txn)
}

// finishTrace sets e's trace context to what the relay carries (ParseTraceParent,
// BoundTraceState), and reports false when its traceparent is malformed
// (left as read: the caller drops it and counts it).
func finishTrace(e *event.Event) bool {
	if e.TraceParent == "" {
		return true
	}
	tp, ok := event.ParseTraceParent(e.TraceParent)
	if !ok {
		return false
	}
	e.TraceParent, e.TraceState = tp, event.BoundTraceState(e.TraceState)
	return true
}

// TraceObserver is implemented by an Observer that also counts the rows
// whose traceparent column held no valid W3C traceparent.
type TraceObserver interface {
	// TraceParentMalformed is called for each such row of table.
	TraceParentMalformed(table string)
}

// badTraceParent drops e's malformed trace context (the event is delivered
// without one), logs it the first time and counts it.
func (r *Reader) badTraceParent(e *event.Event) {
	if !r.badTraceLogged {
		r.badTraceLogged = true
		r.log.Warn("outbox row with a malformed traceparent: delivered without trace context (logged once; see outbox_relay_traceparent_malformed_total)",
			slog.String("table", e.Table), slog.String("event_id", e.ID), slog.String("traceparent", printable.String(e.TraceParent)))
	}
	e.TraceParent, e.TraceState = "", ""
	if o, ok := r.cfg.Observer.(TraceObserver); ok {
		o.TraceParentMalformed(e.Table)
	}
}

// idSpace is the UUID namespace of generated event ids.
var idSpace = uuid.MustParse("6f2b3c1e-8f0a-4d5e-9c47-0b7e1a2d3c4f")

// GeneratedID is the id given to an outbox row whose id column is empty or
// NULL: a name-based UUID (version 5) of the table, the transaction (its GTID,
// or its binlog file and end position when GTIDs are off) and the row's index
// among the transaction's outbox rows. The same row read again (after a
// restart, or by another sink) gets the same id, so receivers can still
// deduplicate; no two rows share one.
func GeneratedID(table string, src event.Source, row int) string {
	tx := src.GTID
	if tx == "" {
		tx = fmt.Sprintf("%s:%d", src.File, src.Pos)
	}
	return uuid.NewSHA1(idSpace, []byte(fmt.Sprintf("%s/%s/%d", table, tx, row))).String()
}
