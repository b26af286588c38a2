package pipeline

import (
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/sink"
)

// The gap between saves grows while acknowledgements stream in, up to
// SteadyGapFactor times the least, and a quiet spell brings the short one
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
		{"up to ten times the least, a save due 50 ms after the last", 50 * ms, 100 * ms, false},
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

// The gap grows from the pipeline's own least (a read-back sink's
// ReadBackGapFactor times CheckpointGap) up to SteadyGapFactor times it.
func TestTheGapGrowsTenfoldFromThePipelinesLeast(t *testing.T) {
	for _, tc := range []struct {
		name        string
		sink        sink.Sink
		gap         time.Duration
		least, most time.Duration
	}{
		{"a sink that cannot be read back", &scriptSink{}, 10 * time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond},
		{"a read-back sink", &recoveringSink{}, 10 * time.Millisecond, 100 * time.Millisecond, time.Second},
		{"a least of a second", &scriptSink{}, time.Second, time.Second, 10 * time.Second},
	} {
		p, err := New(Config{Name: "s", Sink: tc.sink, Store: &memStore{}, CheckpointGap: tc.gap})
		if err != nil {
			t.Fatal(err)
		}
		if p.gap.least != tc.least || p.gap.most != tc.most {
			t.Errorf("%s: gap from %s up to %s, want %s up to %s", tc.name, p.gap.least, p.gap.most, tc.least, tc.most)
		}
	}
}
