package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"syscall"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/sink"
)

// produceTransactional commits records to topic with a transactional
// producer (its own client, over TCP), so that the partition's last
// offset is the transaction's commit marker, a control record.
func produceTransactional(t *testing.T, brokers []string, topic string, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("txn-"+t.Name()),
		kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
}

// A partition whose last offset is a transaction's commit marker (a
// transactional producer wrote to the topic) is read back past the marker;
// before, the read stopped there with a plain error, which the pipeline
// retried for ever.
func TestRecoverReadsPastATransactionMarker(t *testing.T) {
	cl := startCluster(t, kfake.SeedTopics(1, "orders"))
	cfg := Config{Brokers: cl.ListenAddrs(), Topic: "orders", Writer: "orders-sink"}
	s := newSink(t, cfg)
	evs := gtidEvents(0, 40, 4, mysqlGTID) // transactions 1..20
	write(t, s, evs[:39])
	// The last event reaches the topic through a transactional producer, as
	// the sink writes it: the topic ends with its commit marker.
	m, err := s.message(evs[39])
	if err != nil {
		t.Fatal(err)
	}
	rec := &kgo.Record{Key: m.Key, Value: m.Value, Timestamp: m.Time}
	for _, h := range s.withWriter(m.Headers, 1) {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	produceTransactional(t, cl.ListenAddrs(), "orders", rec)

	restarted := newSink(t, cfg)
	got, err := recoverIDs(t, restarted, recoverUUID+":1-10", evs)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if want := idsOf(evs[20:]); !slices.Equal(got, want) {
		t.Fatalf("Recover reported %v, want %v", got, want)
	}
	// The audit reads the same way: every message, none of the markers.
	a, err := NewAuditor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	n := 0
	err = a.ReadBack(context.Background(), time.Unix(0, 0), []string{"orders"}, func(st sink.Stored) error {
		n++
		return nil
	})
	if err != nil || n != len(evs) {
		t.Fatalf("audit read %d messages, %v; want %d", n, err, len(evs))
	}
}

// A read-back error the sink does not expect is ErrCannotRecover (the
// restart falls back, loudly); failures to reach the brokers are retried.
func TestReadBackErrorsFallBackUnlessRetriable(t *testing.T) {
	for _, c := range []struct {
		name     string
		err      error
		fallBack bool
	}{
		{"an answer the read does not expect", errors.New("the broker returned no record before the high watermark 42"), true},
		{"a broker error that retrying cannot fix", fmt.Errorf("read: %w", kafkago.TopicAuthorizationFailed), true},
		{"a leader change", fmt.Errorf("read: %w", kafkago.NotLeaderForPartition), false},
		{"a refused connection", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, false},
		{"a connection closed mid-answer", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), false},
		{"the context ended", context.Canceled, false},
	} {
		err := readBackError(c.err)
		if got := errors.Is(err, sink.ErrCannotRecover); got != c.fallBack || !errors.Is(err, c.err) {
			t.Errorf("%s: %v: falls back %v, want %v", c.name, err, got, c.fallBack)
		}
	}
}
