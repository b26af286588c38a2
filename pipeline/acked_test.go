package pipeline

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/position"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/sink"
)

// gtxns is n transactions of one event each, with GTIDs 0-1-1… (event eK in
// the transaction of GTID 0-1-(K+1)), at positions 10, 11, ….
func gtxns(n int) []*event.Txn {
	out := txns(n, 1)
	for i, t := range out {
		g := fmt.Sprintf("0-1-%d", i+1)
		t.Position.GTIDSet = g
		t.Events[0].Source = event.Source{GTID: g}
	}
	return out
}

// ackedIDs is the sorted ids of a snapshot's or checkpoint's list.
func ackedIDs(m map[string][]string) []string {
	var out []string
	for _, ids := range m {
		out = append(out, ids...)
	}
	slices.Sort(out)
	return out
}

func TestTrackerListsWhatWasAcknowledgedBeyondTheWatermark(t *testing.T) {
	tr := newTracker(pos(-1), 1000, 1<<20)
	var items [][]*item
	for i := range 4 {
		e := tr.addKey(pos(i), time.Time{}, 2, 2, fmt.Sprintf("g%d", i))
		items = append(items, []*item{
			{ev: &event.Event{ID: fmt.Sprintf("t%da", i)}, txn: e, size: 1},
			{ev: &event.Event{ID: fmt.Sprintf("t%db", i)}, txn: e, size: 1},
		})
	}
	// Transactions 1 and 2 settle (and collapse into one entry), half of 3
	// is acknowledged; 0 is not: the watermark stays at the start.
	tr.release(items[1])
	tr.release(items[2])
	tr.release(items[3][:1])
	s := tr.take()
	if s.pos != pos(-1) {
		t.Fatalf("watermark %v passed the unacknowledged transaction 0", s.pos)
	}
	if got, want := ackedIDs(s.acked), []string{"t1a", "t1b", "t2a", "t2b", "t3a"}; !slices.Equal(got, want) {
		t.Fatalf("listed %v, want %v", got, want)
	}
	if !slices.Equal(s.acked["g1"], []string{"t1a", "t1b"}) {
		t.Fatalf("listed by transaction %v", s.acked)
	}
	if s.readThrough != "g3" || !s.moved {
		t.Fatalf("read through %q, moved %v; want g3, true", s.readThrough, s.moved)
	}
	// Transaction 0 settles: the watermark passes 0–2 and forgets what it
	// listed of them; 3 keeps its acknowledged half.
	tr.release(items[0])
	s = tr.take()
	if s.pos != pos(2) || !slices.Equal(ackedIDs(s.acked), []string{"t3a"}) {
		t.Fatalf("watermark %v, listed %v; want %v and [t3a]", s.pos, s.acked, pos(2))
	}
	tr.release(items[3][1:])
	s = tr.take()
	if s.pos != pos(3) || len(s.acked) != 0 || s.readThrough != "" || tr.acked != 0 {
		t.Fatalf("all acknowledged: watermark %v, listed %v (%d), read through %q", s.pos, s.acked, tr.acked, s.readThrough)
	}
}

// The list is bounded by the in-flight limit: beyond it an acknowledgement
// is not listed (its event is sent again after a crash, so it takes room),
// and nothing unacknowledged ever is.
func TestTrackerListsAtMostTheInFlightLimit(t *testing.T) {
	tr := newTracker(pos(-1), 3, 1<<20)
	stuck := tr.addKey(pos(0), time.Time{}, 1, 1, "g0")
	var rest []*item
	for i := 1; i <= 5; i++ {
		e := tr.addKey(pos(i), time.Time{}, 1, 1, fmt.Sprintf("g%d", i))
		it := &item{ev: &event.Event{ID: fmt.Sprintf("e%d", i)}, txn: e, size: 1}
		tr.release([]*item{it})
		tr.take() // saved: the acknowledgement no longer takes room
		tr.saved()
		rest = append(rest, it)
	}
	s := tr.take()
	if got := ackedIDs(s.acked); !slices.Equal(got, []string{"e1", "e2", "e3"}) {
		t.Fatalf("listed %v, want the first 3 (the limit)", got)
	}
	tr.ack(stuck, 1)
	if s := tr.take(); s.pos != pos(5) || len(s.acked) != 0 || tr.acked != 0 {
		t.Fatalf("watermark %v, listed %v", s.pos, s.acked)
	}
}

