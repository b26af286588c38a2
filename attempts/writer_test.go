package attempts

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/eventually"
)

func openFile(t *testing.T) *File {
	t.Helper()
	st, err := OpenFile(filepath.Join(t.TempDir(), "a"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func attemptN(i int) Attempt {
	return Attempt{Time: time.Now(), Sink: "wh", Endpoint: "ep", EventID: fmt.Sprint("e", i), Number: 1, Status: 200, Outcome: OutcomeDelivered}
}

// What is recorded reaches the store in batches, and Close stores what is
// still queued.
func TestWriterStoresInBatchesAndCloseFlushes(t *testing.T) {
	st := &countingStore{Store: openFile(t)}
	m := newMetrics()
	// An interval no test waits out: only a full batch or Close writes.
	w := NewWriter(st, WriterOptions{BatchSize: 10, Interval: time.Hour, Metrics: m})
	for i := range 25 {
		w.Record(attemptN(i))
	}
	eventually.Within(t, 10*time.Second, "two full batches stored", func() bool { return st.appended() == 20 })
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs, err := st.Search(context.Background(), Query{Limit: 100})
	if err != nil || len(recs) != 25 {
		t.Fatalf("%d stored, %v; want 25", len(recs), err)
	}
	if recs[0].EventID != "e24" || recs[24].EventID != "e0" {
		t.Errorf("order: newest %s, oldest %s", recs[0].EventID, recs[24].EventID)
	}
	if got := st.batches(); got[0] != 10 || got[1] != 10 || got[2] != 5 {
		t.Errorf("batches %v, want [10 10 5]", got)
	}
	if got := testutil.ToFloat64(m.recorded); got != 25 {
		t.Errorf("recorded_total %v, want 25", got)
	}
	w.Record(attemptN(99)) // after Close: dropped, never a panic
}

// A record whose store is stuck takes Queue attempts and drops the rest,
// counted; Record never waits for the store: this test calls it from its
// own goroutine while the store's Append is held, so a Record that blocked
// would hang it.
func TestWriterDropsAndCountsWhenTheStoreFallsBehind(t *testing.T) {
	st := &countingStore{Store: openFile(t), hold: make(chan struct{}), entered: make(chan struct{}, 1)}
	m := newMetrics()
	const queue = 8
	w := NewWriter(st, WriterOptions{Queue: queue, BatchSize: 1, Interval: time.Hour, Metrics: m})
	w.Record(attemptN(0))
	<-st.entered // the Writer holds attempt 0 in a held Append: its queue is empty
	for i := 1; i <= queue+100; i++ {
		w.Record(attemptN(i))
	}
	if got := testutil.ToFloat64(m.queueFull); got != 100 {
		t.Errorf("dropped (queue_full) %v, want 100", got)
	}
	close(st.hold)
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.recorded); got != queue+1 {
		t.Errorf("recorded %v, want %d", got, queue+1)
	}
}

// A store that fails a batch loses that batch only, counted; the record
// goes on.
func TestWriterCountsAFailedWriteAndGoesOn(t *testing.T) {
	st := &countingStore{Store: openFile(t), failNext: 1}
	m := newMetrics()
	w := NewWriter(st, WriterOptions{BatchSize: 3, Interval: time.Hour, Metrics: m})
	for i := range 6 {
		w.Record(attemptN(i))
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e, d, r := testutil.ToFloat64(m.writeErrors), testutil.ToFloat64(m.writeFailed), testutil.ToFloat64(m.recorded); e != 1 || d != 3 || r != 3 {
		t.Errorf("write errors %v, dropped (write_failed) %v, recorded %v; want 1, 3, 3", e, d, r)
	}
}

// The retention is applied when the Writer starts and then every
// PruneEvery: by age and by count.
func TestWriterAppliesTheRetention(t *testing.T) {
	st := openFile(t)
	ctx := context.Background()
	old := attemptN(0)
	old.Time = time.Now().Add(-48 * time.Hour)
	if err := st.Append(ctx, []Attempt{old, attemptN(1), attemptN(2)}); err != nil {
		t.Fatal(err)
	}
	m := newMetrics()
	w := NewWriter(st, WriterOptions{MaxAge: 24 * time.Hour, MaxRows: 4, PruneEvery: 10 * time.Millisecond, Interval: time.Millisecond, Metrics: m})
	defer w.Close(ctx)
	eventually.Within(t, 10*time.Second, "the attempt older than max_age pruned", func() bool {
		recs, _ := st.Search(ctx, Query{EventID: "e0"})
		return len(recs) == 0
	})
	for i := 3; i < 10; i++ {
		w.Record(attemptN(i))
	}
	eventually.Within(t, 10*time.Second, "the record cut to max_rows, the newest kept", func() bool {
		recs, _ := st.Search(ctx, Query{})
		return len(recs) == 4 && recs[0].EventID == "e9" && recs[3].EventID == "e6"
	})
	eventually.Within(t, 10*time.Second, "pruned_total 6", func() bool { return testutil.ToFloat64(m.pruneCount) == 6 })
}

// countingStore wraps a Store: it notes each Append's size, can hold
// Appends until hold is closed (telling entered first), and fail the
// next failNext ones.
type countingStore struct {
	Store
	hold     chan struct{}
	entered  chan struct{}
	mu       sync.Mutex
	sizes    []int
	failNext int
}

func (c *countingStore) Append(ctx context.Context, batch []Attempt) error {
	if c.entered != nil {
		select {
		case c.entered <- struct{}{}:
		default:
		}
	}
	if c.hold != nil {
		<-c.hold
	}
	c.mu.Lock()
	c.sizes = append(c.sizes, len(batch))
	fail := c.failNext > 0
	c.failNext--
	c.mu.Unlock()
	if fail {
		return errors.New("the store refuses")
	}
	return c.Store.Append(ctx, batch)
}

func (c *countingStore) batches() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.sizes...)
}

func (c *countingStore) appended() int {
	n := 0
	for _, s := range c.batches() {
		n += s
	}
	return n
}
