// Package backfill reads an outbox table's retained rows as a
// pipeline.Source, consistently with the binlog: the table source of a new
// sink's backfill and of a replay whose window the binlog no longer holds.
//
// What a Source promises:
//
//   - Rows are read in primary key order by keyset pagination (no OFFSET),
//     up to the table's last key when Run starts (read after P, it is at
//     or after every row committed before P: rows inserted later after it
//     are the live stream's, so a backfill ends however fast producers
//     insert), Config.ChunkSize at a time, each chunk handed on as one event.Txn
//     whose position is the backfill's start (Start: a binlog position P)
//     with the last key read (event.Position.Table): a pipeline that saves
//     it resumes after the last chunk acknowledged. The last chunk's cursor
//     is Done; Run then returns nil, and at once when run from a Done one.
//   - Rows become events with the binlog reader's own mapping
//     (canal.RowMapper): the same ids, headers and trace context. Their
//     Source (GTID, binlog position) and CommitTime are zero: a table does
//     not know them.
//   - Exactly the rows committed before P are handed on (those still in the
//     table and meeting Config.Where and Config.Since): each chunk is read
//     in a short consistent snapshot of its own, and the chunk's rows whose
//     INSERT the binlog holds after P are dropped; a live stream from P
//     delivers those. Together they send every row once. The ids dropped
//     are learnt by a binlog reader of the backfill's own, run from P
//     beside it, which is waited for until it has read every transaction
//     the snapshot can see: it keeps one id per outbox row inserted into
//     the table since P, while Run runs. How far that is depends on the
//     flavor, not what is promised:
//   - MariaDB: P and each snapshot's position G are the binlog positions
//     MariaDB names for a consistent snapshot (binlog_snapshot_file and
//     _position, read inside it): every transaction before G, none after.
//   - MySQL (and Dolt), which name none: P is gtid_executed, and a chunk's
//     high watermark H is gtid_executed read once its SELECT is done (the
//     read-only watermarks of Debezium's MySQL incremental snapshot): the
//     snapshot began before H was read, so every transaction it sees is
//     in H. The reader's wait is for H. Needs gtid_mode=ON. A binlog
//     server that ignores the GTID set the reader asks from (Dolt) sends
//     the transactions before P too: the reader passes over them
//     (canal.Reader hands on no transaction its executed set holds).
//     Only INSERTs after P are dropped, not every key the binlog changed
//     between the watermarks as Debezium does: the live stream sends an
//     outbox table's inserts only, so a row inserted before P and updated
//     or deleted since is the backfill's (as the snapshot saw it) or
//     nobody's.
//   - A WHERE filter is checked (sqlident.CheckCondition: no ';', no comment, balanced
//     parentheses and quotes), run inside parentheses, and once by the
//     server with LIMIT 0 before any row is read, so a mistake is an error
//     that names the filter, not a failed chunk later.
//
// Order: a backfill hands on rows in primary key order, which is each
// aggregate's commit order when the key grows with inserts (AUTO_INCREMENT,
// time-ordered ids) and an aggregate's writes are serialized (the usual
// row lock on the aggregate); with random keys (UUIDv4) it is not.
//
// Cost per Run: one SELECT of the table's last key. Per chunk, on either
// flavor: five statements (a session setting,
// START TRANSACTION WITH CONSISTENT SNAPSHOT, the position or watermark
// read, the SELECT, COMMIT), the chunk's rows read by primary key range,
// and one read view open from START to COMMIT (one SELECT of ChunkSize
// rows). The GTID position of MariaDB's start (BINLOG_GTID_POS) is read
// once; MySQL's start is one SELECT of gtid_executed, no snapshot.
//
// A Source's Run is called by one goroutine at a time.
package backfill
