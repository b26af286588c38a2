// Package mysqlprimary is a scripted MySQL 8.0/8.4 primary for tests: a
// server on a free 127.0.0.1 port that go-sql-driver/mysql and go-mysql's
// replication.BinlogSyncer talk to as they would to MySQL, whose binary log
// holds exactly the transactions a test commits. It is imported only from
// _test.go files.
//
// # What it emulates
//
//   - The handshake (mysql_native_password, no TLS) and the command phase,
//     through go-mysql's server package.
//   - The queries the relay, its check command, go-mysql's syncer and
//     go-sql-driver send at start, answered from one table of regular
//     expressions (builtin in query.go): SELECT of @@variables, VERSION(),
//     CURRENT_USER(), DATABASE(); SHOW [GLOBAL] VARIABLES [LIKE|WHERE];
//     SHOW BINARY LOGS; SHOW MASTER STATUS (until 8.3) and SHOW BINARY LOG
//     STATUS (from 8.2); SHOW GRANTS; SHOW REPLICAS / SLAVE HOSTS; SHOW
//     REPLICA / SLAVE STATUS (empty: not a replica); information_schema
//     COLUMNS and TABLES for the tables the server knows; SET of user
//     variables; KILL. Prepared statements are answered by interpolating
//     their arguments. A query without an answer fails with an error that
//     names it (and is listed by UnknownQueries); Server.OnQuery adds or
//     overrides answers.
//   - COM_REGISTER_SLAVE, COM_BINLOG_DUMP (file and position) and
//     COM_BINLOG_DUMP_GTID. As MySQL does, the GTID dump reads the
//     replica's GTID set whatever the flags (Options.IgnoreSet: only with
//     BINLOG_THROUGH_GTID, as Dolt), starts at the newest file whose
//     PREVIOUS_GTIDS the replica has, skips the transactions it has (sending
//     a heartbeat after each skipped run), and refuses with error 1236 when
//     gtid_purged is not in the set, when the set has GTIDs of the server's
//     own UUID that the server never executed, or when gtid_mode is not ON.
//     A second dump with the same replica server_id ends the first.
//   - The stream: a fake ROTATE (no checksum: go-mysql asks for
//     @source_binlog_checksum='NONE'), FORMAT_DESCRIPTION (MySQL 8 post-header
//     lengths, CRC32), PREVIOUS_GTIDS, then per transaction GTID_LOG_EVENT
//     (GTID_TAGGED_LOG_EVENT for tagged GTIDs, ANONYMOUS_GTID_LOG_EVENT with
//     gtid_mode OFF) with logical clocks, commit timestamps and transaction
//     length; QUERY "BEGIN"; TABLE_MAP with binlog_row_metadata=FULL
//     (signedness, charsets, column names, primary key, visibility);
//     WRITE_ROWS v2; XID. XA: XA START, rows, XA END, XA_PREPARE_LOG_EVENT,
//     later XA COMMIT / XA ROLLBACK as their own GTID and QUERY.
//     TRANSACTION_PAYLOAD_EVENT with zstd-compressed inner events. ROTATE and
//     a new file on Rotate, heartbeats when idle (HEARTBEAT_LOG_EVENT, or
//     HEARTBEAT_LOG_EVENT_V2 when the dump asks for it with flag 0x02).
//   - Column types INT, BIGINT, VARCHAR, CHAR, BINARY, VARBINARY, TEXT,
//     DATETIME(fsp) and JSON, the last in MySQL's binary JSON format
//     (EncodeJSON), NULLs.
//   - Failover: StartReplica builds a second server holding the first one's
//     history under another server_uuid, optionally lacking some GTIDs,
//     with the XA transactions still prepared;
//     Purge moves old files' GTIDs to gtid_purged; KillConnections drops
//     every stream at once.
//
// # What it does not emulate
//
// It executes no SQL: rows exist only as the test commits them, and SELECT
// from user tables, INSERT and DDL sent over the wire fail as unknown
// queries. There is no TLS, no caching_sha2_password, no semi-sync, no
// UPDATE or DELETE row events, no DECIMAL, TIMESTAMP, ENUM, SET or spatial
// columns, no partial JSON updates, no row events for tables without FULL
// metadata, no binlog encryption, no GTID_NEXT, no multi-source replication,
// and no group replication (view change events). Query event status
// variables are a fixed plausible set. BINLOG_DUMP_NON_BLOCK ends with an
// EOF packet followed by an OK packet. MySQL's errors are reproduced in code
// and text for the cases above only.
//
// # Use
//
//	s := mysqlprimary.Start(t, mysqlprimary.Options{Version: "8.4.2"})
//	g1 := s.Insert(mysqlprimary.OutboxRow(1, "e1", "order", "o1", "created", `{"total": 10}`))
//	s.Commit(mysqlprimary.Txn{Tag: "batch", Compressed: true, Rows: [][]any{
//		mysqlprimary.OutboxRow(2, "e2", "order", "o1", "paid", `{"ok": true}`),
//	}})
//	s.XAPrepare("x1", mysqlprimary.Write{Table: s.Outbox(), Rows: rows})
//	s.XACommit("x1")
//	// Point the relay (or a BinlogSyncer) at 127.0.0.1:s.Port() with
//	// s.User()/s.Password(), or database/sql at s.DSN("app").
//	s.Purge("")           // everything so far moves to gtid_purged
//	s.KillConnections()   // every stream drops
//	b := s.StartReplica(t, mysqlprimary.Options{ServerUUID: other, ServerID: 2}, "")
//	b.Insert(...)         // the promoted primary goes on with its own GTIDs
//
// # Concurrency
//
// A Server's methods may be called from any goroutine; each connection is
// served by its own goroutine, owned by the Server, and Close (run at the end
// of the test) stops them all and waits for them.
package mysqlprimary
