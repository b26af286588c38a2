package gateway

import (
	"fmt"
	"path"
	"sync/atomic"
	"testing"

	"github.com/outbox-relay/outbox-relay/event"
)

// The hub files a tap whose filter names its aggregate types under those
// types: an event is offered to the taps of its type only, so that with a
// thousand endpoints routing costs per event, not per endpoint per event.
func TestHubAsksOnlyTheTapsOfAnEventsAggregateType(t *testing.T) {
	h := NewHub(HubConfig{Name: "hook", Flavor: "mariadb", Start: pos(0)})
	const n = 100
	var asked atomic.Int64
	taps := make([]*Tap, n)
	h.Lock()
	for i := range taps {
		at := fmt.Sprintf("t%03d", i)
		taps[i] = h.Tap(fmt.Sprintf("ep%d", i), Filter{AggregateTypes: []string{at}, Match: func(e *event.Event) bool {
			asked.Add(1)
			return e.AggregateType == at && e.Type != "skipped"
		}})
		h.attachLocked(taps[i], pos(0))
	}
	h.Unlock()
	txn := &event.Txn{Position: pos(1)}
	for i := range n {
		typ := "order.created"
		if i%10 == 0 {
			typ = "skipped" // the tap's Match still decides
		}
		txn.Events = append(txn.Events, &event.Event{ID: fmt.Sprint(i), AggregateType: fmt.Sprintf("t%03d", i), Type: typ})
	}
	txn.Events = append(txn.Events, &event.Event{ID: "nobody's", AggregateType: "other"})
	h.dispatch(txn, nil)

	if got := asked.Load(); got != n {
		t.Errorf("the taps were asked %d times about %d events, want %d (each event only of the tap of its type)", got, n+1, n)
	}
	for i, tp := range taps {
		var got []string
		for txn := tp.queue.pop(); txn != nil; txn = tp.queue.pop() {
			for _, e := range txn.Events {
				got = append(got, e.ID)
			}
		}
		want := []string{fmt.Sprint(i)}
		if i%10 == 0 {
			want = nil
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("tap %d got events %v, want %v", i, got, want)
		}
	}

	// Taken off the stream, a tap is in no index.
	h.Lock()
	for _, tp := range taps {
		h.RemoveLocked(tp)
	}
	h.Unlock()
	if len(h.byType) != 0 || len(h.plain) != 0 {
		t.Errorf("after every tap was removed the hub still indexes %d types and %d plain taps", len(h.byType), len(h.plain))
	}
}

// BenchmarkHubDispatch hands transactions of 10 events, each of another of
// 1,000 aggregate types, to 1,000 taps each selecting one type (the bench
// tool's gateway row): routed by type, or asked about every event (a glob
// filter, and every exact one before they were routed). One op is one
// transaction; the taps' queues are emptied as they fill.
func BenchmarkHubDispatch(b *testing.B) {
	for _, routed := range []bool{true, false} {
		b.Run(fmt.Sprintf("routed=%v", routed), func(b *testing.B) {
			const n = 1000
			h := NewHub(HubConfig{Name: "hook", Flavor: "mariadb", Start: pos(0), QueueTxns: 16})
			taps := make([]*Tap, n)
			h.Lock()
			for i := range taps {
				at := fmt.Sprintf("t%03d", i)
				f := Filter{Match: func(e *event.Event) bool { ok, _ := path.Match(at, e.AggregateType); return ok }}
				if routed {
					f.AggregateTypes = []string{at}
				}
				taps[i] = h.Tap(at, f)
				h.attachLocked(taps[i], pos(0))
			}
			h.Unlock()
			txns := make([]*event.Txn, 100)
			for i := range txns {
				txns[i] = &event.Txn{Position: pos(i + 1)}
				for k := range 10 {
					txns[i].Events = append(txns[i].Events, &event.Event{ID: fmt.Sprint(i*10 + k), AggregateType: fmt.Sprintf("t%03d", (i*10+k)%n)})
				}
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				h.dispatch(txns[i%len(txns)], nil)
				if i%len(txns) == len(txns)-1 {
					for _, t := range taps {
						for t.queue.pop() != nil {
						}
					}
				}
			}
		})
	}
}
