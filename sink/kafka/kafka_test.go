package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"os/exec"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
)

// startCluster starts an in-process Kafka-protocol broker on 127.0.0.1.
func startCluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("start kfake broker: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// newSink returns a connected sink; Close is registered as cleanup.
func newSink(t testing.TB, cfg Config) *Sink {
	t.Helper()
	s, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Connect(ctx); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// makeEvents returns n events spread over aggregates aggregates, in order.
// Aggregates with an even number are of type Order, the others of Invoice.
func makeEvents(n, aggregates int) []*event.Event {
	evs := make([]*event.Event, n)
	for i := range evs {
		a := i % aggregates
		typ := "Order"
		if a%2 == 1 {
			typ = "Invoice"
		}
		evs[i] = &event.Event{
			ID:            fmt.Sprintf("ev-%05d", i),
			AggregateType: typ,
			AggregateID:   fmt.Sprintf("agg-%03d", a),
			Type:          strings.ToLower(typ) + ".changed",
			Payload:       fmt.Appendf(nil, `{"seq": %d, "note": "<&>"}`, i),
			Headers:       []event.Header{{Key: "trace_id", Value: fmt.Sprintf("tr-%d", i)}},
			Table:         "shop.outbox",
			CommitTime:    time.Unix(1700000000+int64(i/10), 0),
			Source:        event.Source{GTID: fmt.Sprintf("uuid:%d", i/10+1), File: "binlog.000007", Pos: uint32(4 + i/10*100)},
		}
	}
	return evs
}

type record struct {
	topic     string
	partition int32
	key       string
	value     []byte
	headers   map[string]string
	hdrOrder  []string
}

// consume reads want records from topics from the beginning, failing the test
// if they do not arrive.
func consume(t testing.TB, addrs []string, want int, topics ...string) []record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []record
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d records of %v, want %d", len(out), topics, want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			rec := record{topic: r.Topic, partition: r.Partition, key: string(r.Key), value: r.Value, headers: map[string]string{}}
			for _, h := range r.Headers {
				rec.headers[h.Key] = string(h.Value)
				rec.hdrOrder = append(rec.hdrOrder, h.Key)
			}
			out = append(out, rec)
		})
	}
	return out
}

// checkOrder checks that every event is present and that, per key, events
// first appear in input order (retries may add duplicates, never reorder).
func checkOrder(t testing.TB, evs []*event.Event, got []record) {
	t.Helper()
	wantPerKey := map[string][]string{}
	for _, e := range evs {
		wantPerKey[e.AggregateID] = append(wantPerKey[e.AggregateID], e.ID)
	}
	gotPerKey := map[string][]string{}
	seen := map[string]bool{}
	for _, r := range got {
		id := r.headers["id"]
		if seen[id] {
			continue
		}
		seen[id] = true
		gotPerKey[r.key] = append(gotPerKey[r.key], id)
	}
	for key, want := range wantPerKey {
		if fmt.Sprint(gotPerKey[key]) != fmt.Sprint(want) {
			t.Errorf("key %s: got events %v, want %v", key, gotPerKey[key], want)
		}
	}
	if len(seen) != len(evs) {
		t.Errorf("got %d distinct events, want %d", len(seen), len(evs))
	}
}

// writeUntilAcked writes evs and, as the pipeline does, retries the failed
// ones in order until all are acknowledged.
func writeUntilAcked(t testing.TB, s *Sink, evs []*event.Event) {
	t.Helper()
	pending := evs
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s.Write(ctx, pending)
		cancel()
		if err == nil {
			return
		}
		var failed []*event.Event
		for i, e := range pending {
			if ierr := sink.ErrorFor(err, i); ierr != nil {
				if sink.IsPermanent(ierr) {
					t.Fatalf("event %s failed permanently: %v", e.ID, ierr)
				}
				failed = append(failed, e)
			}
		}
		if attempt == 20 {
			t.Fatalf("%d events still failing after %d attempts: %v", len(failed), attempt, err)
		}
		t.Logf("attempt %d: %d events failed, retrying: %v", attempt, len(failed), err)
		pending = failed
		time.Sleep(250 * time.Millisecond)
	}
}

