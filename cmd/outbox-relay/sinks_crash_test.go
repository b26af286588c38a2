package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
)

// The shared servers the NATS, Redis and RabbitMQ sinks' tests use (sinktest.Require says who
// starts them).
const (
	sharedNATS     = "127.0.0.1:4222"
	sharedRedis    = "127.0.0.1:6379"
	sharedRabbitMQ = "127.0.0.1:5672"
)

// crashKills is how many times a sink's crash run SIGKILLs the relay.
const crashKills = 5

// crashSink is the destination of one crash run: the sink's entry under
// `sinks:` (named crashSinkName), and a reader of what the destination
// holds.
type crashSink struct {
	typ  string // the sink's type
	yaml string // its section, under the sink's entry
	// key is the sink's checkpoint key: crashSinkName, or a webhook
	// endpoint's "sink/endpoint".
	key string
	// read returns every message the destination holds, in its order, each
	// with the GTID header it carries. It is called from one goroutine.
	read func(t *testing.T) []outboxtest.Delivered
	// inFlight is how many events can be in flight to the destination at
	// once: sent, maybe stored, not yet acknowledged (a webhook endpoint's
	// max_concurrency; for the batch sinks one batch, delivery.batch_size).
	inFlight int
	// late is how many messages per kill may reach the destination after
	// the count taken at the kill: RabbitMQ's publishes the killed relay
	// had sent and the broker had not yet routed to the queue.
	late int
	// readBack says the sink reads its destination back on a restart
	// (sink.Recoverer): the run then asserts 0 duplicates, no fall-back,
	// and at least one restart that skipped what it read back.
	readBack bool
}

const crashSinkName = "stream"

// crashBatch is the crash runs' delivery.batch_size.
const crashBatch = 200

// crashResult is what a crash run measured.
type crashResult struct {
	outboxtest.Report
	kills int
	// resent is, summed over the kills, the events the destination held at
	// a kill that the restart sends again: after the checkpoint's position
	// and not in its list of acknowledged events. pastWatermark counts all
	// those after the position (what a checkpoint without the list costs).
	resent, pastWatermark int
	perKill               []int
	// readBacks are the restarts' read-backs that held (and skippedByReadBack
	// what they found, summed); fallBacks those that could not tell.
	readBacks, skippedByReadBack, fallBacks int
}