// While one transaction holds the watermark back, acknowledged events the
// full list does not hold take room until the watermark passes them: a
// crash would send them again, so sending stops once they and the events
// in flight reach the limit, and never more than the limit is unlisted.
// (They stopped counting once saved, and sending went on: a replay killed
// with one aggregate held back re-sent 1,278 to 2,250 events, limit 1,000.)
func TestUnlistedAcknowledgementsTakeRoomUntilTheWatermarkPassesThem(t *testing.T) {
	const limit = 4
	tr := newTracker(pos(-1), limit, 1<<20)
	stuck := tr.addKey(pos(0), time.Time{}, 1, 1, "g0") // one aggregate's event, retried
	fits := func() bool { tr.mu.Lock(); defer tr.mu.Unlock(); return tr.fits(1, 1) }
	sent := 1
	for i := 1; fits(); i++ {
		if i > 10*limit {
			t.Fatalf("%d events sent with one held back and the rest acknowledged and saved (limit %d): nothing stops sending", sent, limit)
		}
		e := tr.addKey(pos(i), time.Time{}, 1, 1, fmt.Sprintf("g%d", i))
		sent++
		tr.release([]*item{{ev: &event.Event{ID: fmt.Sprintf("e%d", i)}, txn: e, size: 1}})
		tr.take() // saved at once: what is listed no longer takes room
		tr.saved()
	}
	s := tr.take()
	tr.saved()
	// A crash now sends again what the checkpoint does not cover: the
	// events after its watermark that it does not list.
	resent := sent - len(ackedIDs(s.acked))
	if s.pos != pos(-1) || resent > limit {
		t.Fatalf("sending stopped after %d events, checkpoint at %v listing %d: a crash sends %d again, over the limit %d", sent, s.pos, len(ackedIDs(s.acked)), resent, limit)
	}
	if want := 2 * limit; sent != want {
		t.Fatalf("sending stopped after %d events, want %d (the list's %d, then %d that take room)", sent, want, limit, limit)
	}
	tr.ack(stuck, 1) // the watermark passes them all: after their save, room again
	tr.take()
	if fits() {
		t.Fatal("room before the save that covers the events the watermark passed")
	}
	tr.saved()
	if !fits() || tr.held() != 0 {
		t.Fatalf("after the save: fits %v, held %d", fits(), tr.held())
	}
}

// holdingSubmitter acknowledges every event at once but the one with id
// hold, which it keeps until ctx ends (a webhook retrying one aggregate).
type holdingSubmitter struct {
	scriptSink
	hold string
}

func (h *holdingSubmitter) Submit(ctx context.Context, batch []*event.Event, ack func(int, error)) {
	for i, e := range batch {
		if e.ID == h.hold {
			go func() { <-ctx.Done(); ack(i, ctx.Err()) }()
			continue
		}
		h.mu.Lock()
		h.delivered = append(h.delivered, e.ID)
		h.mu.Unlock()
		ack(i, nil)
	}
}

// What is acknowledged is saved at once (not at the next interval), with
// the events acknowledged beyond an unacknowledged one listed.
func TestAcknowledgedEventsBeyondTheWatermarkAreSavedAtOnce(t *testing.T) {
	s := &holdingSubmitter{hold: "e1"}
	store := &memStore{}
	listed := func() []string {
		cp, _ := store.Load(context.Background(), "s")
		if cp.Acked == nil {
			return nil
		}
		return ackedIDs(cp.Acked.Events)
	}
	want := []string{"e2", "e3", "e4"}
	err := run(t, Config{Name: "s", Sink: s, Store: store, Start: event.Position{File: "b.1", Pos: 4}, CheckpointInterval: time.Hour, DrainTimeout: time.Millisecond},
		&fakeSource{Txns: gtxns(5)}, func() bool { return slices.Equal(listed(), want) })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	cp, _ := store.Load(context.Background(), "s")
	if cp.Position.Pos != 10 {
		t.Fatalf("checkpoint at %v, want after e0's transaction (10): e1 is unacknowledged", cp.Position)
	}
	if got := listed(); !slices.Equal(got, want) {
		t.Fatalf("checkpoint lists %v, want %v (never e1, which was not acknowledged)", got, want)
	}
	if cp.Acked.ReadThrough != "0-1-5" {
		t.Fatalf("read through %q, want the last transaction handed on, 0-1-5", cp.Acked.ReadThrough)
	}
}

