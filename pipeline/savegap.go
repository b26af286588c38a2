package pipeline

import "time"

// SteadyGapFactor bounds how far the gap between saves grows while
// acknowledgements stream in: up to this many times the pipeline's least
// gap (CheckpointGap; a read-back sink's is ReadBackGapFactor times that).
// A file checkpoint's save (a rewrite, two fsyncs and a rename) costs ~1 ms
// of CPU here: at a steady 2,000 single-row transactions a second, saves
// 10 ms apart were about a quarter of the relay's CPU to stdout; 100 ms
// apart, a tenth of that (BENCHMARKS.md, the steady rate). Growing to 1 s
// saved a little more CPU (83 against 86.5 µs per event at 2,000/s, 136
// against 162 at 500/s) but re-sent after each kill of the crash runs up to
// a second of acknowledgements (the stdout run: 940 duplicates per kill).
const SteadyGapFactor = 10

// saveGap is saveLoop's schedule: the least time from the start of one save
// to the start of the next, adapted to how acknowledgements arrive. After a
// quiet spell (nothing to save for twice the current gap) it is
// CheckpointGap, so a lone acknowledgement is saved at once; each save
// that follows the last within that doubles it, up to SteadyGapFactor
// times CheckpointGap. So a steady stream saves ten times a second whatever
// its rate (a read-back sink once a second), each save covering what was
// acknowledged since the last, and a pause brings the short gap back. What waits for a save still counts
// against MaxInFlight (unless the sink reads its destination back), and a
// source waiting for that room cuts the gap short (tracker.full): the
// bound on what a crash re-sends is MaxInFlight as before, and in time at
// most the longest gap's acknowledgements.
type saveGap struct {
	least, most time.Duration
	cur         time.Duration // the gap of the last save; 0 before the first
}

func newSaveGap(least time.Duration) saveGap {
	return saveGap{least: least, most: least * SteadyGapFactor}
}

// next returns the gap to keep before a save due now, since the time from
// the last save's start.
func (g *saveGap) next(since time.Duration) time.Duration {
	if g.cur == 0 || since >= 2*g.cur {
		g.cur = g.least // quiet: saved at once, since > least
		return g.cur
	}
	g.cur = min(2*g.cur, g.most)
	return g.cur
}
