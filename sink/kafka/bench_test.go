package kafka

import (
	"context"
	"testing"

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