// A pipeline whose sink holds one aggregate's event unacknowledged, and
// acknowledges the others at once, stops reading once what a crash would
// send again reaches MaxInFlight: the events after the saved checkpoint's
// position that it does not list are at most MaxInFlight. (Without the
// bound, the acknowledgements past the full list were saved, stopped
// counting, and the source went on to its end.)
func TestAPipelineHeldByOneAggregateStopsWhereACrashWouldResendMaxInFlight(t *testing.T) {
	const limit, events = 10, 200
	s := &holdingSubmitter{hold: "e1"}
	store := &memStore{}
	p, err := New(Config{Name: "s", Sink: s, Store: store, Start: event.Position{File: "b.1", Pos: 4}, MaxInFlight: limit, DrainTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, &fakeSource{Txns: gtxns(events)}) }()
	// Stopped: the source waits for room, and every acknowledgement is
	// saved, so nothing can make room but e1's. (p.tracker is read once an
	// event was delivered: after Run set it.)
	stopped := func() bool {
		if len(s.got()) == 0 {
			return false
		}
		tr := p.tracker
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return tr.waiting > 0 && tr.unsaved == 0 && tr.saving == 0
	}
	eventually.Within(t, 30*time.Second, "the source to wait for room, everything acknowledged saved, or every event delivered",
		func() bool { return stopped() || len(s.got()) == events-1 })
	cancel()
	<-done
	cp, _ := store.Load(context.Background(), "s")
	covered := map[string]bool{}
	if cp.Acked != nil {
		for _, id := range ackedIDs(cp.Acked.Events) {
			covered[id] = true
		}
	}
	sent := append(s.got(), "e1") // e1 was sent, never acknowledged
	var resent []string
	for _, id := range sent {
		var k int
		fmt.Sscanf(id, "e%d", &k)
		if uint32(10+k) > cp.Position.Pos && !covered[id] { // gtxns: eK is at position 10+K
			resent = append(resent, id)
		}
	}
	if len(resent) > limit {
		t.Fatalf("%d events sent, checkpoint at %v listing %d: a crash now sends %d again, over max_in_flight %d",
			len(sent), cp.Position, len(covered), len(resent), limit)
	}
}

type resumeObserver struct {
	nopObserver
	mu       sync.Mutex
	skipped  map[string]int
	resent   int
	fellBack int
	foreign  map[string]int
}

func (o *resumeObserver) Skipped(by string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.skipped == nil {
		o.skipped = map[string]int{}
	}
	o.skipped[by]++
}
func (o *resumeObserver) Resent()          { o.mu.Lock(); o.resent++; o.mu.Unlock() }
func (o *resumeObserver) RecoverFellBack() { o.mu.Lock(); o.fellBack++; o.mu.Unlock() }
func (o *resumeObserver) Foreign(why string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.foreign == nil {
		o.foreign = map[string]int{}
	}
	o.foreign[why]++
}

