package pipeline

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

func pos(i int) event.Position { return event.Position{File: "binlog.000001", Pos: uint32(100 + i)} }

func TestTrackerNeverPassesAGap(t *testing.T) {
	tests := []struct {
		name     string
		events   []int // events per transaction
		ackOrder [][2]int
		want     []int // watermark txn index after each ack (-1: start)
	}{
		{
			name:     "in-order acks advance one transaction at a time",
			events:   []int{1, 1, 1},
			ackOrder: [][2]int{{0, 0}, {1, 0}, {2, 0}},
			want:     []int{0, 1, 2},
		},
		{
			name:     "a later ack does not move the watermark past an earlier unacked event",
			events:   []int{1, 1, 1},
			ackOrder: [][2]int{{2, 0}, {1, 0}, {0, 0}},
			want:     []int{-1, -1, 2},
		},
		{
			name:     "a transaction counts only when all its events are acked",
			events:   []int{3, 1},
			ackOrder: [][2]int{{0, 0}, {1, 0}, {0, 2}, {0, 1}},
			want:     []int{-1, -1, -1, 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := event.Position{File: "binlog.000001", Pos: 4}
			tr := newTracker(start, 1000, 1<<20)
			entries := make([]*txnEntry, len(tc.events))
			for i, n := range tc.events {
				entries[i] = tr.add(pos(i), time.Time{}, n, n)
			}
			for k, a := range tc.ackOrder {
				tr.ack(entries[a[0]], 1)
				got, _ := tr.takeWatermark()
				want := start
				if tc.want[k] >= 0 {
					want = pos(tc.want[k])
				}
				if got != want {
					t.Fatalf("after ack %d (%v): watermark %v, want %v", k, a, got, want)
				}
			}
		})
	}
}

func TestTrackerEmptyTransactionsAdvanceWhenAtTheHead(t *testing.T) {
	tr := newTracker(pos(-1), 10, 100)
	e0 := tr.add(pos(0), time.Time{}, 1, 1)
	tr.add(pos(1), time.Time{}, 0, 0) // a transaction with no outbox events
	if got, _ := tr.takeWatermark(); got != pos(-1) {
		t.Fatalf("empty txn behind an unacked one moved the watermark to %v", got)
	}
	tr.ack(e0, 1)
	if got, moved := tr.takeWatermark(); got != pos(1) || !moved {
		t.Fatalf("watermark %v moved=%v, want %v", got, moved, pos(1))
	}
	tr.add(pos(2), time.Time{}, 0, 0)
	if got, _ := tr.takeWatermark(); got != pos(2) {
		t.Fatalf("empty txn at the head: watermark %v, want %v", got, pos(2))
	}
}

// A random interleaving of acks: the watermark is always the last
// transaction of the longest fully-acked prefix.
func TestTrackerRandomAckOrder(t *testing.T) {
	for seed := range uint64(50) {
		r := rand.New(rand.NewPCG(seed, 7))
		tr := newTracker(pos(-1), 1<<30, 1<<30)
		type ev struct{ txn int }
		var all []ev
		var entries []*txnEntry
		var sizes []int
		for i := range 40 {
			n := r.IntN(4)
			entries = append(entries, tr.add(pos(i), time.Time{}, n, n))
			sizes = append(sizes, n)
			for range n {
				all = append(all, ev{i})
			}
		}
		acked := make([]int, 40)
		r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		for _, e := range all {
			tr.ack(entries[e.txn], 1)
			acked[e.txn]++
			want := -1
			for i := range 40 {
				if acked[i] != sizes[i] {
					break
				}
				want = i
			}
			got, _ := tr.takeWatermark()
			if got != pos(want) {
				t.Fatalf("seed %d: watermark %v, want %v", seed, got, pos(want))
			}
		}
	}
}

