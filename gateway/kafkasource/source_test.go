package kafkasource

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/event"
)

// A stream that starts at a cursor whose records the topic's retention
// deleted (an endpoint that did not run for longer than retention.ms)
// says so: it counts them (Expired) and starts at the partition's first
// record, instead of waiting at the gone offset or skipping it quietly.
func TestSourceCountsRecordsDeletedBeforeItsStart(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 20 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "ev-%02d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var o kadm.Offsets
	o.AddOffset("orders", 0, 10, -1)
	dr, err := kadm.NewClient(cl).DeleteRecords(ctx, o)
	if err == nil {
		err = dr.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	var expired int64
	var got []string
	done := errors.New("read to the end")
	s := &Source{Brokers: c.ListenAddrs(), Topic: "orders", Partition: 0,
		Decode:  func(m kafkago.Message) (*event.Event, error) { return &event.Event{ID: string(m.Value)}, nil },
		Expired: func(n int64) { expired += n }}
	err = s.Run(ctx, Position("orders", 0, 3), func(_ context.Context, txn *event.Txn) error {
		got = append(got, txn.Events[0].ID)
		if txn.Position == Position("orders", 0, 20) {
			return done
		}
		return nil
	})
	if !errors.Is(err, done) {
		t.Fatalf("Run: %v (read %v)", err, got)
	}
	if expired != 7 || len(got) != 10 || got[0] != "ev-10" {
		t.Fatalf("from offset 3 with records 0 to 9 deleted: %d counted gone, read %v; want 7 gone, then ev-10 to ev-19", expired, got)
	}
}