// A restart does not send the events its checkpoint lists as acknowledged,
// lists them again (a second crash skips them too), sends the others, and
// counts as re-sent those up to the last transaction the previous run had
// handed on.
func TestResumeSkipsWhatTheCheckpointListsAsAcknowledged(t *testing.T) {
	store := &memStore{}
	store.Save(context.Background(), "s", checkpoint.Checkpoint{
		Position: event.Position{File: "b.1", Pos: 10, GTIDSet: "0-1-1"},
		Acked:    &checkpoint.Acked{Events: map[string][]string{"0-1-3": {"e2"}, "0-1-4": {"e3"}}, ReadThrough: "0-1-5"},
	})
	// e1 is not acknowledged until the end: the watermark stays before it.
	s := &holdingSubmitter{hold: "e1"}
	obs := &resumeObserver{}
	listed := func() []string {
		cp, _ := store.Load(context.Background(), "s")
		if cp.Acked == nil {
			return nil
		}
		return ackedIDs(cp.Acked.Events)
	}
	want := []string{"e2", "e3", "e4", "e5", "e6"}
	run(t, Config{Name: "s", Sink: s, Store: store, Observer: obs, Retry: retry.Policy{Initial: time.Millisecond, Max: time.Millisecond}, DrainTimeout: time.Millisecond},
		&fakeSource{Txns: gtxns(7)}, func() bool { return slices.Equal(listed(), want) })
	got := s.got()
	slices.Sort(got)
	if !slices.Equal(got, []string{"e4", "e5", "e6"}) {
		t.Fatalf("delivered %v, want e4–e6 (e0 is before the checkpoint, e2 and e3 are listed, e1 is held)", got)
	}
	if got := listed(); !slices.Equal(got, want) {
		t.Fatalf("checkpoint lists %v, want %v: the skipped events listed again, never e1", got, want)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.skipped["checkpoint"] != 2 || obs.resent != 2 {
		t.Fatalf("skipped %v, re-sent %d; want 2 by checkpoint, and e1 and e4 re-sent (up to 0-1-5)", obs.skipped, obs.resent)
	}
}

// recoveringSink is a scriptSink whose destination can be read back: it
// holds the events of holds, and claims of forged, or answers err (errs
// first, one per call).
type recoveringSink struct {
	scriptSink
	holds  []string    // event ids held, each in the transaction gtxns gives it
	forged []sink.Held // messages another writer made to look like the sink's
	errs   []error
	calls  atomic.Int32
	after  event.Position
}

func (r *recoveringSink) Recover(_ context.Context, after event.Position, seen func(sink.Held)) error {
	n := int(r.calls.Add(1))
	r.after = after
	if n <= len(r.errs) {
		return r.errs[n-1]
	}
	for _, id := range r.holds {
		var k int
		fmt.Sscanf(id, "e%d", &k)
		e := &event.Event{ID: id, Source: event.Source{GTID: fmt.Sprintf("0-1-%d", k+1)}}
		d, _ := r.Digest(e)
		seen(sink.Held{GTID: e.Source.GTID, ID: id, At: "log offset " + id, Digest: d})
	}
	for _, h := range r.forged {
		seen(h)
	}
	return nil
}

// Digest is the digest of an event's id and GTID (what the fake writes).
func (r *recoveringSink) Digest(e *event.Event) (sink.Digest, bool) {
	return sha256.Sum256([]byte(e.ID + "@" + e.Source.GTID)), true
}

// After a restart, a sink that can read its destination back is asked what
// it holds after the checkpoint, and that is not sent again; when it cannot
// tell, everything after the checkpoint is sent (and the fall-back counted);
// another read-back error is retried. A pipeline with no checkpoint does
// not ask.
func TestResumeSkipsWhatTheSinkReadsBack(t *testing.T) {
	resumed := func() *memStore {
		store := &memStore{}
		store.Save(context.Background(), "s", checkpoint.Checkpoint{Position: event.Position{File: "b.1", Pos: 10, GTIDSet: "0-1-1"},
			Acked: &checkpoint.Acked{Events: map[string][]string{"0-1-3": {"e2"}}}})
		return store
	}
	tests := []struct {
		name     string
		store    *memStore
		errs     []error
		want     []string
		calls    int32
		skipped  map[string]int
		fellBack int
		forged   []sink.Held
		foreign  map[string]int
	}{
		{name: "what the destination holds is skipped with what the checkpoint lists", store: resumed(),
			want: []string{"e1", "e4"}, calls: 1, skipped: map[string]int{"checkpoint": 1, "readback": 1}},
		{name: "a read-back that cannot tell falls back to at-least-once", store: resumed(),
			errs: []error{fmt.Errorf("partition 3 has records of another writer: %w", sink.ErrCannotRecover)},
			want: []string{"e1", "e3", "e4"}, calls: 1, skipped: map[string]int{"checkpoint": 1}, fellBack: 1},
		{name: "a failed read-back is retried", store: resumed(),
			errs: []error{errors.New("connection refused")},
			want: []string{"e1", "e4"}, calls: 2, skipped: map[string]int{"checkpoint": 1, "readback": 1}},
		{name: "a pipeline without a checkpoint does not read back", store: &memStore{},
			want: []string{"e0", "e1", "e2", "e3", "e4"}, calls: 0},
		{name: "a forged message naming a real event is not the sink's copy of it: the event is sent", store: resumed(),
			forged: []sink.Held{{GTID: "0-1-5", ID: "e4", At: "log offset 9", Digest: sink.Digest{1}}},
			want:   []string{"e1", "e4"}, calls: 1, skipped: map[string]int{"checkpoint": 1, "readback": 1},
			foreign: map[string]int{"mismatch": 1}},
		{name: "a forged message with the real digest of another event proves nothing either", store: resumed(),
			forged: []sink.Held{{GTID: "0-1-5", ID: "e4", At: "log offset 9", Digest: sha256.Sum256([]byte("e3@0-1-4"))}},
			want:   []string{"e1", "e4"}, calls: 1, skipped: map[string]int{"checkpoint": 1, "readback": 1},
			foreign: map[string]int{"mismatch": 1}},
		{name: "a forged message naming no event of its transaction is reported once the stream passes it", store: resumed(),
			forged: []sink.Held{{GTID: "0-1-5", ID: "nope", At: "log offset 9", Digest: sink.Digest{1}}},
			want:   []string{"e1", "e4"}, calls: 1, skipped: map[string]int{"checkpoint": 1, "readback": 1},
			foreign: map[string]int{"unmatched": 1}},
		{name: "a message the sink dropped as too large is no claim, even with the event's digest: the event is sent", store: resumed(),
			forged: []sink.Held{{GTID: "0-1-5", ID: "e4", At: "log offset 9", Digest: sha256.Sum256([]byte("e4@0-1-5")), Dropped: "oversized"}},
			want:   []string{"e1", "e4"}, calls: 1, skipped: map[string]int{"checkpoint": 1, "readback": 1},
			foreign: map[string]int{"oversized": 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &recoveringSink{holds: []string{"e3"}, errs: tc.errs, forged: tc.forged}
			obs := &resumeObserver{}
			run(t, Config{Name: "s", Sink: s, Store: tc.store, Observer: obs, Start: event.Position{File: "b.1", Pos: 4},
				Retry: retry.Policy{Initial: time.Millisecond, Max: time.Millisecond}},
				&fakeSource{Txns: gtxns(5)}, func() bool { return len(s.got()) >= len(tc.want) })
			if got := s.got(); !slices.Equal(got, tc.want) {
				t.Fatalf("delivered %v, want %v", got, tc.want)
			}
			if n := s.calls.Load(); n != tc.calls {
				t.Fatalf("Recover called %d times, want %d", n, tc.calls)
			}
			if tc.calls > 0 && s.after.GTIDSet != "0-1-1" {
				t.Fatalf("Recover asked after %v, want the checkpoint's position", s.after)
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if fmt.Sprint(obs.skipped) != fmt.Sprint(tc.skipped) && len(obs.skipped)+len(tc.skipped) > 0 {
				t.Fatalf("skipped %v, want %v", obs.skipped, tc.skipped)
			}
			if obs.fellBack != tc.fellBack {
				t.Fatalf("fall-backs %d, want %d", obs.fellBack, tc.fellBack)
			}
			if fmt.Sprint(obs.foreign) != fmt.Sprint(tc.foreign) && len(obs.foreign)+len(tc.foreign) > 0 {
				t.Fatalf("foreign %v, want %v", obs.foreign, tc.foreign)
			}
		})
	}
}

// Claims read back whose transaction the stream passes without delivering
// it (no outbox event) are reported by a sweep and dropped, so that they
// do not pile up; claims of transactions still ahead stay.
func TestSkipSetDropsClaimsTheStreamHasPassed(t *testing.T) {
	s := newSkipSet(nil, 10)
	s.addHeld(sink.Held{GTID: "0-1-3", ID: "x"})
	s.addHeld(sink.Held{GTID: "0-1-900", ID: "y"})
	at := func() (*position.Set, error) { return position.Parse("0-1-100") }
	var dropped []sink.Held
	for range 64 {
		s.pass("0-1-50")
		dropped = append(dropped, s.sweep(at)...)
	}
	if len(dropped) != 1 || dropped[0].ID != "x" || s.claims != 1 || s.n != 1 {
		t.Fatalf("dropped %v, %d claims and %d listed left; want x dropped, y kept", dropped, s.claims, s.n)
	}
}

// Acknowledged events take room until the save that covers them is over:
// what a crash sends again (in flight, or acknowledged but not yet saved)
// stays within the in-flight limit.
func TestTrackerCountsUnsavedAcknowledgementsAsInFlight(t *testing.T) {
	tr := newTracker(pos(-1), 2, 1<<20)
	e0 := tr.add(pos(0), time.Time{}, 2, 2)
	tr.ack(e0, 1)
	tr.ack(e0, 1)
	added := make(chan *txnEntry, 1)
	go func() { added <- tr.add(pos(1), time.Time{}, 1, 1) }()
	s := tr.take() // a save begins: still no room until it is over
	if s.pos != pos(0) {
		t.Fatalf("snapshot at %v", s.pos)
	}
	select {
	case <-added:
		t.Fatal("add went on while 2 acknowledged events were not saved (limit 2)")
	case <-time.After(50 * time.Millisecond):
	}
	tr.saved()
	if e := <-added; e == nil {
		t.Fatal("add refused after the save")
	}
}

// timedStore is a memStore that records when each save began, while on:
// the checkpoint's UpdatedAt, the instant the pipeline stamped when it
// decided to save (the store's own clock would add the scheduler's delay
// between that decision and the call, which differs from save to save).
type timedStore struct {
	memStore
	mu     sync.Mutex
	on     bool
	starts []time.Time
}

func (s *timedStore) Save(ctx context.Context, k string, cp checkpoint.Checkpoint) error {
	s.mu.Lock()
	if s.on {
		s.starts = append(s.starts, cp.UpdatedAt)
	}
	s.mu.Unlock()
	return s.memStore.Save(ctx, k, cp)
}

// slowSink acknowledges each batch after a pause.
type slowSink struct {
	countingSink
	pause time.Duration
}

func (s *slowSink) Write(ctx context.Context, batch []*event.Event) error {
	time.Sleep(s.pause)
	return s.countingSink.Write(ctx, batch)
}

// While acknowledgements stream in, two saves of the checkpoint begin at
// least CheckpointGap apart, each covering what was acknowledged since the
// last: the saves a second are capped, not one per acknowledgement.
func TestSavesWhileAcknowledgementsStreamInAreCheckpointGapApart(t *testing.T) {
	const events, gap = 100, 20 * time.Millisecond
	s := &slowSink{pause: 2 * time.Millisecond}
	store := &timedStore{on: true}
	src := &fakeSource{Txns: gtxns(events)}
	err := run(t, Config{Name: "s", Sink: s, Store: store, Start: event.Position{File: "b.1", Pos: 4}, BatchSize: 1,
		CheckpointInterval: time.Hour, CheckpointGap: gap, DrainTimeout: time.Millisecond},
		src, func() bool {
			cp, _ := store.Load(context.Background(), "s")
			if cp.Position.GTIDSet != fmt.Sprintf("0-1-%d", events) {
				return false
			}
			store.mu.Lock()
			store.on = false // not the final save, which does not wait
			store.mu.Unlock()
			return true
		})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	// The first save is the start checkpoint's, saved before the loop.
	saves := store.starts[1:]
	if len(saves) < 2 {
		t.Fatalf("%d saves while %d events were acknowledged one by one over at least %s", len(saves), events, events*s.pause)
	}
	for i := 1; i < len(saves); i++ {
		if d := saves[i].Sub(saves[i-1]); d < gap {
			t.Errorf("saves %d and %d began %s apart, less than the gap %s (%d saves)", i-1, i, d, gap, len(saves))
		}
	}
}

// Acknowledgements the watermark passes in the same release (a sink that
// acknowledges in order) are never listed: releasing them allocates
// nothing, as before the checkpoint listed acknowledged events.
func TestInOrderAcknowledgementsAreNotListed(t *testing.T) {
	tr := newTracker(pos(-1), 1<<20, 1<<30)
	const runs, txns, events = 20, 10, 10
	var batches [][]*item
	for b := range runs + 1 {
		var batch []*item
		for x := range txns {
			n := b*txns + x
			e := tr.addKey(pos(n), time.Time{}, events, events, fmt.Sprintf("0-1-%d", n+1))
			for k := range events {
				batch = append(batch, &item{ev: &event.Event{ID: fmt.Sprintf("e%d-%d", n, k)}, txn: e, size: 1})
			}
		}
		batches = append(batches, batch)
	}
	next := 0
	allocs := testing.AllocsPerRun(runs, func() {
		tr.release(batches[next])
		next++
	})
	if allocs != 0 {
		t.Errorf("releasing %d in-order acknowledgements allocates %.1f times", txns*events, allocs)
	}
	if s := tr.take(); s.acked != nil || s.pos != pos(runs*txns+txns-1) {
		t.Errorf("snapshot at %v listing %v, want at the last transaction listing nothing", s.pos, s.acked)
	}
}

// Events of transactions that settle and collapse into one entry within a
// single release are listed (on the entry kept), and those the watermark
// passes in it are not.
func TestOneReleaseListsWhatItsCollapsedTransactionsAcknowledged(t *testing.T) {
	tr := newTracker(pos(-1), 1000, 1<<20)
	var all []*item
	for i := range 5 {
		e := tr.addKey(pos(i), time.Time{}, 2, 2, fmt.Sprintf("g%d", i))
		all = append(all, &item{ev: &event.Event{ID: fmt.Sprintf("t%da", i)}, txn: e, size: 1},
			&item{ev: &event.Event{ID: fmt.Sprintf("t%db", i)}, txn: e, size: 1})
	}
	// 0 settles and is passed; 1 is half acknowledged; 2 and 3 settle and
	// collapse; 4 is half acknowledged.
	tr.release([]*item{all[0], all[1], all[2], all[4], all[5], all[6], all[7], all[8]})
	s := tr.take()
	if s.pos != pos(0) {
		t.Fatalf("watermark %v, want %v", s.pos, pos(0))
	}
	if got, want := ackedIDs(s.acked), []string{"t1a", "t2a", "t2b", "t3a", "t3b", "t4a"}; !slices.Equal(got, want) {
		t.Fatalf("listed %v, want %v", got, want)
	}
	if tr.acked != 6 {
		t.Fatalf("counted %d listed, want 6", tr.acked)
	}
}

// A sink that acknowledges one event at a time (a Submitter) lists each
// transaction's events with one allocation, not one per doubling.
func TestOneByOneAcknowledgementsListATransactionWithOneAllocation(t *testing.T) {
	tr := newTracker(pos(-1), 1<<20, 1<<30)
	const runs, events = 20, 10
	var txns [][]*item
	for n := range runs + 1 {
		e := tr.addKey(pos(n), time.Time{}, events, events, fmt.Sprintf("0-1-%d", n+1))
		var its []*item
		for k := range events {
			its = append(its, &item{ev: &event.Event{ID: fmt.Sprintf("e%d-%d", n, k)}, txn: e, size: 1})
		}
		txns = append(txns, its)
	}
	next := 0
	allocs := testing.AllocsPerRun(runs, func() {
		for _, it := range txns[next] {
			tr.release([]*item{it})
		}
		next++
	})
	if allocs > 1 {
		t.Errorf("acknowledging a transaction's %d events one by one allocates %.1f times", events, allocs)
	}
}

// The gap between saves never holds the source back: when it waits for
// room that unsaved acknowledgements hold, the next save starts at once
// (here the gap is an hour, and 100 events go through a limit of 10).
func TestTheGapBetweenSavesDoesNotHoldTheSourceBack(t *testing.T) {
	const events = 100
	s := &countingSink{}
	store := &memStore{}
	err := run(t, Config{Name: "s", Sink: s, Store: store, Start: event.Position{File: "b.1", Pos: 4}, BatchSize: 5, MaxInFlight: 10,
		CheckpointInterval: time.Hour, CheckpointGap: time.Hour, DrainTimeout: time.Millisecond},
		&fakeSource{Txns: gtxns(events)}, func() bool { return s.N.Load() == events })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	if n := s.N.Load(); n != events {
		t.Fatalf("%d of %d events delivered: the source waited for the gap", n, events)
	}
}

// A sink that reads its destination back on a restart does not send
// acknowledged events again whether or not they were saved: they take no
// room while their save is under way.
func TestTrackerOfAReadBackSinkCountsOnlyUnacknowledgedEvents(t *testing.T) {
	tr := newTracker(pos(-1), 2, 1<<20)
	tr.readBack = true
	e0 := tr.add(pos(0), time.Time{}, 2, 2)
	tr.ack(e0, 1)
	tr.ack(e0, 1)
	tr.take() // a save begins
	added := make(chan *txnEntry, 1)
	go func() { added <- tr.add(pos(1), time.Time{}, 2, 2) }()
	select {
	case e := <-added:
		if e == nil {
			t.Fatal("add refused")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("add waited for the save of acknowledged events")
	}
}

// The list keeps each transaction's ids in the order they were
// acknowledged, whatever the order of the transactions' acknowledgements
// around them (the list is sorted by transaction, stably).
func TestTheListKeepsEachTransactionsAcknowledgementOrder(t *testing.T) {
	tr := newTracker(pos(-1), 1000, 1<<20)
	tr.addKey(pos(0), time.Time{}, 1, 1, "g0") // never acknowledged: nothing passes the watermark
	const n, per = 20, 5
	var entries []*txnEntry
	for i := range n {
		entries = append(entries, tr.addKey(pos(i+1), time.Time{}, per, per, fmt.Sprintf("g%d", i+1)))
	}
	// Acknowledge one event at a time, the transactions in turn from the
	// newest, each one's events from its last: every id lands after ids of
	// other transactions, newer and older.
	want := map[string][]string{}
	for k := per - 1; k >= 0; k-- {
		for i := n - 1; i >= 0; i-- {
			id := fmt.Sprintf("t%d-%d", i+1, k)
			key := fmt.Sprintf("g%d", i+1)
			want[key] = append(want[key], id)
			tr.release([]*item{{ev: &event.Event{ID: id}, txn: entries[i], size: 1}})
		}
	}
	s := tr.take()
	if len(s.acked) != n {
		t.Fatalf("listed %d transactions, want %d: %v", len(s.acked), n, s.acked)
	}
	for key, ids := range want {
		if !slices.Equal(s.acked[key], ids) {
			t.Fatalf("transaction %s listed %v, want %v (the acknowledgement order)", key, s.acked[key], ids)
		}
	}
}

// A sink that is read back saves ReadBackGapFactor times as far apart as
// one that is not: its crash re-sends nothing it acknowledged either way,
// and saving costs the delivery path.
func TestAReadBackSinkSavesFurtherApart(t *testing.T) {
	for _, tc := range []struct {
		name string
		sink sink.Sink
		want time.Duration
	}{
		{"a sink that cannot be read back", &scriptSink{}, 10 * time.Millisecond},
		{"a read-back sink", &recoveringSink{}, 10 * time.Millisecond * ReadBackGapFactor},
	} {
		p, err := New(Config{Name: "s", Sink: tc.sink, Store: &memStore{}, CheckpointGap: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if p.cfg.CheckpointGap != tc.want {
			t.Errorf("%s: saves %s apart, want %s", tc.name, p.cfg.CheckpointGap, tc.want)
		}
	}
}

// A checkpoint whose list of acknowledged events is longer than
// max_in_flight lets a run save (a limit lowered since, or a list changed by
// hand) stops the pipeline before it reads, naming the field, the limit and
// a way out that skips nothing; one within the limit resumes.
func TestAListLongerThanMaxInFlightIsRefused(t *testing.T) {
	stored := func(n int) *memStore {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("e%d", i)
		}
		store := &memStore{}
		store.Save(context.Background(), "s", checkpoint.Checkpoint{Position: event.Position{File: "b.1", Pos: 10, GTIDSet: "0-1-1"},
			Acked: &checkpoint.Acked{Events: map[string][]string{"0-1-9": ids}}})
		return store
	}
	s := &countingSink{}
	err := run(t, Config{Name: "s", Sink: s, Store: stored(2001), MaxInFlight: 2000, BatchSize: 5},
		&fakeSource{Txns: gtxns(3)}, func() bool { return false })
	if err == nil || errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want a refusal of the list", err)
	}
	for _, want := range []string{`checkpoint "s"`, "field acked lists 2001", "max_in_flight (2000)", "raise it to at least 2001", `remove the checkpoint's "acked" field`, "none is skipped"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if n := s.N.Load(); n != 0 {
		t.Errorf("%d events delivered from a refused checkpoint", n)
	}

	s = &countingSink{}
	err = run(t, Config{Name: "s", Sink: s, Store: stored(2000), MaxInFlight: 2000, BatchSize: 5, DrainTimeout: time.Millisecond},
		&fakeSource{Txns: gtxns(3)}, func() bool { return s.N.Load() == 2 })
	if !errors.Is(err, context.Canceled) || s.N.Load() != 2 {
		t.Fatalf("a list at the limit: Run = %v after %d events, want 2 delivered", err, s.N.Load())
	}
}
