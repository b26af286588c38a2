// Package prune deletes the outbox rows that every sink has acknowledged,
// and only those: the housekeeping a polling relay does by marking rows
// processed, done here from the relay's per-sink checkpoints.
//
// # The horizon
//
// A row may go when its timestamp column (tables[].columns.created_at: a
// TIMESTAMP or DATETIME with DEFAULT CURRENT_TIMESTAMP, set by the server) is
// before the cutoff, the earliest of:
//
//   - now minus the retention (prune.older_than), on the server's clock;
//   - for every sink, and every webhook endpoint (config.PipelineNames), the
//     time up to which it acknowledged every committed transaction, minus
//     prune.safety_margin. That is the server's clock when the sink's
//     checkpoint holds every transaction the server had executed (the sink
//     is caught up), else the commit time of the checkpoint's last
//     transaction (checkpoint.Checkpoint.CommitTime). A sink with no
//     checkpoint, or one without a commit time, holds everything back;
//   - the start of the oldest open transaction that has written rows
//     (information_schema.INNODB_TRX, when the user may read it): its rows
//     are not committed, let alone acknowledged.
//
// The margin covers what the timestamps cannot say: a row's timestamp is its
// INSERT's time, its transaction commits later, and the binlog's commit times
// have whole seconds. It must exceed the longest transaction that writes
// outbox rows. A dead-lettered event counts as handled because the pipeline
// moves a checkpoint past an event only once the sink acknowledged it or it
// is in the dead-letter store.
//
// # How rows go
//
// In batches of prune.batch_size rows by primary key: a consistent (non
// locking) read picks committed rows before the cutoff, and a DELETE by
// their keys, re-checking the cutoff, removes them in one short transaction
// that locks only them; prune.pause (and prune.rate) space the batches. A
// table RANGE-partitioned by its timestamp column (TO_DAYS(col),
// UNIX_TIMESTAMP(col) or RANGE COLUMNS(col)) has whole partitions dropped
// instead, each only once its upper bound is at or before the cutoff, and
// keeps prune.partitions_ahead partitions created ahead of time. DDL waits at
// most prune.lock_wait_timeout for the table's metadata lock, since writers
// queue behind a waiting DDL.
//
// The relay ignores the DELETEs it reads (it delivers INSERTs only), and
// the binlog keeps every INSERT, so a deleted row is never an event lost.
//
// A Pruner is used by one goroutine at a time; two prunes of one table (two
// processes) are kept apart by a GET_LOCK per table on the source server.
//
// NewMetrics registers prune's figures (MetricNames) on a relay's metrics
// and is the Observer that records them.
package prune