// The relay process, with each sink (Kafka on the in-process broker; NATS
// JetStream, Redis Streams and RabbitMQ on the shared servers; a webhook
// endpoint on a loopback receiver), is SIGKILLed crashKills times, each at
// a random moment 0.5–2 s after it was (re)started whether or not it saved
// a checkpoint since, while 2 producers commit (rollbacks among them), and
// restarted each time: every committed event ends up in the destination,
// per aggregate the first deliveries are in commit order, nothing rolled
// back arrives, and an event is there twice only if it was committed after
// a checkpoint a restart resumed from and is not in that checkpoint's list
// of acknowledged events.
//
// What a kill costs: the restart sends again what the destination holds
// beyond the checkpoint's position that the checkpoint does not list. The
// checkpoint is saved as soon as something is acknowledged (one save at a
// time), so that is what was in flight at the kill (a batch; a webhook
// endpoint's max_concurrency requests) plus what was acknowledged while the
// last save was under way; both count against delivery.max_in_flight, which
// bounds what one kill costs (asserted per kill, and logged). NATS JetStream
// stores none twice (the re-sends carry the event id as Nats-Msg-Id and fall
// within the stream's duplicate window). Kafka and Redis Streams store none
// twice either: each restart reads back what the destination holds after
// its checkpoint and skips it; the relay's log must show no read-back that
// fell back, and at least one that skipped something (so that the kills
// did not all land while nothing was in flight).
func TestSinkCrashRunsAtLeastOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("crash run skipped with -short")
	}
	bin := buildBinary(t)
	srv := testserver.Start(t, testserver.Options{ServerID: 12})

	t.Run("kafka", func(t *testing.T) {
		k, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		defer k.Close()
		crashRun(t, bin, srv, int(testserver.ServerID()), crashSink{typ: "kafka",
			yaml: fmt.Sprintf(`
    kafka: {brokers: [%s], create_topics: {enabled: true, partitions: 4}}
`, k.ListenAddrs()[0]),
			read:     kafkaReader(t, k.ListenAddrs(), "outbox.event.order"),
			inFlight: crashBatch,
			readBack: true,
		})
	})
	t.Run("nats", func(t *testing.T) {
		sinktest.Require(t, "nats-server (JetStream)", sharedNATS)
		u := sinktest.Unique()
		stream, prefix := "C"+u, "c"+u
		r := crashRun(t, bin, srv, int(testserver.ServerID()), crashSink{typ: "nats",
			yaml: fmt.Sprintf(`
    nats:
      urls: [nats://%s]
      stream: %s
      subject: %s.outbox.event.{{.AggregateType}}
      create_stream: {enabled: true, subjects: [%s.>], storage: memory, duplicate_window: 2m}
`, sharedNATS, stream, prefix, prefix),
			read:     natsReader(t, stream),
			inFlight: crashBatch,
		})
		if r.Duplicates != 0 {
			t.Errorf("%d duplicates in the stream: JetStream should have dropped every re-sent event by its Nats-Msg-Id", r.Duplicates)
		}
	})
	t.Run("redis", func(t *testing.T) {
		sinktest.Require(t, "redis-server", sharedRedis)
		key := "c" + sinktest.Unique() + ":outbox"
		crashRun(t, bin, srv, int(testserver.ServerID()), crashSink{typ: "redis",
			yaml: fmt.Sprintf(`
    redis: {addr: %q, stream: %q}
`, sharedRedis, key),
			read:     redisReader(t, key),
			inFlight: crashBatch,
			readBack: true,
		})
	})
	t.Run("rabbitmq", func(t *testing.T) {
		sinktest.Require(t, "rabbitmq", sharedRabbitMQ)
		name := "c" + sinktest.Unique()
		read := rabbitReader(t, name) // declares the exchange and a bound queue first
		crashRun(t, bin, srv, int(testserver.ServerID()), crashSink{typ: "rabbitmq",
			yaml: fmt.Sprintf(`
    rabbitmq: {addr: %q, exchange: %s}
`, sharedRabbitMQ, name),
			read:     read,
			inFlight: crashBatch, // the unconfirmed publishes: one batch
			late:     crashBatch,
		})
	})
	t.Run("webhook", func(t *testing.T) {
		hooks := newCrashHooks(t)
		crashRun(t, bin, srv, int(testserver.ServerID()), crashSink{typ: "webhook",
			yaml: fmt.Sprintf(`
    webhook:
      gateway: {max_in_flight: %d}
      endpoints:
        - {name: ep, url: %q, max_concurrency: 16}
`, crashMaxInFlight, hooks.srv.URL+"/ep"),
			key:      crashSinkName + "/ep",
			read:     hooks.read,
			inFlight: 16,
		})
	})
}

// crashMaxInFlight is the crash runs' delivery.max_in_flight: the bound of
// what one kill costs. Events sent and not yet acknowledged, and events
// acknowledged but not yet saved (those acknowledged while the last save
// was under way: it writes and fsyncs the checkpoint file), both count
// against it, so the destination holds at most this many events that the
// restart sends again.
const crashMaxInFlight = 1000

// crashRun runs the relay binary with sink s (at the defaults otherwise) on
// a fresh database of srv, SIGKILLs and restarts it crashKills times while
// 2 producers commit, then lets it catch up, checks every delivery and the
// re-sends per kill, and logs them.
func crashRun(t *testing.T, bin string, srv *testserver.Server, serverID int, s crashSink) crashResult {
	t.Helper()
	if s.key == "" {
		s.key = crashSinkName
	}
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "relay.yaml")
	cpPath := filepath.Join(dir, "cp.json")
	cfg := fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s}
delivery: {batch_size: %d, max_in_flight: %d}
sinks:
  - name: %s
    type: %s
