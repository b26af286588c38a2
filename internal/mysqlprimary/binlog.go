package mysqlprimary

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/google/uuid"
	"github.com/klauspost/compress/zstd"
)

// binlogFile is one binary log file, held in memory as its events.
type binlogFile struct {
	name      string
	events    []fileEvent // from position 4: FORMAT_DESCRIPTION, PREVIOUS_GTIDS, ...
	size      uint32      // position after the last event
	previous  *gtidSet    // PREVIOUS_GTIDS: executed before this file
	rotated   bool        // ends with a ROTATE: no more events
	sequence  int64       // last sequence_number written in this file
	firstGTID *gtidInfo   // first transaction's GTID, if any
}

// fileEvent is an event at its position in a file.
type fileEvent struct {
	pos  uint32
	data []byte // as in the file, with its CRC32
	typ  byte
	gtid *gtidInfo // GTID events only
}

// committed is one transaction (or XA part) in binlog order, kept so that a
// replica can be built with the same history.
type committed struct {
	gtid       gtidInfo // sid, tag, gno, anonymous, flags, times
	serverID   uint32
	ts         uint32
	events     []event // after the GTID event
	compressed bool
}

// Txn is a transaction to commit on the scripted primary.
type Txn struct {
	// GTID is "uuid:gno" or "uuid:tag:gno". Empty: the server's next GTID
	// (with Tag, when set); anonymous when gtid_mode is not ON.
	GTID string
	// Tag is the tag of an automatically numbered GTID (MySQL 8.4).
	Tag string
	// Rows are rows inserted into the server's outbox table (Outbox()),
	// written before Writes.
	Rows [][]any
	// Writes are rows inserted into any table, each a TABLE_MAP and a
	// WRITE_ROWS event.
	Writes []Write
	// Query, when set, is a statement logged on its own (DDL): the
	// transaction is the GTID event and this QUERY event, and Writes must be
	// empty.
	Query string
	// Compressed writes the transaction as MySQL does with
	// binlog_transaction_compression=ON: the GTID event, then one
	// TRANSACTION_PAYLOAD_EVENT holding the others, zstd-compressed.
	Compressed bool
	// Time is the commit time; default now.
	Time time.Time
}

// Write is rows inserted into one table.
type Write struct {
	Table Table
	Rows  [][]any
}

// XID is an XA transaction identifier: XA START 'gtrid','bqual',formatID.
type XID struct {
	GTRID    string
	BQual    string
	FormatID int
}

// String is the XID as MySQL writes it in the binlog: X'..',X'..',formatID.
func (x XID) String() string {
	return fmt.Sprintf("X'%s',X'%s',%d", hex.EncodeToString([]byte(x.GTRID)), hex.EncodeToString([]byte(x.BQual)), x.FormatID)
}

func xid(gtrid string) XID { return XID{GTRID: gtrid, FormatID: 1} }

// Commit appends a transaction to the binary log and returns its GTID
// ("ANONYMOUS" when gtid_mode is OFF). Streams waiting at the end of the
// binlog receive it at once. It fails the test on a malformed transaction.
func (s *Server) Commit(txn Txn) string {
	s.t.Helper()
	if len(txn.Rows) > 0 {
		txn.Writes = append([]Write{{Table: s.outbox, Rows: txn.Rows}}, txn.Writes...)
	}
	if txn.Query != "" && len(txn.Writes) > 0 {
		s.t.Fatalf("mysqlprimary: a transaction has Query or Writes, not both")
	}
	var evs []event
	ts := s.timestamp(txn.Time)
	if txn.Query != "" {
		evs = append(evs, s.queryEvent(ts, txn.Query))
		return s.appendTxn(txn.GTID, txn.Tag, 1, ts, evs, txn.Compressed, txn.Time)
	}
	evs = append(evs, s.queryEvent(ts, "BEGIN"))
	rows, err := s.rowEvents(ts, txn.Writes)
	if err != nil {
		s.t.Fatalf("mysqlprimary: %v", err)
	}
	evs = append(evs, rows...)
	evs = append(evs, s.xidEvent(ts))
	return s.appendTxn(txn.GTID, txn.Tag, 0, ts, evs, txn.Compressed, txn.Time)
}

