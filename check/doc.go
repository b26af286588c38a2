// Package check inspects the source server, the relay's user, the outbox
// tables and the stored checkpoints, and says for each thing the relay relies
// on whether it is right (PASS), risky (WARN) or wrong (FAIL), with the
// statement or setting that fixes it.
//
// Run only reads: it never changes a server setting, creates a table or writes
// a checkpoint. `outbox-relay check` prints its Report; `outbox-relay run`
// runs it at startup and refuses to start on a FAIL.
//
// Every check has a stable name (see Names) that --allow-fail and scripts
// refer to. The decision of each check is a pure function of the values it
// read, so the checks that need a MySQL server are unit-tested on values.
//
// Run is safe to call from several goroutines; it keeps no state between calls.
package check
