// Package replayplan resolves a replay as asked (replay.Ask: a sink or an
// endpoint, and a time or a GTID set for each end of the window) against
// the source server into a job, pending, ready to be stored (replay.Job):
// the side of a replay that `outbox-relay replay` and the console's resend
// and recover since run before the relay's runner takes the job up. A time
// is found in the binlog (package replay/binlog); a window whose start the
// binlog no longer holds falls back to the outbox table's retained rows
// when the build has that source, saying what the table no longer holds
// either (backfill.Pruned). DryRun reads a job's window from the binlog
// and counts what it would send.
//
// What the job's target is, and whether the table source is in the build,
// are the relay's (Params: its Targets, relay.Relay, and TableSource); the
// planner imports no assembly. Plan checks everything before it returns
// and each error says what to give instead. A Planner is used by one
// goroutine at a time; planners over the same connection may run at once.
package replayplan
