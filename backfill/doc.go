// Package backfill reads an outbox table's retained rows as a
// pipeline.Source, consistently with the binlog: the table source of a new
// sink's backfill and of a replay whose window the binlog no longer holds.
//
// What a Source promises:
//
//   - Rows are read in primary key order by keyset pagination (no OFFSET),
//     Config.ChunkSize at a time, each chunk handed on as one event.Txn
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
//     in a short consistent snapshot whose own binlog position G MariaDB
//     names (binlog_snapshot_file/position), and the chunk's rows whose
//     INSERT the binlog holds between P and G are dropped; a live stream
//     from P delivers those. Together they send every row once. The ids
//     dropped are learnt by a binlog reader of the backfill's own, run from
//     P beside it; it keeps one id per outbox row inserted into the table
//     since P, while Run runs.
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
// MariaDB only: MySQL names no binlog position of a consistent snapshot.
//
// A Source's Run is called by one goroutine at a time.
package backfill