// Insert commits one transaction inserting rows into the server's outbox
// table (OutboxTable(Options.Schema)) and returns its GTID.
func (s *Server) Insert(rows ...[]any) string {
	s.t.Helper()
	return s.Commit(Txn{Rows: rows})
}

// Exec logs a statement on its own, as DDL is (GTID, QUERY), and returns its
// GTID.
func (s *Server) Exec(query string) string {
	s.t.Helper()
	return s.Commit(Txn{Query: query})
}

// XAPrepare logs the first part of an XA transaction: its own GTID, then
// XA START, the rows, XA END and XA_PREPARE_LOG_EVENT. The rows are not
// committed until XACommit. It returns the GTID.
func (s *Server) XAPrepare(gtrid string, writes ...Write) string {
	s.t.Helper()
	return s.xaPrepare(gtrid, false, writes)
}

// XACommitOnePhase logs XA START … XA END then XA_PREPARE_LOG_EVENT with
// one_phase set, as MySQL logs XA COMMIT … ONE PHASE: the rows are committed
// by that event. It returns the GTID.
func (s *Server) XACommitOnePhase(gtrid string, writes ...Write) string {
	s.t.Helper()
	return s.xaPrepare(gtrid, true, writes)
}

func (s *Server) xaPrepare(gtrid string, onePhase bool, writes []Write) string {
	s.t.Helper()
	x := xid(gtrid)
	ts := s.timestamp(time.Time{})
	evs := []event{s.queryEvent(ts, "XA START "+x.String())}
	rows, err := s.rowEvents(ts, writes)
	if err != nil {
		s.t.Fatalf("mysqlprimary: %v", err)
	}
	evs = append(evs, rows...)
	evs = append(evs, s.queryEvent(ts, "XA END "+x.String()))
	evs = append(evs, event{typ: evXAPrepare, ts: ts, serverID: s.opts.ServerID, body: xaPrepareBody(onePhase, x)})
	g := s.appendTxn("", "", 0, ts, evs, false, time.Time{})
	if !onePhase {
		s.mu.Lock()
		s.prepared[gtrid] = g
		s.mu.Unlock()
	}
	return g
}

// XACommit logs XA COMMIT of a prepared XA transaction as its own
// transaction (GTID, QUERY) and returns its GTID.
func (s *Server) XACommit(gtrid string) string {
	s.t.Helper()
	return s.xaEnd(gtrid, "XA COMMIT ")
}

// XARollback logs XA ROLLBACK of a prepared XA transaction and returns its
// GTID.
func (s *Server) XARollback(gtrid string) string {
	s.t.Helper()
	return s.xaEnd(gtrid, "XA ROLLBACK ")
}

func (s *Server) xaEnd(gtrid, verb string) string {
	s.t.Helper()
	s.mu.Lock()
	_, ok := s.prepared[gtrid]
	delete(s.prepared, gtrid)
	s.mu.Unlock()
	if !ok {
		s.t.Fatalf("mysqlprimary: %s%q: no such prepared XA transaction (XAER_NOTA)", verb, gtrid)
	}
	ts := s.timestamp(time.Time{})
	return s.appendTxn("", "", 1, ts, []event{s.queryEvent(ts, verb+xid(gtrid).String())}, false, time.Time{})
}

func (s *Server) timestamp(t time.Time) uint32 {
	if t.IsZero() {
		t = time.Now()
	}
	return uint32(t.Unix())
}

func (s *Server) queryEvent(ts uint32, q string) event {
	return event{typ: evQuery, ts: ts, serverID: s.opts.ServerID, body: queryBody(threadID, s.opts.Schema, q)}
}

// threadID is the session id written in query events.
const threadID = 8

func (s *Server) xidEvent(ts uint32) event {
	s.mu.Lock()
	s.xid++
	x := s.xid
	s.mu.Unlock()
	return event{typ: evXID, ts: ts, serverID: s.opts.ServerID, body: xidBody(x)}
}

