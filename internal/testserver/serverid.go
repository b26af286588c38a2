package testserver

import (
	"fmt"
	"os"
	"sync/atomic"
)

// serverIDBase is where the replica ids ServerID hands out begin: ids
// below it are free for the ids tests still write by hand.
const serverIDBase = 100_000_000

// perProcess is how many ids one test process may take, and stride how
// many replica ids each one covers: a relay registers server_id + i for its
// sink i and, after those, max_catch_up ids per webhook sink
// (config.ReplicaIDs), so ids handed out stride apart never overlap.
const (
	perProcess = 1000
	stride     = 32
	// blocks is how many processes get blocks of their own:
	// serverIDBase + blocks*perProcess*stride stays below 2^32.
	blocks = 1 << 17
)

var serverIDs atomic.Uint32

// ServerID returns a replica id (source.server_id, a relay's or a
// replica's) whose 32 ids from it on no other call covers, in this test
// process or in any other running at the same time (unless their process
// ids are equal modulo 131,072): the process id picks a block, a counter
// the id within it. It panics past 999 ids in one process.
func ServerID() uint32 {
	n := serverIDs.Add(1)
	if n >= perProcess {
		panic(fmt.Sprintf("testserver: more than %d server ids taken in one process", perProcess-1))
	}
	return serverIDBase + uint32(os.Getpid()%blocks)*perProcess*stride + n*stride
}
