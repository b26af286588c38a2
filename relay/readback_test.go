package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
)

// readBackRun is one run of a relay whose sink reads its destination back
// on a restart: its own metrics and JSON log.
type readBackRun struct {
	*run
	reg *prometheus.Registry
	log *lines
}

func startReadBackRun(t *testing.T, cfg *config.Config) *readBackRun {
	t.Helper()
	r := &readBackRun{reg: prometheus.NewRegistry(), log: &lines{}}
	logger := slog.New(slog.NewJSONHandler(r.log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	r.run = startRelay(t, cfg, relay.Options{Logger: logger, Registerer: r.reg})
	t.Cleanup(func() {
		r.stop(t)
		if t.Failed() {
			t.Logf("relay log:\n%s", r.log)
		}
	})
	return r
}

// stop stops the relay (once) and waits for it.
func (r *readBackRun) stop(t *testing.T) {
	t.Helper()
	if err := r.run.stop(t); err != nil {
		t.Errorf("relay: %v", err)
	}
}

// fallBacks is outbox_relay_readback_fallbacks_total of sink.
func (r *readBackRun) fallBacks(t *testing.T, sink string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "outbox_relay_readback_fallbacks_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "sink" && l.GetValue() == sink {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// readBack is what the run's log says of its read-back: whether it held,
// how many events it found that the checkpoint did not list, and the
// fall-back warnings.
func (r *readBackRun) readBack(t *testing.T) (held bool, unlisted int, warnings []string) {
	t.Helper()
	for _, line := range strings.Split(r.log.String(), "\n") {
		var rec struct {
			Level    string `json:"level"`
			Msg      string `json:"msg"`
			Err      string `json:"err"`
			Unlisted int    `json:"unlisted"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		switch {
		case strings.HasPrefix(rec.Msg, "read back the destination"):
			held, unlisted = true, unlisted+rec.Unlisted
		case strings.HasPrefix(rec.Msg, "cannot read back"):
			if rec.Level != "WARN" {
				t.Errorf("the fall-back is logged at %s, want WARN: %s", rec.Level, line)
			}
			warnings = append(warnings, rec.Err)
		}
	}
	return held, unlisted, warnings
}

// readBackCase is a sink whose destination is read back, and how the test
// reads it and spoils it between two runs.
type readBackCase struct {
	sink string // the sink's name (its relay_sink)
	yaml string // its entry under sinks:
	// read returns this sink's messages in the destination, in its order
	// (not another writer's).
	read func(t *testing.T) []outboxtest.Delivered
	// spoil does, between the first run and the second, what read-back
	// cannot see past; want is a text of the second run's warning.
	spoil func(t *testing.T)
	want  string
}

// checkpointAfter waits until the checkpoint of key at path covers every
// transaction w committed so far, and returns the file's bytes then. A
// webhook endpoint's key ("<sink>/<endpoint>") is read as gateway.CursorOf
// does: its own cursor, or its sink's shared one.
func checkpointAfter(t *testing.T, path, key string, w *outboxtest.Workload) []byte {
	t.Helper()
	var last string // the newest: producers commit side by side
	for _, txn := range w.Committed() {
		if last == "" || seqOf(txn.GTID) > seqOf(last) {
			last = txn.GTID
		}
	}
	var b []byte
	eventually.Within(t, 30*time.Second, "a checkpoint of "+key+" covering "+last, func() bool {
		st, err := checkpoint.OpenFileReadOnly(path)
		if err != nil {
			return false
		}
		cp, _, err := gateway.CursorOf(context.Background(), st, key)
		if err != nil || cp.Position.GTIDSet == "" || seqOf(cp.Position.GTIDSet) < seqOf(last) {
			return false
		}
		b, err = os.ReadFile(path)
		return err == nil
	})
	return b
}

// seqOf is the sequence number of a domain-0 MariaDB GTID or GTID set.
func seqOf(g string) int {
	var d, s, n int
	fmt.Sscanf(g, "%d-%d-%d", &d, &s, &n)
	return n
}

// produce commits a workload part whose ids start with prefix, and waits
// until the destination holds every event committed so far.
func produce(t *testing.T, dbname string, w *outboxtest.Workload, prefix string, c readBackCase) {
	t.Helper()
	w.Prefix = prefix
	outboxtest.Produce(context.Background(), t, srv.DB(t, dbname), w, 2, 30, []int{1, 4, 7, 2}, 100)
	eventually.Within(t, 60*time.Second, "every event in the destination", func() bool {
		ids := map[string]bool{}
		for _, d := range c.read(t) {
			ids[d.ID] = true
		}
		return len(ids) >= w.Events()
	})
}

// Three runs of a relay on one destination, each stopped as if killed right
// after a checkpoint (its checkpoint file put back to a copy taken
// mid-run, with more delivered since):
//
//  1. delivers A1 then A2, and is "killed" with only A1 in its checkpoint;
//     between the runs, c.spoil makes the destination unreadable to it;
//  2. cannot tell what the destination holds: it logs a warning, counts
//     outbox_relay_readback_fallbacks_total, and sends A2 again
//     (at-least-once, nothing lost); it delivers B1 then B2, and is
//     "killed" with only B1 in its checkpoint;
//  3. reads back again normally (what spoiled it is older than its
//     checkpoint now): it finds B2 and does not send it again, and
//     delivers C.
//
// In the end every committed event is there, in commit order per
// aggregate, A2's events twice and every other one once.
func readBackFallBack(t *testing.T, serverID int, c readBackCase) {
	dbname, w := newOutbox(t)
	cpPath := filepath.Join(t.TempDir(), "cp.json")
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s}
delivery: {batch_size: 100, retry_backoff: 50ms, max_retry_backoff: 500ms}
sinks:
%s`, srv.Port, serverID, dbname, cpPath, c.yaml)))
	if err != nil {
		t.Fatal(err)
	}
	killedAt := func(cp []byte) {
		if err := os.WriteFile(cpPath, cp, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	run := startReadBackRun(t, cfg)
	waitForCheckpoint(t, cpPath)
	produce(t, dbname, w, "a1-", c)
	cp := checkpointAfter(t, cpPath, c.sink, w)
	before := w.Events()
	produce(t, dbname, w, "a2-", c)
	a2 := w.Events() - before
	run.stop(t)
	killedAt(cp)
	c.spoil(t)

	run = startReadBackRun(t, cfg)
	eventually.Within(t, 30*time.Second, "the second run's read-back", func() bool { return run.fallBacks(t, c.sink) > 0 })
	produce(t, dbname, w, "b1-", c)
	cp = checkpointAfter(t, cpPath, c.sink, w)
	before = w.Events()
	produce(t, dbname, w, "b2-", c)
	b2 := w.Events() - before
	n := run.fallBacks(t, c.sink) // the relay's metrics are gone once it stopped
	run.stop(t)
	held, _, warnings := run.readBack(t)
	if n != 1 || held || len(warnings) != 1 || !strings.Contains(warnings[0], c.want) {
		t.Errorf("second run: %v fall-backs, read-back held %v, warnings %q; want 1 fall-back warning saying %q", n, held, warnings, c.want)
	}
	killedAt(cp)

	run = startReadBackRun(t, cfg)
	produce(t, dbname, w, "c-", c)
	n = run.fallBacks(t, c.sink)
	run.stop(t)
	held, unlisted, warnings := run.readBack(t)
	if n != 0 || !held || len(warnings) != 0 {
		t.Errorf("third run: %v fall-backs, read-back held %v, warnings %q; want it to read back again", n, held, warnings)
	}
	if unlisted != b2 {
		t.Errorf("third run: read-back found %d events its checkpoint did not list, want B2's %d", unlisted, b2)
	}

	got := c.read(t)
	outboxtest.Check(t, w, got, false)
	times := map[string]int{}
	for _, d := range got {
		times[d.ID]++
	}
	twice := 0
	for id, n := range times {
		switch {
		case strings.HasPrefix(id, "a2-") && n == 2:
			twice++
		case n != 1:
			t.Errorf("event %s is there %d times", id, n)
		}
	}
	if twice != a2 {
		t.Errorf("%d of A2's %d events are there twice: the second run, unable to read back, should have sent each again", twice, a2)
	}
	t.Logf("A2 %d events sent again after the fall-back; B2 %d events read back and not sent again", a2, b2)
}

// Kafka: another producer writes to the sink's partition between two runs
// (a record without the relay_sink header; or in a transaction, so that the
// partition ends with its commit marker, which read-back used to stop at
// with an error retried for ever), or the topic gets more partitions (keys
// move: a partition no longer holds a prefix of what was routed to it).
func TestKafkaReadBackFallsBackLoudlyAndRecovers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, brokers []string)
		want  string
	}{
		{"another writer on the partition", func(t *testing.T, brokers []string) {
			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "outbox.event.order", Key: []byte("order-1"), Value: []byte("{}")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}, "another producer writes here"},
		{"a transactional producer on the partition: its commit marker is the last offset", func(t *testing.T, brokers []string) {
			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("other-app"))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx := context.Background()
			if err := cl.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "outbox.event.order", Key: []byte("order-1"), Value: []byte("{}")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatal(err)
			}
		}, "another producer writes here"},
		{"more partitions than at the checkpoint", func(t *testing.T, brokers []string) {
			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			res, err := kadm.NewClient(cl).CreatePartitions(context.Background(), 4, "outbox.event.order")
			if err == nil {
				err = res.Error()
			}
			if err != nil {
				t.Fatal(err)
			}
		}, "keys moved between partitions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := startKafka(t)
			brokers := k.ListenAddrs()
			col := collect(t, brokers, "outbox.event.order")
			readBackFallBack(t, int(testserver.ServerID()), readBackCase{sink: "kafka",
				yaml: fmt.Sprintf(`
  - name: kafka
    type: kafka
    kafka: {brokers: [%s], request_timeout: 2s, create_topics: {enabled: true, partitions: 4}}
`, strings.Join(brokers, ",")),
				read: func(*testing.T) []outboxtest.Delivered {
					var out []outboxtest.Delivered
					for _, r := range col.records() {
						if r.headers["relay_sink"] == "kafka" {
							out = append(out, outboxtest.Delivered{ID: r.headers["id"], AggregateID: r.key, GTID: r.headers["gtid"]})
						}
					}
					return out
				},
				spoil: func(t *testing.T) {
					tc.spoil(t, brokers)
					// A consumer sees new partitions only once it refreshes
					// its metadata: read with a new one.
					col.stop()
					col = collect(t, brokers, "outbox.event.order")
				},
				want: tc.want,
			})
		})
	}
}

