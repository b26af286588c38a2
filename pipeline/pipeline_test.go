package pipeline

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/pipeline/pipelinetest"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/sink"
)

// fakeSource hands out txns after the position it runs from, then blocks
// until ctx ends.
type fakeSource = pipelinetest.Source

func txns(n, perTxn int) []*event.Txn {
	var out []*event.Txn
	k := 0
	for i := range n {
		t := &event.Txn{Position: event.Position{File: "b.1", Pos: uint32(10 + i)}, CommitTime: time.Unix(1, 0)}
		for range perTxn {
			t.Events = append(t.Events, &event.Event{ID: fmt.Sprintf("e%d", k), AggregateID: fmt.Sprintf("a%d", k%3), Payload: []byte("{}")})
			k++
		}
		out = append(out, t)
	}
	return out
}

// scriptSink fails events by id according to fail, then records deliveries.
type scriptSink struct {
	mu        sync.Mutex
	fail      func(id string, attempt int) error
	attempts  map[string]int
	delivered []string
}

func (s *scriptSink) Connect(context.Context) error { return nil }
func (s *scriptSink) Close(context.Context) error   { return nil }
func (s *scriptSink) Write(_ context.Context, batch []*event.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.attempts == nil {
		s.attempts = map[string]int{}
	}
	errs := map[int]error{}
	for i, e := range batch {
		s.attempts[e.ID]++
		if s.fail != nil {
			if err := s.fail(e.ID, s.attempts[e.ID]); err != nil {
				errs[i] = err
				continue
			}
		}
		s.delivered = append(s.delivered, e.ID)
	}
	if len(errs) > 0 {
		return &sink.BatchError{Errs: errs}
	}
	return nil
}

func (s *scriptSink) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.delivered...)
}

type memStore struct {
	mu  sync.Mutex
	cps map[string]checkpoint.Checkpoint
}

func (m *memStore) Load(_ context.Context, k string) (checkpoint.Checkpoint, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cp, ok := m.cps[k]
	if !ok {
		return cp, checkpoint.ErrNotFound
	}
	return cp, nil
}
func (m *memStore) Save(_ context.Context, k string, cp checkpoint.Checkpoint) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cps == nil {
		m.cps = map[string]checkpoint.Checkpoint{}
	}
	m.cps[k] = cp
	return nil
}
func (m *memStore) Close() error { return nil }

type memDLQ struct {
	mu  sync.Mutex
	dls []deadletter.Letter
}

func (m *memDLQ) Put(_ context.Context, dl deadletter.Letter) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dls = append(m.dls, dl)
	return nil
}

