// Package replay sends a window of the past again to one sink, or to one
// endpoint of a webhook sink, beside the live stream: "our consumer had a
// bug since 10:00; send it everything since 10:00 again".
//
// A replay is a Job: a target (a sink, or a sink and an endpoint), a window
// (From, resolved to a binlog position when the job is made, to Until),
// filters (event types) and a source kind ("binlog" here; "table", the
// outbox table's retained rows, is another package's and plugs in through
// relay.ReplaySources; "kafka", the topics the scaled-out gateway reads, is run
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
// A Runner runs the jobs of a Store (package relay's for the relay's store,
// package gateway/scaled's for the scaled-out gateway's cursor table): it
// lists them every Runner.Poll, starts the pending or running ones while
// one of its slots is free (in turn across the tenants who asked: Job.Tenant),
// stops those asked to be cancelled, follows their target (an endpoint's
// row read again every Runner.Poll: a change restarts the run with it, an
// endpoint disabled or deleted stops the job), saves their counts, and
// decides how each run ended (done, cancelled, failed, stopped, or left
// running to resume). It runs each job as a pipeline of its own (package
// pipeline: the one retry policy, dead letters, at-least-once progress),
// with a sink of its own built from the target's configuration, a Window
// around the job's source that applies the type filter and ends the run
// once every transaction up to Until is delivered and saved, and a Marked
// sink that adds the header Header (the job's id) to every event. What the
// source is, and how the pipeline is configured, is its user's
// (Runner.Open, Runner.NewPipeline): the relay gives each job a binlog
// reader of its own (its own replica id, the run's slot) or a table
// source; the gateway, a reader of the Kafka topics. The live stream is
// never stopped nor slowed: it shares nothing with the replay but the
// source server (or the topics).
//
// What a replay promises: every event of the window (that the filters
// select) is sent again, at least once, in per-aggregate order (the
// pipeline's order), marked; a relay that stops or crashes resumes the
// replay from its saved progress (re-sending at most what a sink's crash
// re-sends, delivery.max_in_flight); a cancelled replay sends nothing more
// once the relay has noticed (within Runner.Poll). The counts of a job
// (Sent, Skipped) are saved every Runner.Poll and at its end, apart from its
// progress: after a crash they may count the re-sent events twice, and miss
// those acknowledged since the counts' last save that the progress holds.
//
// The package reads no binlog itself (what a job reads is its user's,
// through Runner.Open), so the scaled-out gateway links no binlog reader
// with it: a window is found in the binlog by package replay/binlog, and an
// asked replay (Ask) is made a job by package relay/replayplan, or for the
// Kafka topics by gateway/scaled.PlanReplay.
//
// Store and Spool are safe for concurrent use; a Runner's Run is called by
// one goroutine at a time (again once it has returned).
package replay
