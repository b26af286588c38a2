package webhook

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

// Endpoints sharing Slots never have more requests in flight together than
// it holds, each with room for more of its own.
func TestSharedSlotsBoundRequestsAcrossEndpoints(t *testing.T) {
	var now, most atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := now.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(5 * time.Millisecond)
		now.Add(-1)
	}))
	defer srv.Close()
	slots := make(chan struct{}, 3)
	var wg sync.WaitGroup
	for i := range 4 {
		cfg := testConfig(srv.URL)
		cfg.Name, cfg.MaxConcurrency, cfg.Slots = fmt.Sprintf("e%d", i), 8, slots
		e := newEndpoint(t, cfg)
		var batch []*event.Event
		for j := range 16 {
			batch = append(batch, ev(fmt.Sprintf("%d-%d", i, j), fmt.Sprintf("agg-%d", j)))
		}
		wg.Go(func() {
			if err := e.Write(context.Background(), batch); err != nil {
				t.Errorf("endpoint %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m > 3 {
		t.Fatalf("%d requests were in flight at once; the shared slots allow 3 (and 4 endpoints × 8 could use them all)", m)
	}
}
