package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/relaytest"
)

type kafkaRecord struct {
	topic     string
	partition int32
	key       string
	value     []byte
	headers   map[string]string
}

// collector consumes topics from the start, in the background.
type collector struct {
	mu   sync.Mutex
	recs []kafkaRecord
	cl   *kgo.Client
	done chan struct{}
}

func collect(t *testing.T, addrs []string, topics ...string) *collector {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{cl: cl, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			fs := cl.PollFetches(context.Background())
			if fs.IsClientClosed() {
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				rec := kafkaRecord{topic: r.Topic, partition: r.Partition, key: string(r.Key), value: r.Value, headers: map[string]string{}}
				for _, h := range r.Headers {
					rec.headers[h.Key] = string(h.Value)
				}
				c.mu.Lock()
				c.recs = append(c.recs, rec)
				c.mu.Unlock()
			})
		}
	}()
	t.Cleanup(c.stop)
	return c
}

func (c *collector) stop() {
	select {
	case <-c.done:
	default:
		c.cl.Close()
		<-c.done
	}
}

func (c *collector) records() []kafkaRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]kafkaRecord(nil), c.recs...)
}

func (c *collector) waitFor(t *testing.T, n int, limit time.Duration) []kafkaRecord {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		recs := c.records()
		if len(recs) >= n || time.Now().After(deadline) {
			return recs
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func startKafka(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func kafkaRelay(t *testing.T, dbname string, brokers []string, extra string) (*config.Config, func()) {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 200ms}
delivery: {batch_size: 1000, retry_backoff: 50ms, max_retry_backoff: 500ms}
sinks:
  - name: kafka
    type: kafka
    kafka:
      brokers: [%s]
      request_timeout: 2s
      create_topics: {enabled: true, partitions: 6}
%s`, srv.Port, testserver.ServerID(), dbname, filepath.Join(t.TempDir(), "cp.json"), strings.Join(brokers, ","), extra)))
	if err != nil {
		t.Fatal(err)
	}
	rl := startRelay(t, cfg, relay.Options{Logger: relaytest.Stderr(slog.LevelError)})
	waitForCheckpoint(t, cfg.Checkpoint.Path)
	stop := func() {
		if err := rl.stop(t); err != nil {
			t.Errorf("relay: %v", err)
		}
	}
	return cfg, stop
}

func newOutbox(t testing.TB) (string, *outboxtest.Workload) {
	dbname := srv.NewDatabase(t)
	if _, err := srv.DB(t, dbname).Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	return dbname, &outboxtest.Workload{}
}

// checkKafka checks topic, key, value bytes and headers of every record (the
// relay names the sink "kafka" in relay_sink), and
// delivery (per key: commit order) against the workload.
func checkKafka(t *testing.T, w *outboxtest.Workload, recs []kafkaRecord, dbname string) outboxtest.Report {
	t.Helper()
	var d []outboxtest.Delivered
	for i, r := range recs {
		var p struct {
			ID string `json:"id"`
			N  int    `json:"n"`
		}
		if err := json.Unmarshal(r.value, &p); err != nil {
			t.Fatalf("record %d value is not the payload: %q", i, r.value)
		}
		if want := outboxtest.Payload(p.ID, p.N); string(r.value) != want {
			t.Fatalf("record %d value %q, want the bytes written %q", i, r.value, want)
		}
		if r.topic != "outbox.event.order" {
			t.Fatalf("record %d topic %q, want outbox.event.order", i, r.topic)
		}
		h := r.headers
		if h["id"] != p.ID || h["type"] != "created" || h["aggregate_type"] != "order" || h["table"] != dbname+".outbox" ||
			!strings.HasPrefix(h["gtid"], "0-1-") || h["binlog_file"] == "" || h["binlog_pos"] == "" ||
			h["relay_sink"] != "kafka" || h["relay_partitions"] == "" {
			t.Fatalf("record %d headers %v", i, h)
		}
		d = append(d, outboxtest.Delivered{ID: p.ID, AggregateID: r.key})
	}
	return outboxtest.Check(t, w, d, false)
}

// 20,000 events over 500 aggregates, from a private mariadbd to an
// in-process Kafka-protocol broker: topic, key, value bytes and headers are
// right, and per key the order is commit order.
func TestKafkaEndToEnd(t *testing.T) {
	k := startKafka(t)
	dbname, w := newOutbox(t)
	_, stop := kafkaRelay(t, dbname, k.ListenAddrs(), "")
	c := collect(t, k.ListenAddrs(), "outbox.event.order")
	outboxtest.Produce(context.Background(), t, srv.DB(t, dbname), w, 4, 500, []int{10}, 500)
	total := w.Events()
	if total != 20000 {
		t.Fatalf("workload committed %d events, want 20000", total)
	}
	recs := c.waitFor(t, total, 90*time.Second)
	stop()
	rep := checkKafka(t, w, recs, dbname)
	if rep.Duplicates != 0 {
		t.Errorf("%d duplicates in a run without failures", rep.Duplicates)
	}
	t.Logf("kafka end to end: %d committed, %d records", rep.Committed, rep.Delivered)
}

// The broker goes away for several seconds while producers keep committing,
// and comes back on the same port: nothing is lost, per-key order holds, and
// the relay keeps running. (kfake keeps no data across a restart, so the
// first broker is drained before it stops and the second is checked for the
// rest.)
func TestKafkaBrokerOutage(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	k1 := startKafka(t, kfake.Ports(port))
	dbname, w := newOutbox(t)
	db := srv.DB(t, dbname)
	_, stop := kafkaRelay(t, dbname, k1.ListenAddrs(), "")
	defer stop()
	c1 := collect(t, k1.ListenAddrs(), "outbox.event.order")
	outboxtest.Produce(context.Background(), t, db, w, 2, 50, []int{5}, 50)
	before := w.Events()
	recs1 := c1.waitFor(t, before, 30*time.Second)
	if len(recs1) < before {
		t.Fatalf("before the outage: %d of %d records", len(recs1), before)
	}
	c1.stop()
	k1.Close()

	// Producers go on during the outage.
	w2 := &outboxtest.Workload{Prefix: "b"}
	outboxtest.Produce(context.Background(), t, db, w2, 2, 50, []int{5}, 50)
	time.Sleep(4 * time.Second)

	var k2 *kfake.Cluster
	for try := 0; ; try++ {
		if k2, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port)); err == nil {
			break
		}
		if try == 50 {
			t.Fatalf("restart kfake on port %d: %v", port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Cleanup(k2.Close)
	c2 := collect(t, k2.ListenAddrs(), "outbox.event.order")
	after := w2.Events()
	recs2 := c2.waitFor(t, after, 60*time.Second)
	checkKafka(t, w, recs1, dbname)
	rep := checkKafka(t, w2, recs2, dbname)
	t.Logf("outage: %d before, %d during/after (%d records, %d duplicates)", before, after, rep.Delivered, rep.Duplicates)
}

// A message over the broker's size limit goes to the dead-letter store with
// the broker's reason, and the events after it are delivered.
func TestKafkaOversizeMessageIsDeadLetteredAndTheStreamGoesOn(t *testing.T) {
	k := startKafka(t)
	admin := &kafkago.Client{Addr: kafkago.TCP(k.ListenAddrs()...)}
	res, err := admin.CreateTopics(context.Background(), &kafkago.CreateTopicsRequest{Topics: []kafkago.TopicConfig{{
		Topic: "outbox.event.order", NumPartitions: 3, ReplicationFactor: 1,
		ConfigEntries: []kafkago.ConfigEntry{{ConfigName: "max.message.bytes", ConfigValue: "4000"}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res.Errors {
		if e != nil {
			t.Fatal(e)
		}
	}
	dbname, _ := newOutbox(t)
	db := srv.DB(t, dbname)
	cfg, stop := kafkaRelay(t, dbname, k.ListenAddrs(), "")
	defer stop()
	c := collect(t, k.ListenAddrs(), "outbox.event.order")
	big := `{"blob": "` + strings.Repeat("x", 10000) + `"}`
	for i, payload := range []string{`{"n": 0}`, big, `{"n": 2}`, `{"n": 3}`} {
		if _, err := db.Exec("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, 'order', 'a1', 'created', ?)", "big-"+strconv.Itoa(i), payload); err != nil {
			t.Fatal(err)
		}
	}
	recs := c.waitFor(t, 3, 30*time.Second)
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.headers["id"])
	}
	if strings.Join(ids, ",") != "big-0,big-2,big-3" {
		t.Fatalf("delivered %v, want big-0,big-2,big-3", ids)
	}
	store, err := deadletter.OpenFile(deadletter.Dir(cfg))
	if err != nil {
		t.Fatal(err)
	}
	var recsDL []deadletter.Record
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if recsDL, _ = store.List(context.Background(), deadletter.Filter{Sink: "kafka"}); len(recsDL) > 0 {
			break
		}
	}
	if len(recsDL) != 1 || recsDL[0].Event.ID != "big-1" || string(recsDL[0].Event.Payload) != big {
		t.Fatalf("dead letters %+v, want the oversize event", recsDL)
	}
	if !strings.Contains(strings.ToLower(recsDL[0].Reason), "too large") {
		t.Errorf("dead-letter reason %q does not say the message is too large", recsDL[0].Reason)
	}
}