func TestWriteDeliversABatchInOrder(t *testing.T) {
	c := startCluster(t, kfake.NumBrokers(3))
	s := newSink(t, Config{
		Brokers:      c.ListenAddrs(),
		CreateTopics: CreateTopicsConfig{Enabled: true, Partitions: 6},
		Writer:       "orders-sink",
	})
	evs := makeEvents(2000, 50) // batch_size 1000: two rounds
	if err := s.Write(context.Background(), evs); err != nil {
		t.Fatalf("Write: %v", err)
	}
	got := consume(t, c.ListenAddrs(), len(evs), "outbox.event.Order", "outbox.event.Invoice")
	if len(got) != len(evs) {
		t.Fatalf("consumed %d records, want %d", len(got), len(evs))
	}
	byID := map[string]*event.Event{}
	for _, e := range evs {
		byID[e.ID] = e
	}
	partitionOf := map[string]int32{}
	for _, r := range got {
		e := byID[r.headers["id"]]
		if e == nil {
			t.Fatalf("record with unknown id header %q", r.headers["id"])
		}
		if want := "outbox.event." + e.AggregateType; r.topic != want {
			t.Errorf("event %s: topic %q, want %q", e.ID, r.topic, want)
		}
		if r.key != e.AggregateID {
			t.Errorf("event %s: key %q, want %q", e.ID, r.key, e.AggregateID)
		}
		if !bytes.Equal(r.value, e.Payload) {
			t.Errorf("event %s: value %q, want the payload %q", e.ID, r.value, e.Payload)
		}
		want := map[string]string{
			"id": e.ID, "type": e.Type, "aggregate_type": e.AggregateType, "gtid": e.Source.GTID,
			"binlog_file": e.Source.File, "binlog_pos": fmt.Sprint(e.Source.Pos), "table": e.Table,
			"relay_sink": "orders-sink", "relay_partitions": "6", "trace_id": e.Headers[0].Value,
		}
		if fmt.Sprint(r.headers) != fmt.Sprint(want) {
			t.Errorf("event %s: headers %v, want %v", e.ID, r.headers, want)
		}
		order := []string{"id", "type", "aggregate_type", "gtid", "binlog_file", "binlog_pos", "table", "relay_sink", "relay_partitions", "trace_id"}
		if fmt.Sprint(r.hdrOrder) != fmt.Sprint(order) {
			t.Errorf("event %s: headers in the order %v, want %v", e.ID, r.hdrOrder, order)
		}
		if p, ok := partitionOf[r.key]; ok && p != r.partition {
			t.Errorf("key %s is on partitions %d and %d", r.key, p, r.partition)
		}
		partitionOf[r.key] = r.partition
	}
	checkOrder(t, evs, got)
	used := map[int32]bool{}
	for _, p := range partitionOf {
		used[p] = true
	}
	if len(used) < 2 {
		t.Errorf("50 keys used %d partition(s) of 6; the key hash does not spread", len(used))
	}
}

