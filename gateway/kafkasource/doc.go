// Package kafkasource runs the webhook gateway (package gateway) past one
// machine: its source is the Kafka topics the relay's Kafka sink writes, and
// its replicas share the work as one Kafka consumer group (kafka-go's
// ConsumerGroup): the group protocol spreads the partitions over the
// replicas and hands them over on scale-out, scale-in and crashes.
//
// Each partition a replica is assigned runs one gateway.Gateway — the same
// engine as the in-relay gateway: one shared stream of the partition, an
// idle endpoint as an entry in its index (no goroutine) woken into a
// pipeline by its events, bounded queue, detach and catch-up (on a stream
// of its own, from its cursor), auto-disable, dead letters and
// signatures. Only the source differs: a partition's records in offset
// order, each one transaction, at the position Position(topic, partition,
// offset+1), ordered by Covers.
//
// It promises:
//
//   - cursors survive a rebalance: cursors are per partition, in the
//     shared checkpoint store, and by exception when the partition's
//     gateway has a shared cursor (Setup.Gateway.SharedKey, as package
//     gateway/scaled sets it: "/gateway/<sink>@<topic>[<partition>]"): an
//     endpoint has a cursor of its own, under "<endpoint
//     key>@<topic>[<partition>]", only while it is behind that shared
//     cursor (package gateway). The replica that takes a partition over
//     resumes every endpoint where its acknowledged deliveries were saved
//     (its own cursor, else the shared one): nothing is skipped; what was
//     in flight on the old owner is sent again; an endpoint that was idle
//     gets nothing twice;
//   - the group's committed offset of a partition never passes a saved
//     cursor of an endpoint running on it: it is the least of the
//     partition's shared cursor and those endpoints' own cursors (without
//     a shared cursor, every running endpoint's), read back from the store
//     (so only saved ones count) in one pass over what the store holds,
//     not over every endpoint; it is where a partition without a shared
//     cursor starts;
//   - per-aggregate order: one aggregate is one message key, so one
//     partition, read in order by one replica at a time; a handover re-sends
//     the in-flight window from the cursor, in order;
//   - an endpoint that does not run keeps its own cursor (package gateway),
//     so the committed offset passing it skips nothing; only the topic's
//     retention can, and then loudly: a stream that starts before the
//     partition's first offset logs an error and counts the records gone
//     (Source.Expired, Observer.Expired).
//
// Concurrency: Group.Run owns every goroutine it starts (one per assigned
// partition for the generation, plus its gateway's) and returns once they
// have ended. A Source is used by one goroutine at a time.
//
// Window reads a replay window (every partition from one Offsets up to
// another, one partition after the other) for package gateway/scaled's
// replays; OffsetsAt finds the offsets of a time.
//
// A sink's section whose destination is Kafka topics is Readable (the
// Kafka kind's is): this package owns that interface, in kafka-go's and
// event's types, so that it names no sink kind and no kind imports it
// (docs/architecture.md); ConsumeFor finds it by type assertion.
//
// NewMetrics registers a replica's per-partition figures (MetricNames) on a
// relay's metrics and is the Observer that records them.
package kafkasource