// rowEvents returns TABLE_MAP and WRITE_ROWS events for writes: all table
// maps of the statement first, as MySQL writes them, then the rows, the last
// rows event with STMT_END_F.
func (s *Server) rowEvents(ts uint32, writes []Write) ([]event, error) {
	var maps, rows []event
	seen := map[string]bool{}
	for i, w := range writes {
		if w.Table.Name == "" {
			return nil, fmt.Errorf("write %d has no table", i)
		}
		id := s.tableID(w.Table)
		if !seen[w.Table.fullName()] {
			seen[w.Table.fullName()] = true
			maps = append(maps, event{typ: evTableMap, ts: ts, serverID: s.opts.ServerID, body: tableMapBody(id, w.Table, s.opts.Version)})
		}
		body, err := writeRowsBody(id, w.Table, w.Rows, i == len(writes)-1)
		if err != nil {
			return nil, err
		}
		rows = append(rows, event{typ: evWriteRowsV2, ts: ts, serverID: s.opts.ServerID, body: body})
	}
	s.mu.Lock()
	for _, w := range writes {
		s.tables[w.Table.fullName()] = w.Table
	}
	s.mu.Unlock()
	return append(maps, rows...), nil
}

func (s *Server) tableID(t Table) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.tableIDs[t.fullName()]
	if !ok {
		id = uint64(100 + len(s.tableIDs))
		s.tableIDs[t.fullName()] = id
	}
	return id
}

// appendTxn numbers the transaction, writes its GTID event and evs to the
// active file, and wakes the streams. flags is the GTID event's flags (1 for
// a statement logged as such).
func (s *Server) appendTxn(gtid, tag string, flags byte, ts uint32, evs []event, compressed bool, at time.Time) string {
	s.t.Helper()
	if at.IsZero() {
		at = time.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := gtidInfo{flags: flags, commitMicros: uint64(at.UnixMicro()), serverVersion: versionNumber(s.opts.Version)}
	switch {
	case gtid != "":
		sid, tg, gno, err := parseGTID(gtid)
		if err != nil {
			s.t.Fatalf("mysqlprimary: %v", err)
		}
		g.sid, g.tag, g.gno = sid, tg, gno
	case !s.gtidOn():
		g.anonymous = true
	default:
		g.sid, g.tag = s.uuid, mysql.NewTag(tag).String()
		g.gno = s.nextGNO(g.tag)
	}
	if !g.anonymous && containsGTID(s.executed, g.sid, g.tag, g.gno) {
		s.t.Fatalf("mysqlprimary: GTID %s was already executed", g)
	}
	c := committed{gtid: g, serverID: s.opts.ServerID, ts: ts, events: evs, compressed: compressed}
	if err := s.writeTxn(c); err != nil {
		s.t.Fatalf("mysqlprimary: %v", err)
	}
	return g.String()
}

// writeTxn writes a transaction to the active file. s.mu is held.
func (s *Server) writeTxn(c committed) error {
	f := s.files[len(s.files)-1]
	evs := c.events
	if c.compressed {
		var raw []byte
		for _, e := range evs {
			raw = append(raw, e.encode(0, false)...)
		}
		enc, err := zstd.NewWriter(nil)
		if err != nil {
			return err
		}
		z := enc.EncodeAll(raw, nil)
		_ = enc.Close()
		evs = []event{{typ: evPayload, ts: c.ts, serverID: c.serverID, body: payloadBody(z, len(raw))}}
	}
	g := c.gtid
	g.sequenceNumber = f.sequence + 1
	g.lastCommitted = f.sequence
	var rest uint64
	for _, e := range evs {
		rest += uint64(e.size(true))
	}
	// The transaction length counts the GTID event, whose size depends on
	// how the length is encoded: settle it.
	g.txnLength = rest
	for {
		n := rest + uint64(g.event(c.ts, c.serverID).size(true))
		if n == g.txnLength {
			break
		}
		g.txnLength = n
	}
	f.sequence++
	gi := g
	f.add(g.event(c.ts, c.serverID), &gi)
	if f.firstGTID == nil {
		f.firstGTID = &gi
	}
	for _, e := range evs {
		f.add(e, nil)
	}
	if !g.anonymous {
		addGTID(s.executed, g.sid, g.tag, g.gno)
	}
	s.history = append(s.history, c)
	s.wake()
	return nil
}

// add appends an event at the end of the file.
func (f *binlogFile) add(e event, g *gtidInfo) {
	pos := f.size
	data := e.encode(pos+e.size(true), true)
	f.events = append(f.events, fileEvent{pos: pos, data: data, typ: e.typ, gtid: g})
	f.size += uint32(len(data))
}

// wake tells waiting streams that the binlog changed. s.mu is held.
func (s *Server) wake() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// nextGNO is the next unused number of the server's UUID and tag. s.mu is held.
func (s *Server) nextGNO(tag string) int64 {
	n := int64(1)
	for _, iv := range (*s.executed)[s.uuid][mysql.NewTag(tag)] {
		if iv.Stop > n {
			n = iv.Stop
		}
	}
	return n
}

// newFile starts a binlog file. s.mu is held.
func (s *Server) newFile(created uint32) *binlogFile {
	s.fileSeq++
	f := &binlogFile{name: fmt.Sprintf("%s.%06d", s.opts.BinlogBaseName, s.fileSeq), size: 4, previous: cloneSet(s.executed)}
	f.add(event{typ: evFormatDescription, ts: uint32(time.Now().Unix()), serverID: s.opts.ServerID, body: fdeBody(s.opts.Version, created)}, nil)
	f.add(event{typ: evPreviousGTIDs, ts: uint32(time.Now().Unix()), serverID: s.opts.ServerID, flags: 0x80, body: previousGTIDsBody(f.previous)}, nil)
	s.files = append(s.files, f)
	return f
}

// Rotate closes the active binlog file with a ROTATE event and starts the
// next one, as FLUSH BINARY LOGS does. It returns the new file's name.
func (s *Server) Rotate() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rotate()
	return s.files[len(s.files)-1].name
}