// freePort returns a port on 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestWriteSurvivesABrokerOutage(t *testing.T) {
	port := freePort(t)
	c1 := startCluster(t, kfake.Ports(port))
	s := newSink(t, Config{
		Brokers:        c1.ListenAddrs(),
		Topic:          "orders",
		RequestTimeout: 2 * time.Second,
		CreateTopics:   CreateTopicsConfig{Enabled: true, Partitions: 4},
	})
	evs := makeEvents(600, 20)
	if err := s.Write(context.Background(), evs[:100]); err != nil {
		t.Fatalf("Write before the outage: %v", err)
	}

	c1.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	err := s.Write(ctx, evs[100:])
	ctxErr := ctx.Err()
	cancel()
	if err == nil {
		t.Fatal("Write with the broker down returned nil")
	}
	if ctxErr != nil {
		t.Fatalf("Write with the broker down waited for the caller's deadline: %v", err)
	}
	for i := range evs[100:] {
		if ierr := sink.ErrorFor(err, i); ierr == nil || sink.IsPermanent(ierr) {
			t.Fatalf("event %d: error %v, want a retriable error", i, ierr)
		}
	}
	t.Logf("Write with the broker down: %v", err)

	// A new, empty broker on the same port: the topic is gone and must be
	// created again.
	var c2 *kfake.Cluster
	for try := 0; ; try++ {
		c2, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port))
		if err == nil {
			break
		}
		if try == 50 {
			t.Fatalf("restart kfake on port %d: %v", port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Cleanup(c2.Close)
	writeUntilAcked(t, s, evs[100:])
	got := consume(t, c2.ListenAddrs(), 500, "orders")
	checkOrder(t, evs[100:], got)
}

func TestARetriableFailureStopsTheLaterRounds(t *testing.T) {
	c := startCluster(t, kfake.SeedTopics(1, "orders"))
	// The broker answers the first produce request with a retriable error.
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
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
	s := newSink(t, Config{Brokers: c.ListenAddrs(), Topic: "orders", BatchSize: 10})
	evs := makeEvents(30, 3) // three rounds, each with every key

	err := s.Write(context.Background(), evs)
	for i := range evs {
		ierr := sink.ErrorFor(err, i)
		if ierr == nil || sink.IsPermanent(ierr) {
			t.Fatalf("event %d: %v, want a retriable failure: the first round failed, so the later ones must not be sent", i, ierr)
		}
		if i < 10 && !errors.Is(ierr, kafkago.NotLeaderForPartition) {
			t.Errorf("event %d: %v, want NotLeaderForPartition", i, ierr)
		}
	}
	writeUntilAcked(t, s, evs)
	checkOrder(t, evs, consume(t, c.ListenAddrs(), len(evs), "orders"))
}

// createTopic creates topic through kafka-go with the given topic configs.
func createTopic(t testing.TB, addr, topic string, partitions int, configs ...kafkago.ConfigEntry) {
	t.Helper()
	cl := &kafkago.Client{Addr: kafkago.TCP(addr), Timeout: 10 * time.Second}
	res, err := cl.CreateTopics(context.Background(), &kafkago.CreateTopicsRequest{Topics: []kafkago.TopicConfig{{
		Topic: topic, NumPartitions: partitions, ReplicationFactor: 1, ConfigEntries: configs,
	}}})
	if err == nil {
		err = res.Errors[topic]
	}
	if err != nil {
		t.Fatalf("create topic %q: %v", topic, err)
	}
}

// oversizeBatch returns 9 small events of 3 aggregates and, at index 4, one
// whose payload exceeds 2000 bytes.
func oversizeBatch() []*event.Event {
	evs := makeEvents(9, 3)
	evs[4].Payload = fmt.Appendf(nil, `{"blob": %q}`, strings.Repeat("x", 3000))
	return evs
}

func TestOversizeMessageFailsAlone(t *testing.T) {
	c := startCluster(t)
	addr := c.ListenAddrs()[0]
	// One partition, so the oversize message shares its record batch with
	// every other message, and the broker rejects the batch whole.
	createTopic(t, addr, "orders", 1, kafkago.ConfigEntry{ConfigName: "max.message.bytes", ConfigValue: "2000"})
	s := newSink(t, Config{Brokers: []string{addr}, Topic: "orders"})
	evs := oversizeBatch()

	err := s.Write(context.Background(), evs)
	var be *sink.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("Write = %v, want a *sink.BatchError", err)
	}
	if len(be.Errs) != 1 || be.Errs[4] == nil {
		t.Fatalf("failed events %v, want only event 4", be.Errs)
	}
	if !sink.IsPermanent(be.Errs[4]) || !errors.Is(be.Errs[4], kafkago.MessageSizeTooLarge) {
		t.Fatalf("event 4: %v, want a permanent MessageSizeTooLarge", be.Errs[4])
	}
	want := append(append([]*event.Event{}, evs[:4]...), evs[5:]...)
	checkOrder(t, want, consume(t, c.ListenAddrs(), len(want), "orders"))
}

