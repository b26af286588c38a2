package testserver

import (
	"os"
	"testing"
)

// ServerID hands out distinct ids inside this process's block, which
// starts above the ids tests write by hand.
func TestServerIDIsUniqueAndInTheProcesssBlock(t *testing.T) {
	lo := uint32(serverIDBase + os.Getpid()%(1<<22)*perProcess)
	seen := map[uint32]bool{}
	for range 100 {
		id := ServerID()
		if seen[id] || id <= lo || id >= lo+perProcess {
			t.Fatalf("id %d: seen before %v, or outside (%d, %d)", id, seen[id], lo, lo+perProcess)
		}
		seen[id] = true
	}
}
