package kafka

import (
	"context"
	"io"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/twmb/franz-go/pkg/kfake"
)

// BenchmarkPrepare is the sink's own work per event before kafka-go
// encodes it: rendering topic and key, the headers, the queue entry. A
// batch is 100 events, as the pipeline hands them over under load.
func BenchmarkPrepare(b *testing.B) {
	c := startCluster(b, kfake.SeedTopics(6, "bench"))
	s, err := New(Config{Brokers: c.ListenAddrs(), Topic: "bench", Writer: "kafka"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Connect(ctx); err != nil {
		b.Fatal(err)
	}
	defer s.Close(ctx)
	evs := makeEvents(100, 50)
	ack := func(int, error) {}
	b.ReportAllocs()
	for b.Loop() {
		if got := s.prepare(ctx, evs, ack, false); len(got) != len(evs) {
			b.Fatalf("prepared %d of %d", len(got), len(evs))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
}

// BenchmarkEncodeBatch is the encoding of one produce request's record
// batch of 100 messages: the sink's own encoder (sink) against kafka-go's
// (kafka-go: what Client.Produce ran before, records read through a
// RecordReader into its paged buffer).
func BenchmarkEncodeBatch(b *testing.B) {
	ps := benchMessages(b, 100)
	msgs := make([]kafkago.Message, len(ps))
	for i, p := range ps {
		msgs[i] = p.rec.message()
	}
	now := time.Now()
	b.Run("sink", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := encodeBatch(nil, ps, nil, now); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ps)), "ns/event")
	})
	b.Run("kafka-go", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rs := protocol.RecordSet{Version: 2, Records: &kafkaGoRecords{msgs: msgs}}
			if _, err := rs.WriteTo(io.Discard); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ps)), "ns/event")
	})
}

// kafkaGoRecords is how the sink handed a batch to kafka-go's
// Client.Produce before it encoded batches itself: its messages as
// records, without copying them.
type kafkaGoRecords struct {
	msgs       []kafkago.Message
	i          int
	rec        kafkago.Record
	key, value bytesReader
}

func (r *kafkaGoRecords) ReadRecord() (*kafkago.Record, error) {
	if r.i >= len(r.msgs) {
		return nil, io.EOF
	}
	m := &r.msgs[r.i]
	r.i++
	r.rec = kafkago.Record{Time: m.Time, Headers: m.Headers}
	if m.Key != nil {
		r.key.reset(m.Key)
		r.rec.Key = &r.key
	}
	if m.Value != nil {
		r.value.reset(m.Value)
		r.rec.Value = &r.value
	}
	return &r.rec, nil
}

type bytesReader struct {
	b   []byte
	off int
}

func (b *bytesReader) reset(p []byte) { b.b, b.off = p, 0 }
func (b *bytesReader) Len() int       { return len(b.b) - b.off }
func (b *bytesReader) Close() error   { return nil }
func (b *bytesReader) Read(p []byte) (int, error) {
	if b.off >= len(b.b) {
		return 0, io.EOF
	}
	n := copy(p, b.b[b.off:])
	b.off += n
	return n, nil
}

// benchMessages returns n queued messages as prepare builds them, for a
// topic of 6 partitions, without a broker.
func benchMessages(b *testing.B, n int) []*pending {
	s, err := New(Config{Brokers: []string{"127.0.0.1:9"}, Topic: "bench", Writer: "kafka"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	evs := makeEvents(n, 50)
	buf := make([]byte, 0, batchHeadersLen(evs))
	ps := make([]*pending, n)
	for i, e := range evs {
		r, err := s.build(e, "bench", 6, &buf)
		if err != nil {
			b.Fatal(err)
		}
		ps[i] = &pending{ev: e, rec: r, size: r.size()}
	}
	return ps
}