func TestOversizeMessageGoesToTheDeadLetterTopic(t *testing.T) {
	c := startCluster(t)
	addr := c.ListenAddrs()[0]
	createTopic(t, addr, "orders", 1, kafkago.ConfigEntry{ConfigName: "max.message.bytes", ConfigValue: "2000"})
	s := newSink(t, Config{
		Brokers:         []string{addr},
		Topic:           "orders",
		DeadLetterTopic: "orders.dlq",
		CreateTopics:    CreateTopicsConfig{Enabled: true, Partitions: 1},
	})
	evs := oversizeBatch()
	if err := s.Write(context.Background(), evs); err != nil {
		t.Fatalf("Write = %v, want nil: the oversize event should be dead-lettered", err)
	}
	dlq := consume(t, c.ListenAddrs(), 1, "orders.dlq")
	if len(dlq) != 1 {
		t.Fatalf("dead-letter topic has %d records, want 1", len(dlq))
	}
	r := dlq[0]
	if r.headers["id"] != evs[4].ID || r.key != evs[4].AggregateID || !bytes.Equal(r.value, evs[4].Payload) {
		t.Errorf("dead letter: id %q key %q, value of %d bytes; want %q %q and the %d payload bytes",
			r.headers["id"], r.key, len(r.value), evs[4].ID, evs[4].AggregateID, len(evs[4].Payload))
	}
	if r.headers["dlq_original_topic"] != "orders" || !strings.Contains(r.headers["dlq_reason"], "Message Size Too Large") {
		t.Errorf("dead letter headers: %v", r.headers)
	}
	want := append(append([]*event.Event{}, evs[:4]...), evs[5:]...)
	checkOrder(t, want, consume(t, c.ListenAddrs(), len(want), "orders"))
}