func (s *Server) rotate() {
	f := s.files[len(s.files)-1]
	next := fmt.Sprintf("%s.%06d", s.opts.BinlogBaseName, s.fileSeq+1)
	f.add(event{typ: evRotate, ts: uint32(time.Now().Unix()), serverID: s.opts.ServerID, body: rotateBody(4, next)}, nil)
	f.rotated = true
	s.newFile(0)
	s.wake()
}

// Purge removes the binlog files before file, as PURGE BINARY LOGS TO does:
// their transactions move to gtid_purged, and a dump that needs them fails
// with error 1236. Purge("") rotates first and purges every older file.
// It returns the new gtid_purged.
func (s *Server) Purge(file string) string {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if file == "" {
		s.rotate()
		file = s.files[len(s.files)-1].name
	}
	i := s.fileIndex(file)
	if i < 0 {
		s.t.Fatalf("mysqlprimary: purge to %s: no such binlog file (error 1373)", file)
	}
	s.files = s.files[i:]
	s.purged = cloneSet(s.files[0].previous)
	return s.purged.String()
}

func (s *Server) fileIndex(name string) int {
	for i, f := range s.files {
		if f.name == name {
			return i
		}
	}
	return -1
}

// parseGTID parses "uuid:gno" or "uuid:tag:gno".
func parseGTID(s string) (uuid.UUID, string, int64, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 2 && len(parts) != 3 {
		return uuid.UUID{}, "", 0, fmt.Errorf("GTID %q: want uuid:number or uuid:tag:number", s)
	}
	sid, err := uuid.Parse(parts[0])
	if err != nil {
		return uuid.UUID{}, "", 0, fmt.Errorf("GTID %q: %w", s, err)
	}
	gno, err := strconv.ParseInt(parts[len(parts)-1], 10, 64)
	if err != nil || gno < 1 {
		return uuid.UUID{}, "", 0, fmt.Errorf("GTID %q: bad number", s)
	}
	tag := ""
	if len(parts) == 3 {
		tag = mysql.NewTag(parts[1]).String()
	}
	return sid, tag, gno, nil
}
