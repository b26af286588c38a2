// Package binlog finds a replay's window in the source server's binary log:
// Locator turns a time into the binlog position just before the first
// transaction committed at or after it, from the binlog's own timestamps
// (package canal's ScanFile), reading a handful of files, not all of them.
// A time the server no longer holds is replay.ErrPurged, whose message says
// to replay from the outbox table instead.
//
// It is the part of a replay that reads the binlog to plan it; package
// replay (the jobs, their store and the runner) reads no binlog itself, so
// that the scaled-out gateway (package gateway/scaled), which runs replays
// from Kafka, links no binlog reader. A Locator is used by one goroutine at
// a time (Scanned is not synchronised).
package binlog
