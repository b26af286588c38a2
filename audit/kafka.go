package audit

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outbox-relay/outbox-relay/sink/kafka"
)

// Kafka audits a kafka sink: it reads every topic the range's events route
// to, from the offsets of the range's first commit time (a second earlier:
// commit times have whole seconds; a record's timestamp is its commit
// time) to the topics' ends when the read begins, and matches records to
// events by their "id" header.
func Kafka(ctx context.Context, idx *Index, name string, brokers []string, rb *kafka.ReadBack) (Report, error) {
	r := idx.Report
	r.Sink = name
	r.Duplicates = map[string]int{}
	if len(idx.Events) == 0 {
		return r, nil
	}
	topicSet := map[string]bool{}
	for _, e := range idx.Events {
		topicSet[e.Topic] = true
	}
	topics := slices.Sorted(func(yield func(string) bool) {
		for t := range topicSet {
			if !yield(t) {
				return
			}
		}
	})
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}
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
		return r, fmt.Errorf("kafka.sasl.mechanism %q cannot be used to read back", rb.SASLMechanism)
	}
	admCl, err := kgo.NewClient(opts...)
	if err != nil {
		return r, err
	}
	adm := kadm.NewClient(admCl)
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		admCl.Close()
		return r, fmt.Errorf("list the end offsets of %v: %w", topics, err)
	}
	from := idx.Report.First.Add(-time.Second).UnixMilli()
	starts, err := adm.ListOffsetsAfterMilli(ctx, from, topics...)
	if err == nil {
		err = starts.Error()
	}
	admCl.Close()
	if err != nil {
		return r, fmt.Errorf("list the offsets of %v at %s: %w", topics, idx.Report.First, err)
	}
	consume := map[string]map[int32]kgo.Offset{}
	remaining := map[string]map[int32]int64{} // the end offset still to reach
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
	})
	seen := map[string]int{}
	lastSeq := map[string]int{} // aggregate → the latest first-delivered event's Seq
	first, last := idx.Report.First.Truncate(time.Second), idx.Report.Last.Truncate(time.Second)
	left := 0
	for _, ps := range remaining {
		left += len(ps)
	}
	if left > 0 {
		cl, err := kgo.NewClient(append(opts, kgo.ConsumePartitions(consume))...)
		if err != nil {
			return r, err
		}
		defer cl.Close()
		for left > 0 {
			fs := cl.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				return r, err
			}
			var ferr error
			fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("read %s[%d]: %w", t, p, err) })
			if ferr != nil {
				return r, ferr
			}
			fs.EachRecord(func(rec *kgo.Record) {
				end, ok := remaining[rec.Topic][rec.Partition]
				if !ok {
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
				e, ok := idx.Events[id]
				if !ok {
					ts := rec.Timestamp.Truncate(time.Second)
					if gtid != "" && idx.GTIDs[gtid] || gtid == "" && ts.After(first) && ts.Before(last) {
						r.Unexpected = append(r.Unexpected, fmt.Sprintf("%s (%s[%d]@%d)", id, rec.Topic, rec.Partition, rec.Offset))
					}
					return
				}
				seen[id]++
				if seen[id] > 1 {
					return
				}
				if prev := lastSeq[e.AggregateID]; e.Seq < prev {
					r.Order = append(r.Order, fmt.Sprintf("aggregate %s: event %s (binlog #%d) first delivered after #%d (%s[%d]@%d)", e.AggregateID, id, e.Seq, prev, rec.Topic, rec.Partition, rec.Offset))
				} else {
					lastSeq[e.AggregateID] = e.Seq
				}
			})
		}
	}
	for _, e := range idx.sorted() {
		switch n := seen[e.ID]; {
		case n == 0:
			r.Missing = append(r.Missing, Missing{*e, "not in topic " + e.Topic})
		case n > 1:
			r.Duplicates[e.ID] = n
		}
	}
	return r, nil
}
