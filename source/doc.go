// Package source connects to the configured source servers and asks them
// about themselves over SQL: the connection the relay, `check`, `status`,
// prune and audit use to inspect a server. It holds
//
//   - Open, OpenWhere, OpenAddr and Set (source.servers, with Pick choosing
//     the server that can serve a position, for failover);
//   - server facts: ReadInfo and Inspect (flavor, version, identity, GTID
//     mode), CurrentPosition, EarliestPosition, BinaryLogs, ReadServerState
//     and CheckResume (the resume rule of package position applied to what
//     the server says, with ReadHistory: a MariaDB checkpoint's own binlog
//     coordinates checked on the server they belong to; CheckResumeAt and
//     ReadCommit add its commit time, read through a CommitFinder the
//     caller gives: canal's), ReplicaOf and ListReplicas, CheckTables (the outbox
//     tables have the mapped columns).
//
// The binlog stream itself is canal's, and comparing positions is package
// position's; source imports neither canal nor any sink. It sits below the
// wiring (relay) and the diagnostics (check, prune, audit), so none of them
// depends on another for it.
//
// Functions are safe for concurrent use; they only read (no statement here
// changes the server). A Set is safe for concurrent use by every sink's
// reader.
package source
