package gcfloor

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestPercentMakesTheNextCollectionStartAtTheFloor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 1000},
		{2 * mib, 1000},  // 32/2 − 1 = 15×: capped
		{4 * mib, 700},   // next collection at 4 + 28 = 32 MiB
		{8 * mib, 300},   // at 32 MiB
		{16 * mib, 100},  // the usual doubling reaches the floor
		{500 * mib, 100}, // a big heap grows as it would have
	} {
		if got := Percent(c.live, 32*mib); got != c.want {
			t.Errorf("Percent(%d MiB) = %d, want %d", c.live/mib, got, c.want)
		}
	}
}

// After a collection, GOGC is what the live heap calls for; with GOGC set
// in the environment Start leaves it alone.
func TestStartTunesAfterEachCollection(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	if !Start(1 << 30) { // 1 GiB: far above this test's heap
		t.Fatal("Start did nothing with GOGC and GOMEMLIMIT unset")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		runtime.GC() // the cleanup of the first runs after it; the second sees the set
		if p := debug.SetGCPercent(-1); p > 100 {
			debug.SetGCPercent(p)
			break
		} else {
			debug.SetGCPercent(p)
		}
		if time.Now().After(deadline) {
			t.Fatal("GOGC was not raised after collections of a small heap")
		}
		time.Sleep(10 * time.Millisecond)
	}

	t.Setenv("GOGC", "50")
	if Start(0) {
		t.Error("Start tuned GOGC although it was set in the environment")
	}
}
