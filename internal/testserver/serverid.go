package testserver

import (
	"fmt"
	"os"
	"sync/atomic"
)

// serverIDBase is where the replica ids ServerID hands out begin: ids
// below it are free for the ids tests still write by hand.
const serverIDBase = 100_000_000

// perProcess is how many ids one test process may take.
const perProcess = 1000

var serverIDs atomic.Uint32

// ServerID returns a replica id (source.server_id, a relay's or a
// replica's) that no other call returns, in this test process or in any
// other running at the same time: the process id picks a block of 1000
// (Linux process ids are below 2^22, so the blocks fit in 32 bits above
// 100,000,000), a counter the id within it. It panics past 999 ids in one
// process.
func ServerID() uint32 {
	n := serverIDs.Add(1)
	if n >= perProcess {
		panic(fmt.Sprintf("testserver: more than %d server ids taken in one process", perProcess-1))
	}
	return serverIDBase + uint32(os.Getpid()%(1<<22))*perProcess + n
}
