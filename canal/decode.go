package canal

// This file owns event decoding: which rows events the syncer decodes at all
// (decodeRows), and what each binlog event read does to the transaction in
// progress (onEvent): GTID and table map events, outbox rows, transaction
// boundaries and XA's two phases (onQuery, xaPrepare), rotation.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"

	"github.com/outbox-relay/outbox-relay/event"
)

func (r *Reader) decodeRows(narrow *narrowCache, re *replication.RowsEvent, data []byte) error {
	pos, err := re.DecodeHeader(data)
	if err != nil {
		return err
	}
	if re.Table == nil {
		return nil
	}
	t := r.outboxTable(re.Table)
	if t == nil {
		if r.watch != nil && r.watchedTable(re.Table) != "" {
			return re.DecodeData(pos, data) // every row change of a watched table
		}
		return nil // neither an outbox nor a watched table: never decoded
	}
	if re.Type() != replication.EnumRowsEventTypeInsert {
		return nil // UPDATE and DELETE of the outbox are ignored
	}
	return narrow.decode(t, re, pos, data) // only the columns an event is made of
}

func (r *Reader) onEvent(ctx context.Context, st *txnState, ev *replication.BinlogEvent, handle Handler) error {
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		st.file = rotateName(ev, e)
	case *replication.FormatDescriptionEvent:
		st.checksum = e.ChecksumAlgorithm == replication.BINLOG_CHECKSUM_ALG_CRC32
		st.fileServer = ev.Header.ServerID
	case *replication.PreviousGTIDsEvent:
		if st.track && st.exec == nil {
			set, err := previousGTIDs(ev, st.checksum)
			if err != nil {
				return fmt.Errorf("%w: PREVIOUS_GTIDS %q: %v", errFatal, e.GTIDSets, err)
			}
			st.exec = set
		}
	case *replication.MariadbGTIDListEvent:
		if st.track && st.exec == nil {
			set, _ := mysql.ParseMariadbGTIDSet("")
			for i := range e.GTIDs {
				_ = set.(*mysql.MariadbGTIDSet).AddSet(&e.GTIDs[i])
			}
			st.exec = set
		}
	case *replication.GtidTaggedLogEvent:
		st.begin()
		u, err := uuid.FromBytes(e.SID)
		if err != nil {
			return fmt.Errorf("%w: tagged GTID event: %v", errFatal, err)
		}
		st.gtid = fmt.Sprintf("%s:%s:%d", u, e.Tag, e.GNO)
		if st.exec != nil {
			st.had = executed(st.exec, u, e.Tag, e.GNO)
			st.exec.(*mysql.MysqlGTIDSet).AddGTIDWithTag(u, e.Tag, e.GNO)
		}
	case *replication.GTIDEvent:
		st.begin()
		if ev.Header.EventType == replication.ANONYMOUS_GTID_EVENT {
			return nil // gtid_mode OFF (or a transaction from before it): no GTID
		}
		u, err := uuid.FromBytes(e.SID)
		if err != nil {
			return fmt.Errorf("%w: GTID event: %v", errFatal, err)
		}
		st.gtid = mysqlGTID(u, e.GNO)
		if st.exec != nil {
			st.had = executed(st.exec, u, mysql.Tag{}, e.GNO)
			st.exec.(*mysql.MysqlGTIDSet).AddGTID(u, e.GNO)
		}
	case *replication.MariadbGTIDEvent:
		st.begin()
		st.gtid = mariadbGTID(&e.GTID)
		st.inTxn = !e.IsStandalone()
		if st.exec != nil {
			_ = st.exec.(*mysql.MariadbGTIDSet).AddSet(&e.GTID)
		}
	case *replication.TableMapEvent:
		if r.own[string(e.Schema)][string(e.Table)] { // no allocation per table map
			st.own = true
		} else {
			st.others = true
		}
		t := r.outboxTable(e)
		if t == nil {
			if r.watch != nil {
				return r.watchTableMap(st, e)
			}
			return nil
		}
		// Every transaction has its own table map: what was resolved from
		// the last one of the table holds while its shape does.
		tm := r.resolved[t]
		if tm == nil || !sameShape(tm.ev, e) {
			var err error
			if tm, err = resolve(t, e); err != nil {
				return fmt.Errorf("%w: %v", errFatal, err)
			}
			if r.resolved == nil {
				r.resolved = map[*Table]*tableMap{}
			}
			r.resolved[t] = tm
		}
		if st.tables == nil {
			st.tables = map[uint64]*tableMap{}
		}
		st.tables[e.TableID] = tm
	case *replication.RowsEvent:
		if len(e.Rows) == 0 {
			return nil
		}
		tm := st.tables[e.TableID]
		if tm == nil {
			if wm := st.watched[e.TableID]; wm != nil {
				return wm.addChanges(st, e)
			}
			return nil
		}
		if e.Type() != replication.EnumRowsEventTypeInsert {
			return nil
		}
		st.events = slices.Grow(st.events, len(e.Rows)) // one allocation for a transaction of one rows event
		if _, ok := only(e.Rows[0]).(*event.Event); ok {
			// Decoded straight into events (direct.go).
			for _, row := range e.Rows {
				st.events = append(st.events, row[0].(*event.Event))
			}
			if r.cfg.Observer != nil {
				r.cfg.Observer.OutboxEvents(tm.name, len(e.Rows))
			}
			return nil
		}
		evs := make([]event.Event, len(e.Rows)) // one allocation for the rows event's events
		for i, row := range e.Rows {
			if err := tm.fill(&evs[i], row); err != nil {
				return fmt.Errorf("%w: table %s: %v", errFatal, tm.name, err)
			}
			st.events = append(st.events, &evs[i])
		}
		if r.cfg.Observer != nil {
			r.cfg.Observer.OutboxEvents(tm.name, len(e.Rows))
		}
	case *replication.QueryEvent:
		return r.onQuery(ctx, st, ev, bytes.TrimSpace(e.Query), handle)
	case *replication.XIDEvent:
		return r.commit(ctx, st, ev, handle)
	case *replication.TransactionPayloadEvent:
		for _, inner := range e.Events {
			if err := r.onEvent(ctx, st, inner, handle); err != nil {
				return err
			}
		}
	case *replication.HeartbeatEvent:
		if r.cfg.Observer != nil {
			r.cfg.Observer.Heartbeat()
		}
	case *replication.GenericEvent:
		switch ev.Header.EventType {
		case replication.HEARTBEAT_EVENT, replication.HEARTBEAT_LOG_EVENT_V2:
			if r.cfg.Observer != nil {
				r.cfg.Observer.Heartbeat()
			}
		case replication.XA_PREPARE_LOG_EVENT:
			return r.xaPrepare(ctx, st, ev, e.Data, handle)
		}
	}
	return nil
}