// Redis Streams: another client appends to the sink's stream between two
// runs (an entry without the relay_sink field).
func TestRedisReadBackFallsBackLoudlyAndRecovers(t *testing.T) {
	sinktest.Require(t, "redis-server", "127.0.0.1:6379")
	key := "rb" + sinktest.Unique() + ":outbox"
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer c.Close()
	defer c.Del(context.Background(), key)
	readBackFallBack(t, int(testserver.ServerID()), readBackCase{sink: "redis",
		yaml: fmt.Sprintf(`
  - name: redis
    type: redis
    redis: {addr: "127.0.0.1:6379", stream: %q, timeout: 2s}
`, key),
		read: func(t *testing.T) []outboxtest.Delivered {
			return redisDelivered(t, c, key, func(v map[string]any) bool { return v["relay_sink"] == "redis" })
		},
		spoil: func(t *testing.T) {
			if err := c.XAdd(context.Background(), &goredis.XAddArgs{Stream: key, Values: map[string]any{"id": "other", "payload": "{}"}}).Err(); err != nil {
				t.Fatal(err)
			}
		},
		want: "another producer writes here",
	})
}

// redisDelivered reads the stream key back: the entries keep says are the
// sink's, as deliveries.
func redisDelivered(t *testing.T, c *goredis.Client, key string, keep func(values map[string]any) bool) []outboxtest.Delivered {
	t.Helper()
	msgs, err := c.XRange(context.Background(), key, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []outboxtest.Delivered
	for _, m := range msgs {
		if !keep(m.Values) {
			continue
		}
		s := func(k string) string { v, _ := m.Values[k].(string); return v }
		out = append(out, outboxtest.Delivered{ID: s("id"), AggregateID: s("aggregate_id"), GTID: s("gtid")})
	}
	return out
}
