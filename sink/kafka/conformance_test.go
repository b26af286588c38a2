package kafka_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink/kafka"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
)

// brokerFault answers produce requests with NOT_LEADER_FOR_PARTITION (a
// retriable broker error) while broken.
type brokerFault struct {
	mu     sync.Mutex
	broken bool
	budget int // produce requests let through before breaking; <0 unlimited
}

func (f *brokerFault) Break()         { f.mu.Lock(); f.broken = true; f.mu.Unlock() }
func (f *brokerFault) BreakMidWrite() { f.mu.Lock(); f.budget = 2; f.mu.Unlock() }
func (f *brokerFault) Heal()          { f.mu.Lock(); f.broken, f.budget = false, -1; f.mu.Unlock() }

func (f *brokerFault) control(c *kfake.Cluster) func(kmsg.Request) (kmsg.Response, error, bool) {
	return func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		f.mu.Lock()
		if f.budget == 0 {
			f.broken, f.budget = true, -1
		}
		if f.budget > 0 {
			f.budget--
		}
		broken := f.broken
		f.mu.Unlock()
		if !broken {
			return nil, nil, false
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
	}
}

// readTopic reads topic to its end: every partition up to the end offset
// the broker reports when Read is called, so what the sink had acknowledged
// is all there and a partition the broker lacks is missing from the result
// (a loss the suite reports), not one the read gave up on. n is not a
// stopping point: a destination may hold duplicates. The deadline only
// guards against a hang, and reaching it fails the test, naming the
// partitions not read to their end.
func readTopic(addrs []string, topic string) func(t *testing.T, n int) []sinktest.Received {
	return func(t *testing.T, n int) []sinktest.Received {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		admin, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
		if err != nil {
			t.Fatal(err)
		}
		ends, err := kadm.NewClient(admin).ListEndOffsets(ctx, topic)
		admin.Close()
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			t.Fatalf("list the end offsets of %s: %v", topic, err)
		}
		left := map[int32]int64{} // partition → end offset not yet read to
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset > 0 {
				left[o.Partition] = o.Offset
			}
		})
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		var out []sinktest.Received
		for len(left) > 0 {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("read %d messages of %s in 60s; partitions not read to their end (partition: end offset): %v", len(out), topic, left)
			}
			fs.EachRecord(func(r *kgo.Record) {
				if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
					delete(left, r.Partition)
				}
				h := map[string]string{}
				for _, hd := range r.Headers {
					h[hd.Key] = string(hd.Value)
				}
				pos, _ := strconv.ParseUint(h[kafka.HeaderBinlogPos], 10, 32)
				out = append(out, sinktest.Received{ID: h[kafka.HeaderID], Type: h[kafka.HeaderType],
					AggregateType: h[kafka.HeaderAggregateType], AggregateID: string(r.Key), Table: h[kafka.HeaderTable],
					GTID: h[kafka.HeaderGTID], BinlogFile: h[kafka.HeaderBinlogFile], BinlogPos: uint32(pos),
					Headers: h, TraceParent: h[kafka.HeaderTraceParent], TraceState: h[kafka.HeaderTraceState], Payload: r.Value})
			})
		}
		return out
	}
}

func TestConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{
		Carries: sinktest.All,
		New: func(t *testing.T) *sinktest.Target {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "outbox.event.order"))
			if err != nil {
				t.Fatalf("start kfake: %v", err)
			}
			t.Cleanup(c.Close)
			f := &brokerFault{budget: -1}
			c.ControlKey(int16(kmsg.Produce), f.control(c))
			s, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(), BatchSize: 50, BatchBytes: 8 << 10, Writer: "conformance",
				RequestTimeout: 2 * time.Second}, nil)
			if err != nil {
				t.Fatal(err)
			}
			return &sinktest.Target{Sink: s, Read: readTopic(c.ListenAddrs(), "outbox.event.order"), Fault: f,
				Poison: func(e *event.Event) { e.Payload = []byte(`{"blob":"` + strings.Repeat("x", 9000) + `"}`) }}
		},
		Limits: []sinktest.Limit{
			{Name: "a key over kafka.batch_bytes", Exceed: func(e *event.Event) { e.AggregateID = strings.Repeat("k", 9000) }},
			{Name: "a header over kafka.batch_bytes", Exceed: func(e *event.Event) {
				e.Headers = append(e.Headers, event.Header{Key: "big", Value: strings.Repeat("v", 9000)})
			}},
		},
	})
}