// only is row's one value, or nil.
func only(row []any) any {
	if len(row) != 1 {
		return nil
	}
	return row[0]
}

// previousGTIDs decodes a PREVIOUS_GTIDS event's set from the event's bytes
// (without the checksum, when the file's FORMAT_DESCRIPTION announced one).
// go-mysql's PreviousGTIDsEvent.GTIDSets text is wrong for tagged GTIDs
// (MySQL 8.4) of a UUID without untagged ones: it drops the UUID ("u:t:1"
// reads ":t:1") or, after another UUID, files them under that one
// ("a:1-2,b:t:1" reads "a:1-2:t:1").
func previousGTIDs(ev *replication.BinlogEvent, checksum bool) (mysql.GTIDSet, error) {
	body := ev.RawData
	if checksum {
		body = body[:max(len(body)-replication.BinlogChecksumLength, 0)]
	}
	if len(body) < replication.EventHeaderSize {
		return nil, fmt.Errorf("event of %d bytes", len(ev.RawData))
	}
	return mysql.DecodeMysqlGTIDSet(body[replication.EventHeaderSize:])
}

// onQuery handles a QUERY event: transaction boundaries, XA statements, and
// statements that are transactions of their own (DDL).
func (r *Reader) onQuery(ctx context.Context, st *txnState, ev *replication.BinlogEvent, q []byte, handle Handler) error {
	switch {
	case bytes.EqualFold(q, []byte("BEGIN")):
		st.inTxn = true
		return nil
	case bytes.EqualFold(q, []byte("COMMIT")):
		return r.commit(ctx, st, ev, handle)
	case bytes.EqualFold(q, []byte("ROLLBACK")):
		// Only changes of non-transactional tables survive a ROLLBACK in
		// the binlog: no outbox rows; a watched table's changes did happen.
		st.events = nil
		return r.commit(ctx, st, ev, handle)
	case hasPrefixFold(q, "XA START "), hasPrefixFold(q, "XA BEGIN "):
		st.inTxn = true
		st.xa = xid(q[len("XA START "):])
		return nil
	case hasPrefixFold(q, "XA END "):
		return nil
	case hasPrefixFold(q, "XA COMMIT "):
		id := xid(q[len("XA COMMIT "):])
		if st.inTxn && st.xa == id {
			return r.commit(ctx, st, ev, handle) // XA COMMIT … ONE PHASE
		}
		// The second phase of a prepared transaction: its own GTID, its
		// rows were read at XA PREPARE.
		st.events = append(st.events, st.prepared[id].events...)
		st.changes = append(st.changes, st.prepared[id].changes...)
		st.release(id)
		return r.commit(ctx, st, ev, handle)
	case hasPrefixFold(q, "XA ROLLBACK "):
		st.events, st.changes = nil, nil
		st.release(xid(q[len("XA ROLLBACK "):]))
		return r.commit(ctx, st, ev, handle)
	case st.inTxn:
		return nil // a statement inside a transaction (SAVEPOINT, ...)
	default:
		return r.commit(ctx, st, ev, handle) // DDL: its own transaction
	}
}