func TestMissingTopicWithoutCreateTopics(t *testing.T) {
	c := startCluster(t)
	addr := c.ListenAddrs()[0]

	t.Run("a missing fixed topic fails Connect, naming it and the option", func(t *testing.T) {
		s, err := New(Config{Brokers: []string{addr}, Topic: "nope"}, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		err = s.Connect(context.Background())
		if err == nil || !strings.Contains(err.Error(), `"nope"`) || !strings.Contains(err.Error(), "create_topics.enabled") {
			t.Fatalf("Connect = %v, want an error naming the topic and create_topics.enabled", err)
		}
	})

	t.Run("a missing templated topic fails its events retriably", func(t *testing.T) {
		createTopic(t, addr, "outbox.event.Order", 2)
		s := newSink(t, Config{Brokers: []string{addr}})
		evs := makeEvents(10, 4) // Order and Invoice; only Order exists
		err := s.Write(context.Background(), evs)
		var be *sink.BatchError
		if !errors.As(err, &be) {
			t.Fatalf("Write = %v, want a *sink.BatchError", err)
		}
		for i, e := range evs {
			ierr := be.Failed(i)
			switch {
			case e.AggregateType == "Order" && ierr != nil:
				t.Errorf("event %d (Order) failed: %v", i, ierr)
			case e.AggregateType == "Invoice" && (ierr == nil || sink.IsPermanent(ierr) ||
				!strings.Contains(ierr.Error(), "outbox.event.Invoice") || !strings.Contains(ierr.Error(), "create_topics.enabled")):
				t.Errorf("event %d (Invoice): %v, want a retriable error naming the topic and option", i, ierr)
			}
		}
	})
}

func TestConnectNamesUnreachableBrokers(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s, err := New(Config{Brokers: []string{addr}, RequestTimeout: 2 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	err = s.Connect(context.Background())
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Connect = %v, want an error naming %s", err, addr)
	}
}

func TestSASLSCRAM(t *testing.T) {
	c := startCluster(t, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "relay", "s3cret"),
		kfake.SeedTopics(2, "orders"))
	addr := c.ListenAddrs()[0]
	t.Setenv("TEST_KAFKA_PASSWORD", "s3cret")
	cfg := Config{Brokers: []string{addr}, Topic: "orders",
		SASL: SASLConfig{Mechanism: "scram-sha-256", Username: "relay", PasswordEnv: "TEST_KAFKA_PASSWORD"}}
	s := newSink(t, cfg)
	if err := s.Write(context.Background(), makeEvents(10, 2)); err != nil {
		t.Fatalf("Write with SASL: %v", err)
	}

	cfg.SASL.PasswordEnv = ""
	cfg.SASL.Password = "wrong"
	bad, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bad.Connect(ctx); err == nil {
		t.Fatal("Connect with a wrong password succeeded")
	}
}

func TestKcatReadsWhatWasWritten(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat not installed: apt-get install kcat")
	}
	c := startCluster(t, kfake.SeedTopics(3, "orders"))
	addr := c.ListenAddrs()[0]
	s := newSink(t, Config{Brokers: []string{addr}, Topic: "orders", Compression: "lz4"})
	evs := makeEvents(100, 7)
	if err := s.Write(context.Background(), evs); err != nil {
		t.Fatalf("Write: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, "-C", "-b", addr, "-t", "orders", "-o", "beginning", "-e", "-q",
		"-f", "%k\t%h\t%s\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat: %v\n%s", err, stderr.String())
	}
	var got []record
	for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		f := strings.SplitN(line, "\t", 3)
		if len(f) != 3 {
			t.Fatalf("kcat line %q is not key, headers, value", line)
		}
		r := record{key: f[0], value: []byte(f[2]), headers: map[string]string{}}
		for _, kv := range strings.Split(f[1], ",") {
			k, v, _ := strings.Cut(kv, "=")
			r.headers[k] = v
		}
		got = append(got, r)
	}
	if len(got) != len(evs) {
		t.Fatalf("kcat read %d messages, want %d:\n%s", len(got), len(evs), out)
	}
	byID := map[string]*event.Event{}
	for _, e := range evs {
		byID[e.ID] = e
	}
	for _, r := range got {
		e := byID[r.headers["id"]]
		if e == nil || r.key != e.AggregateID || !bytes.Equal(r.value, e.Payload) || r.headers["binlog_file"] != e.Source.File {
			t.Errorf("kcat read key %q headers %v value %q: not what was written", r.key, r.headers, r.value)
		}
	}
	checkOrder(t, evs, got)
}

func BenchmarkWrite(b *testing.B) {
	c := startCluster(b, kfake.SeedTopics(6, "bench"))
	evs := makeEvents(1000, 100)
	for _, bc := range []struct {
		name string
		cfg  Config
	}{
		{"linger=1ms", Config{Linger: time.Millisecond}},
		{"linger=5ms", Config{Linger: 5 * time.Millisecond}},
		{"linger=1ms/lz4/envelope", Config{Linger: time.Millisecond, Compression: "lz4", Envelope: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := bc.cfg
			cfg.Brokers, cfg.Topic = c.ListenAddrs(), "bench"
			s, err := New(cfg, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Connect(context.Background()); err != nil {
				b.Fatal(err)
			}
			defer s.Close(context.Background())
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Write(ctx, evs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(evs))/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// Every compression codec round-trips through the broker (lz4 once failed
// every batch: its writer's ReadFrom after a first Write).
func TestEveryCompressionCodecDelivers(t *testing.T) {
	for _, codec := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		t.Run(codec, func(t *testing.T) {
			c := startCluster(t, kfake.SeedTopics(3, "orders"))
			s := newSink(t, Config{Brokers: c.ListenAddrs(), Topic: "orders", Compression: codec})
			evs := makeEvents(60, 5)
			if err := s.Write(context.Background(), evs); err != nil {
				t.Fatalf("Write: %v", err)
			}
			checkOrder(t, evs, consume(t, c.ListenAddrs(), len(evs), "orders"))
		})
	}
}