%s
log: {level: info, format: json}
`, srv.Port, serverID, dbname, cpPath, crashBatch, crashMaxInFlight, crashSinkName, s.typ, s.yaml)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "relay.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	defer func() {
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "relay.log"))
			t.Logf("relay log:\n%s", tail(log))
		}
	}()
	cmd := startRelay(t, bin, cfgPath, logf, logf)
	defer func() { _ = cmd.Process.Kill() }()
	waitForFile(t, cpPath, 30*time.Second) // the first checkpoint fixes the start position

	stopProducing := make(chan struct{})
	w := &outboxtest.Workload{Until: stopProducing}
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		outboxtest.Produce(context.Background(), t, db, w, 2, 100000, []int{1, 4, 7, 2}, 40)
	}()
	// However the test ends (a t.Fatal below included), the producer stops
	// before the test returns: its errors then land in this test, not as a
	// panic ("Fail in goroutine after … has completed") that hides what failed.
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(func() { close(stopProducing) }) }
	defer func() { stop(); <-produced }()

	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	res := crashResult{}
	var resumeSeqs []int
	for res.kills < crashKills {
		// Kill at a random moment 0.5–2 s after the (re)start, whether or
		// not the relay has saved a checkpoint since.
		time.Sleep(time.Duration(500+rnd.IntN(1500)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		res.kills++
		time.Sleep(100 * time.Millisecond) // requests sent before the kill reach the receiver
		cp := loadCheckpoint(t, cpPath, s.key)
		resume := gtidSeq(cp.Position.GTIDSet)
		resumeSeqs = append(resumeSeqs, resume)
		// What the destination holds of the events committed after that
		// checkpoint and not listed in it, the next relay sends again.
		n, past := 0, 0
		for _, d := range uniqueDelivered(s.read(t)) {
			if gtidSeq(d.GTID) <= resume {
				continue
			}
			past++
			if !cp.Acked.Contains(d.GTID, d.ID) {
				n++
			}
		}
		res.resent += n
		res.pastWatermark += past
		res.perKill = append(res.perKill, n)
		// A read-back sink's acknowledged events take no room while their
		// save is under way (the restart skips what the destination
		// holds): the bound is its duplicates, 0, asserted below.
		if n > crashMaxInFlight && !s.readBack {
			t.Errorf("kill %d: the destination holds %d events the restart sends again (after the checkpoint, not listed in it), more than max_in_flight %d (at most %d sent and unacknowledged, the rest acknowledged but not saved)",
				res.kills, n, crashMaxInFlight, s.inFlight)
		}
		cmd = startRelay(t, bin, cfgPath, logf, logf)
	}
	stop()
	<-produced
	got := waitUnique(t, s.read, w.Events(), 180*time.Second)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("relay exited with %v after SIGTERM", err)
	}
	got = s.read(t)
	res.Report = outboxtest.Check(t, w, got, false)
	res.readBacks, res.skippedByReadBack, res.fallBacks = readBackLog(t, filepath.Join(dir, "relay.log"))
	if s.readBack {
		if res.Duplicates != 0 {
			t.Errorf("%d duplicates: every restart should have read back what the destination held and skipped it", res.Duplicates)
		}
		if res.fallBacks != 0 {
			t.Errorf("%d restarts fell back to at-least-once: the sink is the only writer of its destination here, so read-back should always hold", res.fallBacks)
		}
		if res.skippedByReadBack == 0 {
			t.Errorf("no restart skipped anything it read back (%d read-backs): the kills must all have landed while nothing was in flight, so the run proves nothing", res.readBacks)
		}
	}

	// A duplicate must be of an event committed after a checkpoint that a
	// restart resumed from, and there are no more than the restarts sent
	// again.
	minResume := resumeSeqs[0]
	for _, r := range resumeSeqs {
		minResume = min(minResume, r)
	}
	seqs := seqOf(got)
	count := map[string]int{}
	for _, d := range got {
		count[d.ID]++
	}
	for id, n := range count {
		if n > 1 && seqs[id] <= minResume {
			t.Errorf("event %s (gtid seq %d) is there %d times though every restart resumed after seq %d", id, seqs[id], n, minResume)
		}
	}
	if res.Duplicates > res.resent+res.kills*s.late {
		t.Errorf("%d duplicates, but the restarts were to send again only %d events the destination held (and %d per kill may arrive after the count)", res.Duplicates, res.resent, s.late)
	}
	t.Logf("%s crash run: %d SIGKILLs, %d committed events, %d messages, %d unique, %d duplicates; per kill re-sent %v (%d in all; %d held past the checkpoints' positions); %d read-backs skipped %d events, %d fell back",
		t.Name(), res.kills, res.Committed, res.Delivered, res.Unique, res.Duplicates, res.perKill, res.resent, res.pastWatermark,
		res.readBacks, res.skippedByReadBack, res.fallBacks)
	return res
}

// readBackLog reads the relay's JSON log at path (every run's): how many
// restarts read the destination back and held, the events they found there
// that their checkpoint did not list (and so did not send again only
// because of the read-back), and how many fell back to at-least-once. A
// fall-back is any line carrying sink.ErrCannotRecover's text, whatever its
// message says.
func readBackLog(t *testing.T, path string) (readBacks, skipped, fallBacks int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, sink.ErrCannotRecover.Error()) {
			fallBacks++
			continue
		}
		var rec struct {
			Msg      string `json:"msg"`
			Unlisted int    `json:"unlisted"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue // a line the relay wrote as it was killed
		}
		if strings.HasPrefix(rec.Msg, "read back the destination") {
			readBacks++
			skipped += rec.Unlisted
		}
	}
	return readBacks, skipped, fallBacks
}

