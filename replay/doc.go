// Package replay sends a window of the past again to one sink, or to one
// endpoint of a webhook sink, beside the live stream: "our consumer had a
// bug since 10:00; send it everything since 10:00 again".
//
// A replay is a Job: a target (a sink, or a sink and an endpoint), a window
// (From, resolved to a binlog position when the job is made, to Until),
// filters (event types) and a source kind ("binlog" here; "table", the
// outbox table's retained rows, is another package's and plugs in through
// Runner.Sources; "kafka", the topics the scaled-out gateway reads, is run
// by package gateway/scaled, with its window's offsets from package
// gateway/kafkasource). Jobs are persisted in the relay's checkpoint store under
// reserved keys (checkpoint.Reserved): the job's record under JobKey, the
// progress of its pipeline under ProgressKey, a request to cancel it under
// CancelKey. A pipeline's save never writes a job's record (they are
// different keys), and what lists the store's keys as sinks passes over
// them.
//
// Requests reach a running relay through the store when it is the MySQL
// store (the relay lists it every Runner.Poll), and through a spool
// directory beside the checkpoint file when it is the file store, which the
// running relay alone writes (Spool): the relay adopts each request into
// its store and removes it. With no relay running, the command writes the
// store itself.
//
// The running relay (package relay) runs each pending or running job as a
// pipeline of its own (package pipeline: the one retry policy, dead
// letters, at-least-once progress), with a binlog reader of its own (its
// own replica id), a sink of its own built from the target's
// configuration, a Window around the reader that applies the type filter
// and ends the run once every transaction up to Until is delivered and
// saved, and a Marked sink that adds the header Header (the job's id) to
// every event. The live stream is never stopped nor slowed: it shares
// nothing with the replay but the source server.
//
// What a replay promises: every event of the window (that the filters
// select) is sent again, at least once, in per-aggregate order (the
// pipeline's order), marked; a relay that stops or crashes resumes the
// replay from its saved progress (re-sending at most what a sink's crash
// re-sends, delivery.max_in_flight); a cancelled replay sends nothing more
// once the relay has noticed (within Runner.Poll). The counts of a job
// (Sent, Skipped) are saved every Runner.Poll and at its end: after a crash
// they may count the re-sent events twice.
//
// Store, Spool and Runner are safe for concurrent use.
package replay
