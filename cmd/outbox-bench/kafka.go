package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The Kafka rows are counted at the broker, as a user of the topic would
// see them: the bench polls the sum of the topic's partitions' high
// watermarks (a ListOffsets request for the latest offset of each) every
// watermarkEvery. With acks=all and one broker the high watermark moves
// when a batch is appended, so the sum is the records the relay has had
// acknowledged. The polls cost the broker one small request each, ~200 a
// second, against the thousands of produce requests of a drain.

// benchTopic is the topic of the Kafka rows and of the live phase.
const benchTopic = "outbox.bench"

// watermarkEvery is how often the Kafka rows' count is read.
const watermarkEvery = 5 * time.Millisecond

// topicEnds reads the sum of one topic's high watermarks on a broker.
type topicEnds struct {
	cl         *kgo.Client
	topic      string
	partitions int32
}

func newTopicEnds(broker, topic string, partitions int) (*topicEnds, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		return nil, err
	}
	return &topicEnds{cl: cl, topic: topic, partitions: int32(partitions)}, nil
}

func (t *topicEnds) close() { t.cl.Close() }

// sum returns the sum of the topic's partitions' high watermarks.
func (t *topicEnds) sum(ctx context.Context) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = t.topic
	for p := range t.partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p
		rp.Timestamp = -1 // the latest offset: the high watermark
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, t.cl)
	if err != nil {
		return 0, err
	}
	var total int64
	seen := 0
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return 0, fmt.Errorf("%s[%d]: %w", rt.Topic, rp.Partition, err)
			}
			total += rp.Offset
			seen++
		}
	}
	if seen != int(t.partitions) {
		return 0, fmt.Errorf("%s: %d of %d partitions answered", t.topic, seen, t.partitions)
	}
	return total, nil
}

// count feeds c with the records appended to the topic from now on (the
// sum of its high watermarks less the sum now: rows sharing a broker count
// only their own), polled every watermarkEvery until c has all it wants or
// stop is called.
func (t *topicEnds) count(c *counter) (stop func(), err error) {
	ctx, cancel := context.WithCancel(context.Background())
	base, err := t.sum(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(watermarkEvery)
		defer tick.Stop()
		var counted int64
		for {
			select {
			case <-ctx.Done():
				return
			case <-c.done:
				return
			case <-tick.C:
			}
			// A failed poll (the broker busy past the deadline) is
			// retried at the next tick; the relay's own failure ends
			// the row in runBinary.
			s, err := t.sum(ctx)
			if err != nil {
				continue
			}
			if got := s - base; got > counted {
				c.add(got-counted, time.Now())
				counted = got
			}
		}
	})
	return func() { cancel(); wg.Wait() }, nil
}
