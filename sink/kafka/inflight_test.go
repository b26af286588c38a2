package kafka

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/retry"
)

// failProduce makes the broker refuse produce requests: each request for
// which fail returns true is answered with a retriable error code for every
// partition in it (nothing is written), or, every other time, by closing the
// connection.
func failProduce(c *kfake.Cluster, fail func(n int) bool) *sync.Map {
	seen := &sync.Map{} // "failed" -> count
	n, failed := 0, 0
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		n++
		if !fail(n) {
			return nil, nil, false
		}
		failed++
		seen.Store("failed", failed)
		if failed%2 == 0 {
			return nil, errors.New("injected: connection closed"), true
		}
		req := kreq.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.NotLeaderForPartition.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return seen
}

// Submit keeps rounds of several batches in flight (one request per
// partition at a time, every partition at once), and a request that fails
// is retried before anything queued behind it on its partition: with
// failures injected between rounds, every key's events reach the topic in
// submit order, and every event is acknowledged.
func TestSubmitKeepsKeyOrderWhenRequestsFailBetweenRounds(t *testing.T) {
	c := startCluster(t, kfake.SeedTopics(4, "orders"))
	s := newSink(t, Config{Brokers: c.ListenAddrs(), Topic: "orders", BatchSize: 7, RequestTimeout: 5 * time.Second,
		Retry: retry.Policy{Initial: time.Millisecond, Max: 5 * time.Millisecond, Probe: 5 * time.Millisecond}})
	seen := failProduce(c, func(n int) bool { return n%3 == 0 && n < 300 }) // one request in three, for a while

	evs := makeEvents(2000, 13)
	var (
		mu    sync.Mutex
		acked = map[string]int{}
		errs  []error
		wg    sync.WaitGroup
	)
	ctx := context.Background()
	for batch := range slices.Chunk(evs, 50) { // 40 batches, submitted without waiting, as the pipeline does
		wg.Add(len(batch))
		s.Submit(ctx, batch, func(i int, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			acked[batch[i].ID]++
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("not every event was acknowledged within a minute")
	}
	if len(errs) > 0 {
		t.Fatalf("%d events failed (Submit retries retriable failures itself): first %v", len(errs), errs[0])
	}
	for _, e := range evs {
		if acked[e.ID] != 1 {
			t.Fatalf("event %s acknowledged %d times, want once", e.ID, acked[e.ID])
		}
	}
	failed, _ := seen.Load("failed")
	if failed == nil || failed.(int) < 10 {
		t.Fatalf("injected failures: %v, want at least 10 (the test would prove nothing)", failed)
	}
	t.Logf("%v produce requests failed and were retried", failed)
	checkOrder(t, evs, consume(t, c.ListenAddrs(), len(evs), "orders"))
}
