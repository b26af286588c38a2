package pipeline

import (
	"testing"
	"time"
)

// The gap between saves grows while acknowledgements stream in, up to
// SteadyGapFactor × CheckpointGap, and a quiet spell brings the short one
// back: a lone acknowledgement is saved at once.
func TestTheGapBetweenSavesGrowsWhileAcknowledgementsStreamIn(t *testing.T) {
	const ms = time.Millisecond
	g := newSaveGap(10 * ms)
	steps := []struct {
		name  string
		since time.Duration // from the last save's start to the next save's being due
		gap   time.Duration // the gap kept before that save
		now   bool          // the save starts at once
	}{
		{"the first save is at once", time.Hour, 10 * ms, true},
		{"an acknowledgement soon after waits a doubled gap", ms / 2, 20 * ms, false},
		{"another doubles it again", ms / 2, 40 * ms, false},
		{"and again", ms / 2, 80 * ms, false},
		{"up to ten times the least", ms / 2, 100 * ms, false},
		{"where it stays while the stream goes on", ms / 2, 100 * ms, false},
		{"a save due after the gap but within twice it is at once, the gap kept", 150 * ms, 100 * ms, true},
		{"a quiet spell of twice the gap brings the least back, saved at once", 200 * ms, 10 * ms, true},
		{"a lone acknowledgement after a pause is saved at once", 30 * ms, 10 * ms, true},
		{"a new stream grows it again", ms, 20 * ms, false},
	}
	for _, s := range steps {
		gap := g.next(s.since)
		if gap != s.gap || (s.since >= gap) != s.now {
			t.Fatalf("%s: gap %s (at once: %v), want %s (at once: %v)", s.name, gap, s.since >= gap, s.gap, s.now)
		}
	}
}

// A sink read back on a restart saves ReadBackGapFactor times as far apart,
// and its gap grows as far again.
func TestAReadBackSinksGapGrowsFromItsOwnLeast(t *testing.T) {
	p, err := New(Config{Name: "s", Sink: &recoveringSink{}, Store: &memStore{}, CheckpointGap: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if p.gap.least != 100*time.Millisecond || p.gap.most != time.Second {
		t.Errorf("gap from %s up to %s, want 100ms up to 1s", p.gap.least, p.gap.most)
	}
}
