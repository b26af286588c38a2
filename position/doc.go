// Package position is the arithmetic of binlog positions that the binlog
// reader (canal), the gateway, the sinks' read-back, prune, check and audit
// share without importing the reader or talking to a server: GTID sets
// (MySQL) and GTID positions (MariaDB) parsed and compared, containment
// (Covers, Set.Contains), the transactions one set has that another lacks
// (GTIDMinus), and the resume rule (Gaps: what a server would have to send
// for a position and no longer has, or never executed), with the errors it
// yields (ErrLost, ErrNotInHistory).
//
// It reads no server: the facts it compares (gtid_executed, gtid_purged,
// gtid_binlog_pos, the binlog list, …) are read by package source. It
// imports only package event of ours.
//
// Its functions are pure and safe for concurrent use; a Set is not changed
// after Parse and may be shared.
package position