func run(t *testing.T, cfg Config, src Source, until func() bool) error {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, src) }()
	deadline := time.Now().Add(10 * time.Second)
	for !until() && time.Now().Before(deadline) {
		select {
		case err := <-done:
			cancel()
			return err
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	return <-done
}

func TestRetriableFailuresAreRetriedInOrderUntilDelivered(t *testing.T) {
	s := &scriptSink{fail: func(id string, attempt int) error {
		if (id == "e4" || id == "e7") && attempt < 3 {
			return errors.New("broker unavailable")
		}
		return nil
	}}
	store := &memStore{}
	src := &fakeSource{Txns: txns(10, 2)}
	err := run(t, Config{Name: "s", Sink: s, Store: store, Start: event.Position{File: "b.1", Pos: 4},
		Retry: retry.Policy{Initial: time.Millisecond}, BatchSize: 3, Linger: time.Millisecond}, src, func() bool { return len(s.got()) == 20 })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	got := s.got()
	// Per aggregate, deliveries are in input order.
	last := map[string]int{}
	for _, id := range got {
		var n int
		fmt.Sscanf(id, "e%d", &n)
		agg := fmt.Sprintf("a%d", n%3)
		if prev, ok := last[agg]; ok && n < prev {
			t.Fatalf("aggregate %s: e%d delivered after e%d: %v", agg, n, prev, got)
		}
		last[agg] = n
	}
	if len(got) != 20 {
		t.Fatalf("delivered %d of 20: %v", len(got), got)
	}
	cp, _ := store.Load(context.Background(), "s")
	if cp.Position.Pos != 19 {
		t.Fatalf("final checkpoint %v, want the last transaction (pos 19)", cp.Position)
	}
}

func TestPermanentFailureGoesToTheDeadLetterStoreAndTheStreamGoesOn(t *testing.T) {
	s := &scriptSink{fail: func(id string, _ int) error {
		if id == "e3" {
			return sink.Permanent(errors.New("message too large"))
		}
		return nil
	}}
	dlq := &memDLQ{}
	store := &memStore{}
	obs := &countingObserver{}
	err := run(t, Config{Name: "s", Sink: s, Store: store, DeadLetters: dlq, Start: event.Position{File: "b.1", Pos: 4}, Observer: obs},
		&fakeSource{Txns: txns(5, 2)}, func() bool { return len(s.got()) == 9 })
	if d, dl := obs.delivered.Load(), obs.deadLettered.Load(); d != 9 || dl != 1 {
		t.Fatalf("observer saw %d delivered and %d dead-lettered, want 9 and 1 (a dead letter is not a delivery)", d, dl)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	if len(dlq.dls) != 1 || dlq.dls[0].Event.ID != "e3" || !strings.Contains(dlq.dls[0].Reason, "too large") || dlq.dls[0].Sink != "s" {
		t.Fatalf("dead letters = %+v", dlq.dls)
	}
	if cp, _ := store.Load(context.Background(), "s"); cp.Position.Pos != 14 {
		t.Fatalf("checkpoint %v did not pass the dead-lettered event", cp.Position)
	}
}

// ownedSink is a sink of tenant acme (sink.Owned).
type ownedSink struct{ *scriptSink }

func (ownedSink) Tenant() string { return "acme" }

// A dead letter keeps the tenant of the sink that failed it; a sink of no
// tenant leaves it empty.
func TestADeadLetterKeepsItsSinksTenant(t *testing.T) {
	for _, tc := range []struct {
		name   string
		owned  bool
		tenant string
	}{{"a sink of tenant acme", true, "acme"}, {"a sink of no tenant", false, ""}} {
		t.Run(tc.name, func(t *testing.T) {
			s := &scriptSink{fail: func(id string, _ int) error {
				if id == "e3" {
					return sink.Permanent(errors.New("rejected"))
				}
				return nil
			}}
			var as sink.Sink = s
			if tc.owned {
				as = ownedSink{s}
			}
			dlq := &memDLQ{}
			_ = run(t, Config{Name: "hooks/orders", Sink: as, Store: &memStore{}, DeadLetters: dlq, Start: event.Position{File: "b.1", Pos: 4}},
				&fakeSource{Txns: txns(5, 2)}, func() bool { return len(s.got()) == 9 })
			if len(dlq.dls) != 1 || dlq.dls[0].Tenant != tc.tenant {
				t.Fatalf("dead letters = %+v, want one of tenant %q", dlq.dls, tc.tenant)
			}
		})
	}
}

func TestPermanentFailureWithoutAStoreStopsBeforeTheCheckpointPassesIt(t *testing.T) {
	s := &scriptSink{fail: func(id string, _ int) error {
		if id == "e3" {
			return sink.Permanent(errors.New("rejected"))
		}
		return nil
	}}
	store := &memStore{}
	err := run(t, Config{Name: "s", Sink: s, Store: store, Start: event.Position{File: "b.1", Pos: 4}, BatchSize: 1},
		&fakeSource{Txns: txns(5, 2)}, func() bool { return false })
	if err == nil || !strings.Contains(err.Error(), "no dead-letter store") {
		t.Fatalf("Run = %v, want an error about the missing dead-letter store", err)
	}
	cp, _ := store.Load(context.Background(), "s")
	if cp.Position.Pos >= 11 {
		t.Fatalf("checkpoint %v passed the transaction of the failed event (pos 11)", cp.Position)
	}
}

func TestResumeFromTheSavedCheckpoint(t *testing.T) {
	store := &memStore{}
	store.Save(context.Background(), "s", checkpoint.Checkpoint{Flavor: "mariadb", Position: event.Position{File: "b.1", Pos: 12}})
	s := &scriptSink{}
	run(t, Config{Name: "s", Sink: s, Store: store, Identity: checkpoint.Checkpoint{Flavor: "mariadb"}},
		&fakeSource{Txns: txns(5, 1)}, func() bool { return len(s.got()) == 2 })
	if got := s.got(); len(got) != 2 || got[0] != "e3" {
		t.Fatalf("resumed deliveries %v, want [e3 e4]", got)
	}
}

// Resume decides by CanResume (GTID containment), not by server identity: a
// checkpoint read from another server resumes when the source can serve it,
// and is refused, with CanResume's reason, when it cannot.
func TestResumeAsksCanResumeNotTheServerIdentity(t *testing.T) {
	store := &memStore{}
	store.Save(context.Background(), "s", checkpoint.Checkpoint{Flavor: "mysql", ServerUUID: "aaa", Position: event.Position{GTIDSet: "aaa:1-5"}})
	var asked event.Position
	ok := func(_ context.Context, cp checkpoint.Checkpoint) error { asked = cp.Position; return nil }
	p, _ := New(Config{Name: "s", Sink: &scriptSink{}, Store: store, Identity: checkpoint.Checkpoint{Flavor: "mysql", ServerUUID: "bbb"}, CanResume: ok})
	pos, resumed, err := p.Resume(context.Background())
	if err != nil || !resumed || pos.GTIDSet != "aaa:1-5" || asked.GTIDSet != "aaa:1-5" {
		t.Fatalf("Resume = %v, %v, %v (asked %v); want the checkpoint of another server_uuid resumed", pos, resumed, err, asked)
	}
	refuse := func(context.Context, checkpoint.Checkpoint) error { return errors.New("missing aaa:5") }
	p, _ = New(Config{Name: "s", Sink: &scriptSink{}, Store: store, Identity: checkpoint.Checkpoint{Flavor: "mysql"}, CanResume: refuse})
	if _, _, err := p.Resume(context.Background()); err == nil || !strings.Contains(err.Error(), "missing aaa:5") {
		t.Fatalf("Resume = %v, want CanResume's refusal", err)
	}
	p, _ = New(Config{Name: "s", Sink: &scriptSink{}, Store: store, Identity: checkpoint.Checkpoint{Flavor: "mariadb"}})
	if _, _, err := p.Resume(context.Background()); err == nil || !strings.Contains(err.Error(), "saved from a mysql server") {
		t.Fatalf("Resume = %v, want a flavor mismatch refused", err)
	}
}

// asyncSink is a Submitter that acknowledges each event from its own
// goroutine, in reverse order, failing "e5" for good.
type asyncSink struct {
	scriptSink
}

func (a *asyncSink) Submit(_ context.Context, batch []*event.Event, ack func(int, error)) {
	for i := len(batch) - 1; i >= 0; i-- {
		go func() {
			if batch[i].ID == "e5" {
				ack(i, sink.Permanent(errors.New("gone")))
				return
			}
			a.mu.Lock()
			a.delivered = append(a.delivered, batch[i].ID)
			a.mu.Unlock()
			ack(i, nil)
		}()
	}
}

func TestSubmitterAcksPerEventMoveTheCheckpoint(t *testing.T) {
	s := &asyncSink{}
	dlq := &memDLQ{}
	store := &memStore{}
	err := run(t, Config{Name: "s", Sink: s, Store: store, DeadLetters: dlq, Start: event.Position{File: "b.1", Pos: 4}, BatchSize: 4},
		&fakeSource{Txns: txns(10, 2)}, func() bool {
			cp, _ := store.Load(context.Background(), "s")
			return cp.Position.Pos == 19
		})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	if got := len(s.got()); got != 19 {
		t.Fatalf("delivered %d, want 19 (20 less the dead letter)", got)
	}
	if len(dlq.dls) != 1 || dlq.dls[0].Event.ID != "e5" {
		t.Fatalf("dead letters %+v", dlq.dls)
	}
	if cp, _ := store.Load(context.Background(), "s"); cp.Position.Pos != 19 {
		t.Fatalf("checkpoint %v, want the last transaction", cp.Position)
	}
}

// With the sink down and the in-flight limit reached, the reader waits for
// room; a shutdown must still end Run (after DrainTimeout), not hang.
func TestShutdownWithTheSinkDownAndThePipelineFull(t *testing.T) {
	s := &scriptSink{fail: func(string, int) error { return errors.New("sink down") }}
	p, err := New(Config{Name: "s", Sink: s, Store: &memStore{}, Start: event.Position{File: "b.1", Pos: 4},
		MaxInFlight: 10, BatchSize: 5, Retry: retry.Policy{Initial: time.Millisecond, Max: 10 * time.Millisecond}, DrainTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, &fakeSource{Txns: txns(50, 2)}) }()
	for {
		s.mu.Lock()
		n := 0 // attempts in all (the first batch may be retried alone)
		for _, a := range s.attempts {
			n += a
		}
		s.mu.Unlock()
		if n >= 5 && p.tracker.size() > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after shutdown with the sink down and the pipeline full")
	}
}

type countingObserver struct {
	nopObserver
	delivered, deadLettered atomic.Int64
}

func (c *countingObserver) Delivered(*event.Event, time.Time) { c.delivered.Add(1) }
func (c *countingObserver) DeadLettered(*event.Event, string) { c.deadLettered.Add(1) }

// stuckSubmitter fails one event for good at once and keeps another
// retrying until its Submit ctx ends (as a webhook endpoint does with an
// endpoint answering 503); the rest are acknowledged.
type stuckSubmitter struct {
	scriptSink
	failID, stuckID string
	abandoned       atomic.Int64
}

func (s *stuckSubmitter) Submit(ctx context.Context, batch []*event.Event, ack func(int, error)) {
	for i, e := range batch {
		switch e.ID {
		case s.failID:
			go ack(i, sink.Permanent(errors.New("rejected with 400")))
		case s.stuckID:
			go func() {
				<-ctx.Done()
				s.abandoned.Add(1)
				ack(i, ctx.Err())
			}()
		default:
			s.mu.Lock()
			s.delivered = append(s.delivered, e.ID)
			s.mu.Unlock()
			go ack(i, nil)
		}
	}
}

// With no dead-letter store, a Submitter's permanent failure stops the
// pipeline at once: on a quiet outbox (no later event arrives), without
// waiting for another event's retries, and with the checkpoint before the
// failed event's transaction.
func TestAsyncPermanentFailureWithoutAStoreStopsAtOnce(t *testing.T) {
	s := &stuckSubmitter{failID: "e5", stuckID: "e1"}
	store := &memStore{}
	p, err := New(Config{Name: "s", Sink: s, Store: store, Start: event.Position{File: "b.1", Pos: 4},
		BatchSize: 2, Linger: time.Millisecond, DrainTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(context.Background(), &fakeSource{Txns: txns(5, 2)}) }() // then quiet
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "no dead-letter store") || !strings.Contains(err.Error(), "e5") {
			t.Fatalf("Run = %v, want an error naming e5 and the missing dead-letter store", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop on a permanent failure: it waited for the next event or for the retrying one")
	}
	if s.abandoned.Load() != 1 {
		t.Errorf("the retrying event was not abandoned")
	}
	cp, _ := store.Load(context.Background(), "s")
	if cp.Position.Pos >= 10 {
		t.Fatalf("checkpoint %v passed the retrying event's transaction (pos 10)", cp.Position)
	}
}

// A sink that cannot be reached for many attempts (connection refused) is
// tried again at least every Retry.Probe: once it is back, delivery resumes
// at once rather than after the backoff the outage accumulated. Here 12
// refusals with a 10ms first wait and no cap on the backoff would have
// waited at least 20s before the 13th attempt; with the probe every 50ms
// everything is delivered, in order, well within the 10s the test allows.
func TestAnUnreachableSinkIsRetriedPromptlyWhenItComesBack(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	var writes atomic.Int64
	s := &scriptSink{fail: func(id string, attempt int) error {
		if id == "e0" {
			writes.Add(1)
		}
		if attempt <= 12 {
			return fmt.Errorf("write: %w", refused)
		}
		return nil
	}}
	store := &memStore{}
	start := time.Now()
	err := run(t, Config{Name: "s", Sink: s, Store: store, Start: event.Position{File: "b.1", Pos: 4}, BatchSize: 100,
		Retry: retry.Policy{Initial: 10 * time.Millisecond, Max: time.Hour, Probe: 50 * time.Millisecond}},
		&fakeSource{Txns: txns(5, 2)}, func() bool { return len(s.got()) == 10 })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	if got := s.got(); len(got) != 10 || got[0] != "e0" || got[9] != "e9" {
		t.Fatalf("delivered %v, want e0..e9 in order", got)
	}
	t.Logf("delivered after %d attempts in %s", writes.Load(), time.Since(start).Round(time.Millisecond))
}

// countingStore counts saves after a point.
type countingStore struct {
	memStore
	saves atomic.Int32
}

func (c *countingStore) Save(ctx context.Context, k string, cp checkpoint.Checkpoint) error {
	c.saves.Add(1)
	return c.memStore.Save(ctx, k, cp)
}

// Once Fence says another relay took over, the pipeline writes nothing more
// and saves nothing, not even a final checkpoint.
func TestAFencedPipelineStopsAtOnceWithoutSaving(t *testing.T) {
	s := &scriptSink{}
	store := &countingStore{}
	var fenced atomic.Bool
	var savesAtFence int32
	fence := func(context.Context) error {
		if fenced.Load() {
			return fmt.Errorf("lock lost: %w", checkpoint.ErrFenced)
		}
		if len(s.got()) >= 5 {
			savesAtFence = store.saves.Load()
			fenced.Store(true)
			return checkpoint.ErrFenced
		}
		return nil
	}
	err := run(t, Config{Name: "x", Sink: s, Store: store, BatchSize: 1, Fence: fence, DrainTimeout: time.Minute}, &fakeSource{Txns: txns(50, 1)}, func() bool { return false })
	if !errors.Is(err, checkpoint.ErrFenced) {
		t.Fatalf("Run = %v, want ErrFenced", err)
	}
	if n := len(s.got()); n != 5 {
		t.Fatalf("delivered %d events, want the 5 before the fence", n)
	}
	// Saves run beside deliveries, one at a time: one may have passed the
	// fence before it was lost, and no other.
	if n := store.saves.Load(); n > savesAtFence+1 {
		t.Fatalf("%d checkpoint saves after the fence", n-savesAtFence)
	}
}

// Cancelled with a fenced cause, a pipeline whose sink is down stops at once:
// no drain (DrainTimeout is a minute here), no final save.
func TestAFencedCancelSkipsTheDrain(t *testing.T) {
	s := &scriptSink{fail: func(string, int) error { return errors.New("down") }}
	store := &countingStore{}
	p, err := New(Config{Name: "x", Sink: s, Store: store, Start: event.Position{File: "b.1", Pos: 4}, DrainTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, &fakeSource{Txns: txns(3, 1)}) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s.mu.Lock()
		n := s.attempts["e0"]
		s.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no write attempt")
		}
	}
	saves := store.saves.Load()
	cancel(fmt.Errorf("lost the lock: %w", checkpoint.ErrFenced))
	select {
	case err := <-done:
		if !errors.Is(err, checkpoint.ErrFenced) {
			t.Fatalf("Run = %v, want ErrFenced", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a fenced pipeline drained instead of stopping")
	}
	if n := store.saves.Load(); n != saves {
		t.Fatalf("%d saves after the fence", n-saves)
	}
}

// stepSource hands out its transactions one by one: each only after next
// returns, so a test decides what is queued when.
type stepSource struct {
	txns []*event.Txn
	next func(i int) error // called before handing txns[i]
}

func (s *stepSource) Run(ctx context.Context, _ event.Position, handle func(context.Context, *event.Txn) error) error {
	for i, t := range s.txns {
		if err := s.next(i); err != nil {
			return err
		}
		if err := handle(ctx, t); err != nil {
			return err
		}
	}
	if err := s.next(len(s.txns)); err != nil { // after the last
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}

// batchSink records each Write's event ids, and may hold a Write until
// release is closed.
type batchSink struct {
	mu      sync.Mutex
	batches [][]string
	wrote   chan struct{} // one send per Write, when it starts
	release chan struct{} // nil: never held
}

func (s *batchSink) Connect(context.Context) error { return nil }
func (s *batchSink) Close(context.Context) error   { return nil }
func (s *batchSink) Write(ctx context.Context, batch []*event.Event) error {
	var ids []string
	for _, e := range batch {
		ids = append(ids, e.ID)
	}
	s.mu.Lock()
	s.batches = append(s.batches, ids)
	s.mu.Unlock()
	s.wrote <- struct{}{}
	if s.release != nil {
		select {
		case <-s.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (s *batchSink) got() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]string(nil), s.batches...)
}

// stoppedClock is a clock whose timers never fire: a batch that waited for
// its linger would wait for ever.
func stoppedClock(t *testing.T, calls *atomic.Int32) func(time.Duration) <-chan time.Time {
	return func(d time.Duration) <-chan time.Time {
		calls.Add(1)
		return nil
	}
}

func TestLingerZeroSendsAnEventOnAnIdlePipelineAtOnce(t *testing.T) {
	s := &batchSink{wrote: make(chan struct{}, 16)}
	p, err := New(Config{Name: "t", Sink: s, Store: &memStore{}, Start: event.Position{File: "b.1", Pos: 4}, Linger: 0})
	if err != nil {
		t.Fatal(err)
	}
	var timers atomic.Int32
	p.after = stoppedClock(t, &timers)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := &stepSource{txns: txns(3, 1), next: func(i int) error {
		if i == 0 || i == 3 {
			return nil
		}
		// Event i is handed only once event i-1 reached the sink: with a
		// linger on a clock that never fires, it never would.
		select {
		case <-s.wrote:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(30 * time.Second):
			return errors.New("the previous event was not sent while the pipeline was idle")
		}
	}}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, src) }()
	eventually.Within(t, 30*time.Second, "three batches written", func() bool { return len(s.got()) == 3 })
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	for i, b := range s.got() {
		if len(b) != 1 {
			t.Errorf("batch %d = %v, want one event each", i, b)
		}
	}
	if n := timers.Load(); n != 0 {
		t.Errorf("linger timers started: %d, want none", n)
	}
}

func TestLingerZeroFillsBatchesFromTheQueueUnderLoad(t *testing.T) {
	s := &batchSink{wrote: make(chan struct{}, 16), release: make(chan struct{})}
	p, err := New(Config{Name: "t", Sink: s, Store: &memStore{}, Start: event.Position{File: "b.1", Pos: 4}, BatchSize: 50})
	if err != nil {
		t.Fatal(err)
	}
	var timers atomic.Int32
	p.after = stoppedClock(t, &timers)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// One event, then 5 transactions of 10 that queue (exactly the queue's
	// room: BatchSize) while the first Write is held, then 3 more.
	all := []*event.Txn{{Position: event.Position{File: "b.1", Pos: 10}, Events: []*event.Event{{ID: "first", AggregateID: "a", Payload: []byte("{}")}}}}
	for i, tx := range txns(8, 10) {
		tx.Position.Pos = uint32(11 + i)
		all = append(all, tx)
	}
	src := &stepSource{txns: all, next: func(i int) error {
		switch i {
		case 1:
			<-s.wrote // the first event is being written, alone
		case 6:
			close(s.release) // 50 events are queued behind it
		}
		return nil
	}}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, src) }()
	eventually.Within(t, 30*time.Second, "every event written", func() bool {
		n := 0
		for _, b := range s.got() {
			n += len(b)
		}
		return n == 81
	})
	cancel()
	<-done
	var sizes []int
	for _, b := range s.got() {
		sizes = append(sizes, len(b))
	}
	if len(sizes) < 3 || sizes[0] != 1 || sizes[1] != 50 {
		t.Errorf("batch sizes %v, want 1 (idle), then 50 (the queue, a full batch), then the rest", sizes)
	}
	if n := timers.Load(); n != 0 {
		t.Errorf("linger timers started: %d, want none", n)
	}
}

func TestLingerWaitsForABatchToFillOnlyWhenSet(t *testing.T) {
	s := &batchSink{wrote: make(chan struct{}, 16)}
	p, err := New(Config{Name: "t", Sink: s, Store: &memStore{}, Start: event.Position{File: "b.1", Pos: 4}, Linger: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	fire := make(chan time.Time)
	var asked atomic.Int32
	p.after = func(d time.Duration) <-chan time.Time {
		if d != time.Hour {
			t.Errorf("linger %s, want 1h", d)
		}
		asked.Add(1)
		return fire
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := &stepSource{txns: txns(2, 1), next: func(i int) error {
		switch i {
		case 1:
			eventually.Within(t, 30*time.Second, "the first ask", func() bool { return asked.Load() == 1 }) // the batch of event 0 lingers
		case 2:
			fire <- time.Now() // event 1 is queued: the linger ends
		}
		return nil
	}}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, src) }()
	eventually.Within(t, 30*time.Second, "one batch written", func() bool { return len(s.got()) == 1 })
	cancel()
	<-done
	if got := s.got(); len(got) != 1 || len(got[0]) != 2 {
		t.Errorf("batches %v, want the two events in one batch", got)
	}
}

// refusingSink's Connect fails until open is set; then it is a scriptSink.
type refusingSink struct {
	scriptSink
	open     atomic.Bool
	connects atomic.Int32
}

func (s *refusingSink) Connect(context.Context) error {
	s.connects.Add(1)
	if !s.open.Load() {
		return errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	}
	return nil
}

// connectObserver records the sink connect results the pipeline reports.
type connectObserver struct {
	nopObserver
	mu   sync.Mutex
	errs []error
}

func (o *connectObserver) SinkConnected(err error) {
	o.mu.Lock()
	o.errs = append(o.errs, err)
	o.mu.Unlock()
}

// A sink that is down at start does not keep the binlog stream closed: the
// source is read (its transactions wait in flight, as behind a sink that
// went down later) while the sink's connect attempts fail, each reported
// with its error, and everything is delivered once the sink is up.
func TestASinkDownAtStartDoesNotKeepTheStreamClosed(t *testing.T) {
	s := &refusingSink{}
	obs := &connectObserver{}
	src := &fakeSource{Txns: txns(3, 2)}
	var read atomic.Int32
	counting := sourceFunc(func(ctx context.Context, from event.Position, handle func(context.Context, *event.Txn) error) error {
		return src.Run(ctx, from, func(ctx context.Context, txn *event.Txn) error {
			read.Add(1)
			return handle(ctx, txn)
		})
	})
	err := run(t, Config{Name: "s", Sink: s, Store: &memStore{}, Start: event.Position{File: "b.1", Pos: 4}, Observer: obs,
		Retry: retry.Policy{Initial: time.Millisecond, Max: 10 * time.Millisecond}},
		counting, func() bool {
			if read.Load() == 3 && s.connects.Load() >= 2 {
				s.open.Store(true)
			}
			return len(s.got()) == 6
		})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	if got := s.got(); len(got) != 6 {
		t.Fatalf("delivered %v, want 6 events once the sink connected", got)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if n := len(obs.errs); n < 3 || obs.errs[0] == nil || !strings.Contains(obs.errs[0].Error(), "connection refused") || obs.errs[n-1] != nil {
		t.Fatalf("SinkConnected saw %v, want the refusals and then nil", obs.errs)
	}
}

type sourceFunc func(ctx context.Context, from event.Position, handle func(context.Context, *event.Txn) error) error

func (f sourceFunc) Run(ctx context.Context, from event.Position, handle func(context.Context, *event.Txn) error) error {
	return f(ctx, from, handle)
}
