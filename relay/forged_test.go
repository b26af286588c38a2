package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
)

// forgedValue is the payload of every forged message: the test's reader of
// the destination leaves them out (a consumer of the real events would
// get them too, but they are not events of the workload).
const forgedValue = "forged"

// forgeCase is a sink whose destination is read back, and how an outside
// client forges messages that claim to be the sink's.
type forgeCase struct {
	sink, yaml string
	// read returns the messages the relay wrote (not the forged ones).
	read func(t *testing.T) []outboxtest.Delivered
	// forge writes, with a client of its own, one message for each of
	// the events of txns (their gtid and id, this sink's relay headers, a
	// payload of forgedValue), one naming the id "ghost" in the last
	// transaction, and one in that transaction whose id is longOf(its
	// first event's id): longer than a read-back claim keeps.
	forge func(t *testing.T, txns []outboxtest.Committed)
}

// longOf is id made longer (4,096 bytes more) than any id a read-back
// claim keeps.
func longOf(id string) string { return id + strings.Repeat("o", 4096) }

// counterOf is the value of the counter name with the labels want.
func (r *readBackRun) counterOf(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// foreignWarnings are the run's log lines that report a forged message,
// with where it is.
func (r *readBackRun) foreignWarnings() []string {
	var out []string
	for _, line := range strings.Split(r.log.String(), "\n") {
		var rec struct{ Level, Msg, At string }
		if json.Unmarshal([]byte(line), &rec) == nil && strings.Contains(rec.Msg, "claims to be this sink's") && rec.Level == "WARN" && rec.At != "" {
			out = append(out, rec.At)
		}
	}
	return out
}

// A relay stops with A delivered and checkpointed; B is committed while
// it is down, and an outside client forges, in the destination, a message
// for each of B's events (this sink's relay headers, B's GTIDs and ids,
// another payload) and one naming an id no event has. The restarted relay
// reads them back, proves none of them its own, warns of each with where it
// is, counts them (one with an id too long to keep is dropped at once, as
// oversized), and delivers every one of B's events: forged messages can
// cost duplicates, never a lost event.
func forgedReadBack(t *testing.T, c forgeCase) {
	dbname, w := newOutbox(t)
	cpPath := filepath.Join(t.TempDir(), "cp.json")
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s}
delivery: {batch_size: 100, retry_backoff: 50ms, max_retry_backoff: 500ms}
sinks:
%s`, srv.Port, testserver.ServerID(), dbname, cpPath, c.yaml)))
	if err != nil {
		t.Fatal(err)
	}
	rc := readBackCase{sink: c.sink, read: c.read}

	run := startReadBackRun(t, cfg)
	waitForCheckpoint(t, cpPath)
	produce(t, dbname, w, "a-", rc)
	checkpointAfter(t, cpPath, c.sink, w)
	run.stop(t)

	before := len(w.Committed())
	w.Prefix = "b-"
	outboxtest.Produce(context.Background(), t, srv.DB(t, dbname), w, 1, 10, []int{1, 3, 2}, 20)
	b := w.Committed()[before:]
	forged := 1 // the ghost
	for _, txn := range b {
		forged += len(txn.IDs)
	}
	c.forge(t, b)

	run = startReadBackRun(t, cfg)
	eventually.Within(t, 60*time.Second, "every committed event in the destination", func() bool {
		ids := map[string]bool{}
		for _, d := range c.read(t) {
			ids[d.ID] = true
		}
		return len(ids) >= w.Events()
	})
	mismatch := func() float64 {
		return run.counterOf(t, "outbox_relay_readback_foreign_total", map[string]string{"sink": c.sink, "why": "mismatch"})
	}
	unmatched := func() float64 {
		return run.counterOf(t, "outbox_relay_readback_foreign_total", map[string]string{"sink": c.sink, "why": "unmatched"})
	}
	oversized := func() float64 {
		return run.counterOf(t, "outbox_relay_readback_foreign_total", map[string]string{"sink": c.sink, "why": "oversized"})
	}
	eventually.Within(t, 30*time.Second, "every forged message reported", func() bool {
		return int(mismatch())+int(unmatched())+int(oversized()) >= forged+1
	})
	byReadBack := run.counterOf(t, "outbox_relay_events_skipped_on_resume_total", map[string]string{"sink": c.sink, "by": "readback"})
	m, u, o := mismatch(), unmatched(), oversized()
	run.stop(t)

	outboxtest.Check(t, w, c.read(t), false)
	if int(m) != forged-1 || u != 1 || o != 1 || byReadBack != 0 {
		t.Errorf("foreign: %v mismatched, %v unmatched, %v oversized, %v skipped by read-back; want %d mismatched (B's events), 1 unmatched (the ghost), 1 oversized (the long id), none skipped",
			m, u, o, byReadBack, forged-1)
	}
	if warned := run.foreignWarnings(); len(warned) != forged+1 {
		t.Errorf("%d warnings naming where a forged message is, want %d: %q", len(warned), forged+1, warned)
	}
}

// Kafka: the forged records are produced over TCP by a franz-go client of
// their own, to the topic the sink writes and its key's partition.
func TestKafkaReadBackProvesWhatItSkips(t *testing.T) {
	k := startKafka(t)
	brokers := k.ListenAddrs()
	const topic = "outbox.event.order"
	col := collect(t, brokers, topic)
	forgeCase := forgeCase{sink: "kafka",
		yaml: fmt.Sprintf(`
  - name: kafka
    type: kafka
    kafka: {brokers: [%s], request_timeout: 2s, create_topics: {enabled: true, partitions: 4}}
`, strings.Join(brokers, ",")),
		read: func(*testing.T) []outboxtest.Delivered {
			var out []outboxtest.Delivered
			for _, r := range col.records() {
				if r.headers["relay_sink"] == "kafka" && string(r.value) != forgedValue {
					out = append(out, outboxtest.Delivered{ID: r.headers["id"], AggregateID: r.key, GTID: r.headers["gtid"]})
				}
			}
			return out
		},
		forge: func(t *testing.T, txns []outboxtest.Committed) {
			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			rec := func(gtid, id, key string) *kgo.Record {
				return &kgo.Record{Key: []byte(key), Value: []byte(forgedValue), Headers: []kgo.RecordHeader{
					{Key: "id", Value: []byte(id)}, {Key: "type", Value: []byte("created")},
					{Key: "aggregate_type", Value: []byte("order")}, {Key: "gtid", Value: []byte(gtid)},
					{Key: "relay_sink", Value: []byte("kafka")}, {Key: "relay_partitions", Value: []byte(strconv.Itoa(4))}}}
			}
			var recs []*kgo.Record
			for _, txn := range txns {
				for i, id := range txn.IDs {
					recs = append(recs, rec(txn.GTID, id, txn.AggIDs[i]))
				}
			}
			last := txns[len(txns)-1]
			recs = append(recs, rec(last.GTID, "ghost", last.AggIDs[0]), rec(last.GTID, longOf(last.IDs[0]), last.AggIDs[0]))
			if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
		},
	}
	forgedReadBack(t, forgeCase)
}

// Redis Streams: the forged entries are appended by a go-redis client of
// their own to the sink's stream on the machine's Redis.
func TestRedisReadBackProvesWhatItSkips(t *testing.T) {
	sinktest.Require(t, "redis-server", "127.0.0.1:6379")
	key := "forged" + sinktest.Unique() + ":outbox"
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer c.Close()
	defer c.Del(context.Background(), key)
	forgedReadBack(t, forgeCase{sink: "redis",
		yaml: fmt.Sprintf(`
  - name: redis
    type: redis
    redis: {addr: "127.0.0.1:6379", stream: %q, timeout: 2s}
`, key),
		read: func(t *testing.T) []outboxtest.Delivered {
			return redisDelivered(t, c, key, func(v map[string]any) bool {
				return v["relay_sink"] == "redis" && v["payload"] != forgedValue
			})
		},
		forge: func(t *testing.T, txns []outboxtest.Committed) {
			add := func(gtid, id, agg string) {
				err := c.XAdd(context.Background(), &goredis.XAddArgs{Stream: key, Values: []any{
					"id", id, "type", "created", "aggregate_type", "order", "aggregate_id", agg, "gtid", gtid,
					"relay_sink", "redis", "payload", forgedValue}}).Err()
				if err != nil {
					t.Fatal(err)
				}
			}
			for _, txn := range txns {
				for i, id := range txn.IDs {
					add(txn.GTID, id, txn.AggIDs[i])
				}
			}
			last := txns[len(txns)-1]
			add(last.GTID, "ghost", last.AggIDs[0])
			add(last.GTID, longOf(last.IDs[0]), last.AggIDs[0])
		},
	})
}
