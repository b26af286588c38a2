// Package scaled runs `outbox-relay gateway`: one replica of a webhook
// sink's gateway scaled out past one machine, whose source is the topics a
// Kafka sink of the same configuration writes, shared by the replicas as a
// consumer group (package gateway/kafkasource; docs/gateway-scale-out.md).
//
// Run runs one replica on finished values: the relay's configuration and
// the Parts the assembly started for it before (package relay's
// Relay.RunGateway: its metrics and listener, webhook health, retry
// policy, the webhook sink's endpoint parameters, open dead letters and
// attempts record, and its replay Targets), which the assembly stops after
// Run returned. Nothing here calls back into the assembly to build or
// start a part; only a replay job's sink, which exists once the job does,
// is built by the assembly then (Targets). The package imports no
// assembly, and links no binlog reader. The endpoints of the configuration run on every partition
// the replica is assigned; those of the endpoints table are read when a
// partition is assigned and every Config.PollEvery (a change applies on
// each partition at the first record it reads after the poll); the
// endpoints' cursors are kept per partition in MySQL (Config.CursorTable),
// by exception (package gateway, Config.SharedKey): one shared cursor per
// partition, gateway.SharedKey(<webhook sink> + the partition's suffix),
// and an endpoint's own only while it is behind it, written with the
// pipelines' saves and the deletes of the cursors it passes in one
// transaction (a checkpoint.GroupCommit over the MySQL store, the
// gateways' Config.Writer). An idle endpoint holds no goroutine; once a
// wave of woken endpoints has gone idle, their memory is given back
// (Config.Settled).
//
// It promises what package gateway promises of cursors by exception, per
// partition: across a SIGKILL at any moment nothing is lost; an idle
// endpoint sends nothing twice and an awake one at most its in-flight
// bound per partition; a save writes the cursors that moved, never one per
// endpoint; a cursor table of an earlier version (a cursor per endpoint
// per partition) restarts without loss, its cursors deleted as the shared
// ones pass them; the group's committed offset is the partition's oldest
// cursor (package gateway/kafkasource).
// Run returns when its context ends, or on an error before the group runs.
//
// Replays of one endpoint ("recover since", replay.SourceKafka): PlanReplay
// resolves a window to every partition's offsets (ListOffsets by
// timestamp) and the command stores the job in the cursor table
// (OpenJobs); of the replicas, the one holding the cursor store's lock
// runs every job as a fenced pipeline of its own (see replay.go).
package scaled