// xaPrepare ends the first phase of an XA transaction: a one-phase commit
// releases its rows now; otherwise they wait for the XA COMMIT that names the
// same xid, and until then the positions handed on stay before this
// transaction. data is the XA_PREPARE event's body: one_phase (1 byte),
// formatID, gtrid_length, bqual_length (4 bytes each), then gtrid and bqual.
func (r *Reader) xaPrepare(ctx context.Context, st *txnState, ev *replication.BinlogEvent, data []byte, handle Handler) error {
	if len(data) < 13 {
		return fmt.Errorf("%w: XA_PREPARE event of %d bytes", errFatal, len(data))
	}
	if data[0] != 0 {
		return r.commit(ctx, st, ev, handle) // one_phase
	}
	format := binary.LittleEndian.Uint32(data[1:])
	gl, bl := int(binary.LittleEndian.Uint32(data[5:])), int(binary.LittleEndian.Uint32(data[9:]))
	if gl < 0 || bl < 0 || 13+gl+bl > len(data) {
		return fmt.Errorf("%w: XA_PREPARE event: bad xid lengths %d, %d", errFatal, gl, bl)
	}
	// The form XA COMMIT / XA ROLLBACK are logged with: X'gtrid',X'bqual',formatID.
	id := fmt.Sprintf("x'%x',x'%x',%d", data[13:13+gl], data[13+gl:13+gl+bl], format)
	if len(st.events) > 0 || len(st.changes) > 0 {
		if st.prepared == nil {
			st.prepared = map[string]preparedXA{}
		}
		st.prepared[id] = preparedXA{events: st.events, changes: st.changes}
		if st.hold == nil {
			h := st.last
			st.hold = &h
		}
	}
	st.events, st.changes = nil, nil
	return r.commit(ctx, st, ev, handle) // moves the executed set; no events
}

// xid normalises the xid of an XA statement as logged (X'..',X'..',n),
// dropping a trailing ONE PHASE, so XA START and XA COMMIT match.
func xid(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.Index(strings.ToUpper(s), " ONE PHASE"); i >= 0 {
		s = s[:i]
	}
	return strings.ToLower(strings.ReplaceAll(s, " ", ""))
}

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && strings.EqualFold(string(b[:len(prefix)]), prefix)
}

// executed reports whether MySQL GTID set exec holds uuid:tag:gno.
func executed(exec mysql.GTIDSet, u uuid.UUID, tag mysql.Tag, gno int64) bool {
	m, ok := exec.(*mysql.MysqlGTIDSet)
	return ok && (*m)[u][tag].Contain(mysql.IntervalSlice{{Start: gno, Stop: gno + 1}})
}

// rotateName is the binlog file a ROTATE event names. The first ROTATE of a
// stream is artificial and comes before the FORMAT_DESCRIPTION that says
// whether events carry a checksum, so go-mysql asks the server to send it
// without one; MySQL does, Dolt does not, and go-mysql then reads the 4
// checksum bytes as the end of the name. They are dropped when they are
// the CRC32 of the rest of the event.
func rotateName(ev *replication.BinlogEvent, e *replication.RotateEvent) string {
	name, raw := e.NextLogName, ev.RawData
	if n := len(raw); n > replication.EventHeaderSize+4 && len(name) > 4 && bytes.HasSuffix(name, raw[n-4:]) &&
		crc32.ChecksumIEEE(raw[:n-4]) == binary.LittleEndian.Uint32(raw[n-4:]) {
		name = name[:len(name)-4]
	}
	return string(name)
}