func TestTrackerBlocksWhenFullAndLetsAnOversizeTxnInAlone(t *testing.T) {
	tr := newTracker(pos(-1), 2, 1<<20)
	e0 := tr.add(pos(0), time.Time{}, 2, 2)
	added := make(chan *txnEntry)
	go func() { added <- tr.add(pos(1), time.Time{}, 5, 5) }() // larger than the limit
	select {
	case <-added:
		t.Fatal("add did not wait while the tracker was full")
	case <-time.After(50 * time.Millisecond):
	}
	tr.ack(e0, 1)
	tr.ack(e0, 1)
	tr.take() // and saved: acknowledged events take room until then
	tr.saved()
	select {
	case e := <-added:
		if e == nil {
			t.Fatal("oversize transaction was refused")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("oversize transaction never admitted while nothing was in flight")
	}
}

// The tracker's size depends on the unacknowledged events, not on the
// transactions that went by: one event stuck at the head while a million
// transactions pass (most with no outbox row, some whose events are
// acknowledged at once) leaves a constant handful of entries, and the
// watermark still stops before the stuck event and jumps to the newest
// position once it is acknowledged.
func TestTrackerSizeDependsOnUnackedEventsNotOnTraffic(t *testing.T) {
	tests := []struct {
		name string
		// ackedEvery: every ackedEvery-th transaction has one event,
		// acknowledged at once; the others have none. 0: none has events.
		ackedEvery int
	}{
		{name: "a million transactions without outbox rows behind one stuck event", ackedEvery: 0},
		{name: "a million transactions, every tenth with an event acknowledged at once", ackedEvery: 10},
		{name: "a million transactions, each with an event acknowledged at once", ackedEvery: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const n = 1_000_000
			tr := newTracker(pos(-1), 10, 1<<20)
			// Read back on a restart: the acknowledged events behind the
			// stuck one take no room (with a sink that cannot be read
			// back, the 10th of them waits for the stuck one).
			tr.readBack = true
			stuck := tr.add(pos(0), time.Time{}, 1, 1)
			most := 0
			for i := 1; i <= n; i++ {
				if tc.ackedEvery > 0 && i%tc.ackedEvery == 0 {
					e := tr.add(posN(i), time.Time{}, 1, 1)
					tr.ack(e, 1)
					tr.take() // saved at once
					tr.saved()
				} else {
					tr.add(posN(i), time.Time{}, 0, 0)
				}
				most = max(most, tr.size())
			}
			if most > 3 {
				t.Fatalf("tracker held up to %d entries for 1 unacknowledged event, want at most 3", most)
			}
			if got, _ := tr.takeWatermark(); got != pos(-1) {
				t.Fatalf("watermark %v passed the stuck event", got)
			}
			tr.ack(stuck, 1)
			if got, _ := tr.takeWatermark(); got != posN(n) {
				t.Fatalf("after the stuck event's ack: watermark %v, want the newest %v", got, posN(n))
			}
			if got := tr.size(); got != 0 {
				t.Fatalf("tracker holds %d entries with nothing in flight", got)
			}
		})
	}
}

// With several stuck events interleaved with settled traffic, the entries
// stay at most 2 per unacknowledged transaction plus one.
func TestTrackerKeepsOnlyTheNewestSettledPositionBetweenUnsettledOnes(t *testing.T) {
	tr := newTracker(pos(-1), 1<<20, 1<<30)
	var stuck []*txnEntry
	for i := range 10_000 {
		switch {
		case i%1000 == 0:
			stuck = append(stuck, tr.add(posN(i), time.Time{}, 1, 1))
		case i%3 == 0:
			e := tr.add(posN(i), time.Time{}, 2, 2)
			tr.ack(e, 1)
			tr.ack(e, 1)
		default:
			tr.add(posN(i), time.Time{}, 0, 0)
		}
		if got, most := tr.size(), 2*len(stuck)+1; got > most {
			t.Fatalf("after %d transactions: %d entries for %d unsettled, want at most %d", i+1, got, len(stuck), most)
		}
	}
	// Settle the stuck ones from the newest: the watermark waits for the first.
	for k := len(stuck) - 1; k >= 1; k-- {
		tr.ack(stuck[k], 1)
		if got, _ := tr.takeWatermark(); got != pos(-1) {
			t.Fatalf("watermark %v moved while the first event is unacknowledged", got)
		}
	}
	tr.ack(stuck[0], 1)
	if got, _ := tr.takeWatermark(); got != posN(9999) {
		t.Fatalf("watermark %v, want %v", got, posN(9999))
	}
}