// uniqueDelivered is got without repeats, each event once.
func uniqueDelivered(got []outboxtest.Delivered) []outboxtest.Delivered {
	seen := make(map[string]bool, len(got))
	var out []outboxtest.Delivered
	for _, d := range got {
		if !seen[d.ID] {
			seen[d.ID] = true
			out = append(out, d)
		}
	}
	return out
}

// loadCheckpoint is key's checkpoint in the file store at path.
func loadCheckpoint(t *testing.T, path, key string) checkpoint.Checkpoint {
	st, err := checkpoint.OpenFileReadOnly(path)
	if err != nil {
		t.Fatalf("checkpoint after SIGKILL: %v", err)
	}
	cp, err := st.Load(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// crashHooks is a loopback webhook endpoint that answers 204 and records
// each request's event id, aggregate and GTID (the webhook-* headers).
type crashHooks struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []outboxtest.Delivered
}

func newCrashHooks(t *testing.T) *crashHooks {
	h := &crashHooks{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return // the relay was killed mid-request
		}
		h.mu.Lock()
		h.reqs = append(h.reqs, outboxtest.Delivered{ID: r.Header.Get("webhook-id"),
			AggregateID: r.Header.Get("webhook-aggregate-id"), GTID: r.Header.Get("webhook-gtid")})
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *crashHooks) read(*testing.T) []outboxtest.Delivered {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.reqs)
}

// waitUnique waits until read returns at least n distinct events, and
// returns what it read last.
func waitUnique(t *testing.T, read func(*testing.T) []outboxtest.Delivered, n int, limit time.Duration) []outboxtest.Delivered {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		got := read(t)
		if len(uniqueIDs(got)) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events delivered after %s", len(uniqueIDs(got)), n, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func uniqueIDs(got []outboxtest.Delivered) map[string]bool {
	ids := make(map[string]bool, len(got))
	for _, d := range got {
		ids[d.ID] = true
	}
	return ids
}

// seqOf maps each delivered event to the sequence number of its GTID.
func seqOf(got []outboxtest.Delivered) map[string]int {
	out := make(map[string]int, len(got))
	for _, d := range got {
		out[d.ID] = gtidSeq(d.GTID)
	}
	return out
}

// gtidSeq is the sequence number of a MariaDB GTID ("0-12-345").
func gtidSeq(g string) int {
	n, _ := strconv.Atoi(g[strings.LastIndexByte(g, '-')+1:])
	return n
}

// kafkaReader consumes topic from its start, and keeps what it read. A read
// polls until a poll brings nothing new.
func kafkaReader(t *testing.T, brokers []string, topic string) func(*testing.T) []outboxtest.Delivered {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	header := func(rec *kgo.Record, k string) string {
		for _, h := range rec.Headers {
			if h.Key == k {
				return string(h.Value)
			}
		}
		return ""
	}
	var got []outboxtest.Delivered
	return func(*testing.T) []outboxtest.Delivered {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			fs := cl.PollFetches(ctx)
			cancel()
			n := 0
			fs.EachRecord(func(rec *kgo.Record) {
				n++
				got = append(got, outboxtest.Delivered{ID: header(rec, "id"), AggregateID: string(rec.Key), GTID: header(rec, "gtid")})
			})
			if n == 0 {
				return got
			}
		}
	}
}

