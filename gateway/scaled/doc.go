// Package scaled runs `outbox-relay gateway`: one replica of a webhook
// sink's gateway scaled out past one machine, whose source is the topics a
// Kafka sink of the same configuration writes, shared by the replicas as a
// consumer group (package gateway/kafkasource; docs/gateway-scale-out.md).
//
// Run assembles one replica from a relay's configuration and parts (an
// Assembly, which package relay's Relay is, and the Parts it starts: its
// metrics and listener, webhook health, retry policy and dead letters);
// the package imports no assembly, and links no binlog reader: the
// endpoints of the configuration run on every partition
// the replica is assigned; those of the endpoints table are read when a
// partition is assigned and every Config.PollEvery (a change applies on
// each partition at the first record it reads after the poll); the
// endpoints' cursors are kept per partition in MySQL (Config.CursorTable).
// Run returns when its context ends, or on an error before the group runs.
//
// Replays of one endpoint ("recover since", replay.SourceKafka): PlanReplay
// resolves a window to every partition's offsets (ListOffsets by
// timestamp) and the command stores the job in the cursor table
// (OpenJobs); of the replicas, the one holding the cursor store's lock
// runs every job as a fenced pipeline of its own (see replay.go).
package scaled