func posN(i int) event.Position {
	return event.Position{GTIDSet: fmt.Sprintf("0-1-%d", i), File: "binlog.000001", Pos: uint32(100 + i)}
}

// The watermark's commit time is its own transaction's, never a later one's:
// prune trusts it as "everything committed before this was acknowledged".
func TestTrackerCommitTimeIsTheWatermarkTransactions(t *testing.T) {
	at := func(i int) time.Time { return time.Unix(int64(1000+i), 0) }
	tr := newTracker(pos(-1), 100, 1000)
	e0 := tr.add(pos(0), at(0), 1, 1)
	tr.add(pos(1), at(1), 0, 0)
	e2 := tr.add(pos(2), at(2), 1, 1)
	tr.add(pos(3), at(3), 0, 0)
	tr.add(pos(4), at(4), 0, 0) // collapsed into pos(3)'s entry
	if _, c, _ := tr.takeWatermarkCommit(); !c.IsZero() {
		t.Fatalf("nothing acknowledged yet, commit time %v", c)
	}
	tr.ack(e2, 1)
	if p, c, _ := tr.takeWatermarkCommit(); p != pos(-1) || !c.IsZero() {
		t.Fatalf("a later ack moved the watermark to %v (commit %v)", p, c)
	}
	tr.ack(e0, 1)
	if p, c, _ := tr.takeWatermarkCommit(); p != pos(4) || !c.Equal(at(4)) {
		t.Fatalf("watermark %v commit %v, want %v and %v", p, c, pos(4), at(4))
	}
}

// The watermark's commit time is the one of the transaction that ends at
// it: transactions handed on at a held position (event.Txn.Held: no commit
// time of their own for it) leave the held transaction's, whether they
// collapse into its entry or follow an unsettled one; a position reached
// without a commit time has none (zero), not an earlier position's. The
// resume check compares it with the binlog's (source.CheckResumeAt).
func TestTrackerCommitTimeFollowsThePosition(t *testing.T) {
	at := func(i int) time.Time { return time.Unix(int64(1000+i), 0) }
	tr := newTracker(pos(-1), 100, 1000)
	e := tr.add(pos(0), at(0), 1, 1)
	tr.add(pos(1), at(1), 0, 0)
	tr.add(pos(1), time.Time{}, 0, 0) // held: collapsed into pos(1)'s entry
	tr.ack(e, 1)
	if p, c, _ := tr.takeWatermarkCommit(); p != pos(1) || !c.Equal(at(1)) {
		t.Fatalf("watermark %v commit %v, want %v and %v", p, c, pos(1), at(1))
	}
	e = tr.add(pos(1), time.Time{}, 1, 1) // held, with an event
	tr.ack(e, 1)
	if p, c, _ := tr.takeWatermarkCommit(); p != pos(1) || !c.Equal(at(1)) {
		t.Fatalf("after a held transaction: watermark %v commit %v, want %v and %v", p, c, pos(1), at(1))
	}
	e = tr.add(pos(2), time.Time{}, 1, 1) // a position without a commit time
	tr.ack(e, 1)
	if p, c, _ := tr.takeWatermarkCommit(); p != pos(2) || !c.IsZero() {
		t.Fatalf("watermark %v commit %v, want %v and none", p, c, pos(2))
	}
}
