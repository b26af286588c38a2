package testserver

import (
	"os"
	"testing"
)

// ServerID hands out ids inside this process's block, which starts above
// the ids tests write by hand, each stride ids from the others, so that a
// relay's ids from one (server_id + i per stream) never reach another's.
func TestServerIDIsUniqueAndInTheProcesssBlock(t *testing.T) {
	lo := uint64(serverIDBase) + uint64(os.Getpid()%blocks)*perProcess*stride
	hi := lo + perProcess*stride
	if hi > 1<<32 {
		t.Fatalf("the last block ends at %d, past 2^32", hi)
	}
	var last uint32
	for range 100 {
		id := ServerID()
		if uint64(id) <= lo || uint64(id) >= hi {
			t.Fatalf("id %d is outside (%d, %d)", id, lo, hi)
		}
		if last != 0 && id-last < stride {
			t.Fatalf("id %d is %d from the one before: a relay taking %d ids from it would overlap", id, id-last, stride)
		}
		last = id
	}
	if top := uint64(serverIDBase) + uint64(blocks)*perProcess*stride; top > 1<<32 {
		t.Fatalf("blocks reach %d, past 2^32", top)
	}
}
