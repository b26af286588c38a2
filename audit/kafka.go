package audit

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outbox-relay/outbox-relay/sink/kafka"
)

// Fetch sizes of the Kafka read-back: what the client may buffer.
const (
	kafkaFetchBytes          = 4 << 20
	kafkaFetchPartitionBytes = 1 << 20
)

// Kafka reads back a kafka sink's topics into c: every partition of each
// topic, from the offsets of the span's first commit time (a second
// earlier: commit times have whole seconds; a record's timestamp is its
// commit time) to the partition's end when the read begins. Records are
// matched by their "id" header and claim the range by their "gtid" header.
// Each partition is a Log ("topic[p]"), in offset order.
func Kafka(ctx context.Context, c *Comparison, span *Span, topics []string, brokers []string, rb *kafka.ReadBack) error {
	if span.Events == 0 || len(topics) == 0 {
		return nil
	}
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.FetchMaxBytes(kafkaFetchBytes), kgo.FetchMaxPartitionBytes(kafkaFetchPartitionBytes)}
	if rb.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(rb.TLS))
	}
	switch rb.SASLMechanism {
	case "":
	case "plain":
		opts = append(opts, kgo.SASL(plain.Auth{User: rb.SASLUser, Pass: rb.SASLPassword}.AsMechanism()))
	case "scram-sha-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: rb.SASLUser, Pass: rb.SASLPassword}.AsSha256Mechanism()))
	case "scram-sha-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: rb.SASLUser, Pass: rb.SASLPassword}.AsSha512Mechanism()))
	default:
		return fmt.Errorf("kafka.sasl.mechanism %q cannot be used to read back", rb.SASLMechanism)
	}
	admCl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	adm := kadm.NewClient(admCl)
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		admCl.Close()
		return fmt.Errorf("list the end offsets of %v: %w", topics, err)
	}
	from := span.First.Add(-time.Second).UnixMilli()
	starts, err := adm.ListOffsetsAfterMilli(ctx, from, topics...)
	if err == nil {
		err = starts.Error()
	}
	admCl.Close()
	if err != nil {
		return fmt.Errorf("list the offsets of %v at %s: %w", topics, span.First, err)
	}
	consume := map[string]map[int32]kgo.Offset{}
	remaining := map[string]map[int32]int64{} // the end offset still to reach
	left := 0
	starts.Each(func(o kadm.ListedOffset) {
		end, ok := ends.Lookup(o.Topic, o.Partition)
		if !ok || o.Offset < 0 || o.Offset >= end.Offset {
			return
		}
		if consume[o.Topic] == nil {
			consume[o.Topic], remaining[o.Topic] = map[int32]kgo.Offset{}, map[int32]int64{}
		}
		consume[o.Topic][o.Partition] = kgo.NewOffset().At(o.Offset)
		remaining[o.Topic][o.Partition] = end.Offset
		left++
	})
	if left == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumePartitions(consume))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("read %s[%d]: %w", t, p, err) })
		if ferr != nil {
			return ferr
		}
		var derr error
		fs.EachRecord(func(rec *kgo.Record) {
			end, ok := remaining[rec.Topic][rec.Partition]
			if !ok || derr != nil {
				return
			}
			if rec.Offset+1 >= end {
				delete(remaining[rec.Topic], rec.Partition)
				left--
			}
			if rec.Offset >= end {
				return
			}
			var id, gtid string
			for _, h := range rec.Headers {
				switch h.Key {
				case "id":
					id = string(h.Value)
				case "gtid":
					gtid = string(h.Value)
				}
			}
			derr = c.Deliver(Delivery{ID: id, Log: rec.Topic + "[" + strconv.Itoa(int(rec.Partition)) + "]", Offset: rec.Offset,
				Claims: span.Claims(gtid, rec.Timestamp)})
		})
		if derr != nil {
			return derr
		}
	}
	return nil
}
