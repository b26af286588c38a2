// Package gcfloor keeps the garbage collector from running on a heap that
// is small for the work: it lets the heap grow to at least a floor (32 MiB
// by default) before a collection, the way GOGC would if it were set for
// the heap the process happens to have.
//
// The relay's live heap is small (about 10 MiB with one sink) while it
// allocates fast (a request, its headers and a decoded row per event): with
// the default GOGC=100 the collector then runs dozens of times a second,
// and each cycle has costs that do not shrink with the heap. Measured with
// the bench tool, one webhook endpoint, on the shared 2-core machine
// (BENCHMARKS.md): 70.9 µs of CPU per delivery with GOGC=100, 60.9 µs
// with GOGC=200, 62–64 µs with this floor at 32 MiB (peak RSS 67 MB instead
// of 44; 108 MB with a 64 MiB floor, for no measurable gain).
//
// Start raises GOGC, after every collection, to what makes the next one
// start at the floor while the live heap is under half of it, and leaves
// it at the usual 100 when the heap is larger: a big heap (a gateway of
// thousands of endpoints) grows by no more than it would have, and a small
// one to the floor at most. GOGC or GOMEMLIMIT set in the environment are
// the operator's choice: Start then does nothing.
package gcfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// DefaultFloor is the heap the collector may let grow before it runs.
const DefaultFloor = 32 << 20

// Start keeps the heap target at floor or above (floor <= 0: DefaultFloor)
// for as long as the process runs, unless GOGC or GOMEMLIMIT is set in the
// environment. It reports whether it did.
func Start(floor uint64) bool {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return false
	}
	if floor == 0 {
		floor = DefaultFloor
	}
	t := &tuner{floor: floor, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}, percent: 100}
	t.arm()
	return true
}

type tuner struct {
	floor   uint64
	sample  []metrics.Sample
	percent int
}

// arm runs tune after the next collection: a cleanup runs once the object
// it is attached to is found unreachable, which a collection does.
func (t *tuner) arm() {
	runtime.AddCleanup(new([16]byte), func(t *tuner) { t.tune(); t.arm() }, t)
}

// tune sets GOGC so that the next collection starts when the heap reaches
// max(floor, 2×live).
func (t *tuner) tune() {
	metrics.Read(t.sample)
	if t.sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	p := Percent(t.sample[0].Value.Uint64(), t.floor)
	// Only a change of more than a tenth: each set recomputes the pacer.
	if d := p - t.percent; d > t.percent/10 || -d > t.percent/10 {
		t.percent = p
		debug.SetGCPercent(p)
	}
}

// Percent is the GOGC that makes a collection start at floor for a live
// heap of live bytes: (floor/live − 1)×100, never under 100 and at most
// 1000 (a near-empty heap).
func Percent(live, floor uint64) int {
	if live == 0 {
		return 1000
	}
	p := (float64(floor)/float64(live) - 1) * 100
	return int(min(max(p, 100), 1000))
}