// natsReader consumes the stream from its start, in stream order, with an
// ordered consumer made once the relay has created the stream.
func natsReader(t *testing.T, stream string) func(*testing.T) []outboxtest.Delivered {
	nc, err := natsgo.Connect("nats://" + sharedNATS)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		got      []outboxtest.Delivered
		consumer jetstream.ConsumeContext
	)
	t.Cleanup(func() {
		if consumer != nil {
			consumer.Stop()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, stream)
		nc.Close()
	})
	return func(t *testing.T) []outboxtest.Delivered {
		if consumer == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return nil // not created yet
			}
			if err != nil {
				t.Fatal(err)
			}
			consumer, err = c.Consume(func(m jetstream.Msg) {
				h := m.Headers()
				mu.Lock()
				got = append(got, outboxtest.Delivered{ID: h.Get("id"), AggregateID: h.Get("aggregate_id"), GTID: h.Get("gtid")})
				mu.Unlock()
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		// Everything the stream holds now, not what the consumer got so far.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for {
			mu.Lock()
			n := len(got)
			mu.Unlock()
			if uint64(n) >= info.State.Msgs {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("the consumer got %d of the stream's %d messages", n, info.State.Msgs)
			}
			time.Sleep(10 * time.Millisecond)
		}
		mu.Lock()
		defer mu.Unlock()
		return append([]outboxtest.Delivered(nil), got...)
	}
}

// redisReader reads the stream key from the start, and keeps what it read.
func redisReader(t *testing.T, key string) func(*testing.T) []outboxtest.Delivered {
	c := goredis.NewClient(&goredis.Options{Addr: sharedRedis})
	t.Cleanup(func() {
		c.Del(context.Background(), key)
		c.Close()
	})
	from := "-"
	var got []outboxtest.Delivered
	return func(t *testing.T) []outboxtest.Delivered {
		msgs, err := c.XRange(context.Background(), key, from, "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			s := func(k string) string { v, _ := m.Values[k].(string); return v }
			got = append(got, outboxtest.Delivered{ID: s("id"), AggregateID: s("aggregate_id"), GTID: s("gtid")})
			from = "(" + m.ID
		}
		return got
	}
}

// rabbitReader declares a topic exchange named name and a queue bound to
// it for every routing key, and consumes the queue. A read returns every
// message the queue held when it began: it puts a marker message at the
// queue's tail and waits until the consumer reaches it.
func rabbitReader(t *testing.T, name string) func(*testing.T) []outboxtest.Delivered {
	conn, err := amqp.Dial("amqp://guest:guest@" + sharedRabbitMQ + "/")
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(name, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(name, "#", name, false, nil); err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume(name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		got     []outboxtest.Delivered
		markers = make(chan string, 1)
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		for m := range deliveries {
			if m.Type == "marker" {
				markers <- m.MessageId
				continue
			}
			agg, _ := m.Headers["aggregate_id"].(string)
			gtid, _ := m.Headers["gtid"].(string)
			mu.Lock()
			got = append(got, outboxtest.Delivered{ID: m.MessageId, AggregateID: agg, GTID: gtid})
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ch.QueueDelete(name, false, false, false)
		ch.ExchangeDelete(name, false, false)
		conn.Close()
		<-done
	})
	n := 0
	return func(t *testing.T) []outboxtest.Delivered {
		n++
		id := fmt.Sprintf("marker-%d", n)
		// To the queue itself, through the default exchange.
		if err := ch.Publish("", name, false, false, amqp.Publishing{Type: "marker", MessageId: id}); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-markers:
			if m != id {
				t.Fatalf("marker %s arrived while waiting for %s", m, id)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the queue's consumer did not reach marker %s", id)
		}
		mu.Lock()
		defer mu.Unlock()
		return append([]outboxtest.Delivered(nil), got...)
	}
}
