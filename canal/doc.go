// Package canal reads a MySQL or MariaDB binary log as a replica would and
// turns the INSERTs on the configured outbox tables into events, grouped by
// transaction.
//
// It is built on go-mysql's replication.BinlogSyncer (not its canal.Canal,
// which dumps the database and maps old rows with today's schema). What a
// Reader promises:
//
//   - Transactions are handed on in binlog (commit) order, one event.Txn each,
//     only when their commit (XID event, or the COMMIT query) has been read.
//     Transactions that touch no outbox table are handed on too, with no
//     events, so the position keeps moving on a busy server with a quiet outbox.
//   - Only write-rows events of outbox tables become events; UPDATE and DELETE
//     are ignored, so "insert the outbox row and delete it in the same
//     transaction" works. Rows of other tables are never decoded, except
//     those of watched tables (Config.Watch): each of their inserted,
//     updated and deleted rows becomes an event.Change of its transaction,
//     in binlog order, with its column names and normalized values.
//   - An outbox row's columns that no event field reads are not decoded,
//     only stepped over; those read are decoded by go-mysql, as before
//     (narrow.go), or, when an event reads only integer or character id,
//     character aggregate and type columns and a payload (no header or
//     trace context column), straight from the row image into the event
//     (direct.go). An event's payload may then share memory with the other
//     events of its rows event: it is capped, and no one writes to it.
//   - Column names come from the TABLE_MAP event's optional metadata
//     (binlog_row_metadata=FULL), so a row is always read with the schema it
//     was written with.
//   - Compressed transactions (TransactionPayloadEvent) are unpacked.
//   - Each position handed on is the full executed GTID set (MySQL) or GTID
//     position (MariaDB) including that transaction, plus its binlog file and
//     offset; resuming from it neither skips nor repeats a transaction.
//   - On a stream error Run reconnects from the end of the last transaction it
//     handed on, with a fresh syncer and capped backoff, forever, logging each
//     attempt; a position the server no longer has is returned as
//     position.ErrLost (Config.Pick's errors wrapping position.ErrLost or
//     position.ErrNotInHistory end Run too).
//   - While a prepared XA transaction with outbox rows waits for its XA
//     COMMIT, the position handed on is held at the end of the last
//     transaction before it (a restart reads it again), and those
//     transactions say so (event.Txn.Held).
//
// Besides the Reader, ScanFile (a time's place in a file) and
// CommitFinder (when the transaction that ends at a position committed,
// for the resume check) read one file with a binlog dump of their own.
//
// canal only reads the binlog stream. Asking the server about itself
// (flavor, binlog list, GTID state, replicas, outbox table columns) is
// package source's; comparing positions (containment, gaps) is package
// position's. canal imports no source and, of config, only the
// payload-path syntax (config.PayloadPath) that a trace column may name.
//
// A Reader is used by one goroutine at a time: Run blocks until ctx ends.
// Run calls its handler on the goroutine that reads the connection (go-mysql's
// syncer's), as each transaction's commit is parsed: one call at a time, none
// after Run has returned, and a handler's panic is raised again from Run.
package canal
