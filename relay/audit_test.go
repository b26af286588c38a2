package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/audit"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/position"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
	"github.com/outbox-relay/outbox-relay/source"
)

// auditSink audits cfg's first sink over (from, to] with the Auditor its
// kind declares (sink.Kind.Audit), allowing a minute of clock skew; queue
// is the stream queue of a rabbitmq sink.
func auditSink(t *testing.T, cfg *config.Config, from, to event.Position, opts audit.Options, queue string) (audit.Report, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, err := source.Open(ctx, cfg.Source)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	info, err := source.Inspect(ctx, db, cfg.Source)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := relay.AuditReader(cfg, info, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	kind, ok := sink.KindOf(cfg.Sinks[0].Type)
	if !ok || kind.Audit == nil {
		t.Fatalf("sink type %s declares no read-back", cfg.Sinks[0].Type)
	}
	a, err := kind.Audit(sink.AuditParams{Config: cfg.Sinks[0].Config, ClockSkew: time.Minute, Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rng := audit.Range{From: audit.Bound{GTID: from.GTIDSet}, To: audit.Bound{GTID: to.GTIDSet}}
	return audit.Run(ctx, opts, rc, rng, from, cur, cfg.Sinks[0].Name, a)
}

// auditRange audits cfg's first sink over (from, to]; an error fails t.
func auditRange(t *testing.T, cfg *config.Config, from, to event.Position, opts audit.Options) audit.Report {
	t.Helper()
	r, err := auditSink(t, cfg, from, to, opts, "")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// healthy fails unless r found every one of n events and nothing else wrong.
func healthy(t *testing.T, r audit.Report, n int) {
	t.Helper()
	if r.Events != n || !r.OK() || r.UnexpectedCount != 0 || r.OrderCount != 0 {
		t.Fatalf("a healthy run: %d events (want %d), missing %v, unexpected %v, order %v", r.Events, n, missingIDs(r), r.Unexpected, r.Order)
	}
}

// streamAudit runs a relay with sinkYAML, commits a workload, waits until
// read (the destination's ids in order, and a function that deletes one)
// holds every event, and checks that an audit finds the run healthy and,
// after every 7th id is deleted from the destination, exactly those
// missing.
func streamAudit(t *testing.T, sinkYAML string, read func() (ids []string, del func(i int)),
	auditWith func(cfg *config.Config, from, to event.Position) audit.Report) {
	t.Helper()
	dbname, w := newOutbox(t)
	db := srv.DB(t, dbname)
	cfg := streamRelay(t, dbname, sinkYAML)
	ctx := context.Background()
	info, _ := source.ReadInfo(ctx, db)
	from, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	outboxtest.Produce(ctx, t, db, w, 2, 30, []int{1, 3, 2}, 8)
	var ids []string
	var del func(int)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		ids, del = read()
		if distinct := len(slices.Compact(slices.Sorted(slices.Values(ids)))); distinct >= w.Events() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events at the destination", len(ids), w.Events())
		}
	}
	to, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	healthy(t, auditWith(cfg, from, to), w.Events())

	var lost []string
	for i, id := range ids {
		if i%7 == 3 {
			lost = append(lost, id)
		}
	}
	for i, id := range ids { // every copy of a lost id
		if slices.Contains(lost, id) {
			del(i)
		}
	}
	slices.Sort(lost)
	lost = slices.Compact(lost)
	r := auditWith(cfg, from, to)
	if got := missingIDs(r); !slices.Equal(got, lost) || r.Events != w.Events() {
		t.Fatalf("after deleting %d ids: %d events, missing %v; want exactly %v", len(lost), r.Events, got, lost)
	}
}

// An audit of a healthy NATS JetStream run reports nothing; deleting
// messages from the stream makes it report exactly their ids.
func TestAuditNATSFindsExactlyTheDeletedMessages(t *testing.T) {
	sinktest.Require(t, "nats-server (JetStream)", "127.0.0.1:4222")
	u := sinktest.Unique()
	stream, prefix := "A"+u, "a"+u
	nc, err := natsgo.Connect("nats://127.0.0.1:4222")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	defer js.DeleteStream(context.Background(), stream)
	streamAudit(t, fmt.Sprintf(`
  - name: nats
    type: nats
    nats:
      urls: [nats://127.0.0.1:4222]
      stream: %s
      subject: %s.outbox.event.{{.AggregateType}}
      create_stream: {enabled: true, subjects: [%s.>], storage: memory}
`, stream, prefix, prefix), func() ([]string, func(int)) {
		ctx := context.Background()
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return nil, nil
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		var seqs []uint64
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				continue // deleted
			}
			ids, seqs = append(ids, m.Header.Get("id")), append(seqs, seq)
		}
		return ids, func(i int) {
			if err := st.DeleteMsg(ctx, seqs[i]); err != nil {
				t.Fatal(err)
			}
		}
	}, func(cfg *config.Config, from, to event.Position) audit.Report {
		return auditRange(t, cfg, from, to, audit.Options{})
	})
}

// An audit of a healthy Redis Streams run reports nothing; deleting entries
// (XDEL) makes it report exactly their ids.
func TestAuditRedisFindsExactlyTheDeletedEntries(t *testing.T) {
	sinktest.Require(t, "redis-server", "127.0.0.1:6379")
	prefix := "a" + sinktest.Unique()
	cl := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer cl.Close()
	key := prefix + ":outbox:event:order"
	defer cl.Del(context.Background(), key)
	streamAudit(t, fmt.Sprintf(`
  - name: redis
    type: redis
    redis: {addr: "127.0.0.1:6379", stream: "%s:outbox:event:{{.AggregateType}}"}
`, prefix), func() ([]string, func(int)) {
		ctx := context.Background()
		msgs, err := cl.XRange(ctx, key, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]string, len(msgs))
		for i, m := range msgs {
			ids[i], _ = m.Values["id"].(string)
		}
		return ids, func(i int) {
			if err := cl.XDel(ctx, key, msgs[i].ID).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}, func(cfg *config.Config, from, to event.Position) audit.Report {
		return auditRange(t, cfg, from, to, audit.Options{})
	})
}

func missingIDs(r audit.Report) []string {
	var out []string
	for _, m := range r.Missing {
		out = append(out, m.ID)
	}
	slices.Sort(out)
	return out
}

// An audit of a healthy run reports nothing; dropping a partition's records
// makes it report exactly their ids; an event committed while the relay was
// stopped is reported missing.
func TestAuditKafkaFindsExactlyTheMissingEvents(t *testing.T) {
	dbname, w := newOutbox(t)
	db := srv.DB(t, dbname)
	k := startKafka(t)
	cfg, stop := kafkaRelay(t, dbname, k.ListenAddrs(), "")
	time.Sleep(300 * time.Millisecond)
	ctx := context.Background()
	info, _ := source.ReadInfo(ctx, db)
	from, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	c := collect(t, k.ListenAddrs(), "outbox.event.order")
	txns := 60                             // enough for the 64 KiB audit below to spill
	if os.Getenv("OUTBOX_MEASURE") != "" { // the audit rate: -run TestAuditKafka -v
		txns = 3000
	}
	outboxtest.Produce(ctx, t, db, w, 2, txns, []int{1, 3, 2}, 8)
	if recs := c.waitFor(t, w.Events(), 30*time.Second); len(recs) < w.Events() {
		t.Fatalf("%d of %d events in the topic", len(recs), w.Events())
	}
	to, _ := source.CurrentPosition(ctx, db, info)
	time.Sleep(500 * time.Millisecond)
	stop()

	rep := auditRange(t, cfg, from, to, audit.Options{})
	healthy(t, rep, w.Events())

	// Drop every record of partition 0.
	var lost []string
	for _, r := range c.records() {
		if r.partition == 0 {
			lost = append(lost, r.headers["id"])
		}
	}
	slices.Sort(lost)
	lost = slices.Compact(lost)
	if len(lost) == 0 {
		t.Fatal("partition 0 holds no record")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, "outbox.event.order")
	if err != nil {
		t.Fatal(err)
	}
	var o kadm.Offsets
	end, _ := ends.Lookup("outbox.event.order", 0)
	o.AddOffset("outbox.event.order", 0, end.Offset, -1)
	dr, err := adm.DeleteRecords(ctx, o)
	if err == nil {
		err = dr.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	rep = auditRange(t, cfg, from, to, audit.Options{})
	if got := missingIDs(rep); !slices.Equal(got, lost) {
		t.Fatalf("after dropping partition 0's %d records, missing %v; want exactly %v", len(lost), got, lost)
	}
	// The same audit with the least memory spills its sorts and finds the same.
	small := auditRange(t, cfg, from, to, audit.Options{Memory: audit.MinMemory, TempDir: t.TempDir()})
	if got := missingIDs(small); small.Spill.Runs == 0 || !slices.Equal(got, lost) || small.DuplicateCount != rep.DuplicateCount || small.OrderCount != 0 {
		t.Fatalf("with 64 KiB (%d runs spilled): missing %v, %d duplicates, %d order; want %v, %d, 0", small.Spill.Runs, got, small.DuplicateCount, small.OrderCount, lost, rep.DuplicateCount)
	}

	// One event committed while the relay is stopped.
	insertAt(t, db, time.Now(), "never-produced")
	to2, _ := source.CurrentPosition(ctx, db, info)
	rep = auditRange(t, cfg, to, to2, audit.Options{})
	if got := missingIDs(rep); !slices.Equal(got, []string{"never-produced"}) {
		t.Fatalf("an event never produced: missing %v", got)
	}
}

// A RabbitMQ stream queue bound for auditing: a healthy run audits clean;
// events whose messages never reached it (routed past it) are reported
// exactly; a classic queue is refused and left untouched.
func TestAuditRabbitMQStreamQueue(t *testing.T) {
	sinktest.Require(t, "rabbitmq", "127.0.0.1:5672")
	name := "a" + sinktest.Unique()
	auditQ, classicQ := name+"-audit", name+"-all"
	ch := rabbitChannel(t)
	defer ch.ExchangeDelete(name, false, false)
	defer ch.QueueDelete(auditQ, false, false, false)
	defer ch.QueueDelete(classicQ, false, false, false)
	if err := ch.ExchangeDeclare(name, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	// The consumers' queue takes everything; the audit's stream only orders.
	if _, err := ch.QueueDeclare(classicQ, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(auditQ, true, false, false, false, amqp.Table{"x-queue-type": "stream"}); err != nil {
		t.Fatal(err)
	}
	for q, key := range map[string]string{classicQ: "outbox.event.#", auditQ: "outbox.event.order"} {
		if err := ch.QueueBind(q, key, name, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	dbname, w := newOutbox(t)
	db := srv.DB(t, dbname)
	cfg := streamRelay(t, dbname, fmt.Sprintf(`
  - name: rabbitmq
    type: rabbitmq
    rabbitmq: {addr: "127.0.0.1:5672", exchange: %s}
`, name))
	ctx := context.Background()
	info, _ := source.ReadInfo(ctx, db)
	from, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	outboxtest.Produce(ctx, t, db, w, 2, 30, []int{1, 3, 2}, 8)
	mid, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	var lost []string
	for i := range 5 {
		id := fmt.Sprintf("invoice-%d", i)
		lost = append(lost, id)
		if _, err := db.Exec("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, 'invoice', 'inv', 'created', '{}')", id); err != nil {
			t.Fatal(err)
		}
	}
	n := w.Events() + len(lost)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		q, err := ch.QueueDeclarePassive(classicQ, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if q.Messages >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages in the consumers' queue", q.Messages, n)
		}
	}
	to, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	auditQueue := func(q string, to event.Position) (audit.Report, error) {
		return auditSink(t, cfg, from, to, audit.Options{}, q)
	}
	// Up to the last order event: clean.
	r, err := auditQueue(auditQ, mid)
	if err != nil {
		t.Fatal(err)
	}
	healthy(t, r, w.Events())
	// With the invoices: exactly they are missing.
	if r, err = auditQueue(auditQ, to); err != nil {
		t.Fatal(err)
	}
	if got := missingIDs(r); !slices.Equal(got, lost) || r.Events != n {
		t.Fatalf("%d events, missing %v; want exactly %v", r.Events, got, lost)
	}
	// A classic queue is refused, and keeps every message.
	if _, err := auditQueue(classicQ, to); err == nil || !strings.Contains(err.Error(), "not a stream queue") {
		t.Fatalf("auditing a classic queue: %v", err)
	}
	if q, err := ch.QueueDeclarePassive(classicQ, true, false, false, false, nil); err != nil || q.Messages != n {
		t.Fatalf("the classic queue holds %d messages after the refusal (%v); want %d", q.Messages, err, n)
	}
}

// A --from time starts at the last binlog begun StartSlack before it (its
// GTID list as the server reads it), or at the oldest; the read from there
// keeps exactly the events committed at or after the time.
func TestAuditFromATimeStartsAtTheLastFileBegunBeforeIt(t *testing.T) {
	dbname, _ := newOutbox(t)
	db := srv.DB(t, dbname)
	ctx := context.Background()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d}
tables: [{name: %s.outbox}]
checkpoint: {path: %s}
sinks: [{name: out, type: stdout}]
`, srv.Port, testserver.ServerID(), dbname, filepath.Join(t.TempDir(), "cp.json"))))
	if err != nil {
		t.Fatal(err)
	}
	insertAt(t, db, time.Now(), "before-the-flush")
	if _, err := db.Exec("FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(2 * time.Hour).Truncate(time.Second)
	insertAt(t, db, time.Now(), "present")
	insertAt(t, db, future, "future-1", "future-2")
	info, err := source.Inspect(ctx, db, cfg.Source)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := relay.AuditReader(cfg, info, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	files, err := source.BinaryLogs(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	names := source.FileNames(files)
	if len(names) < 2 {
		t.Fatalf("binlogs %v: want at least two", names)
	}
	last := names[len(names)-1]
	start, fs, err := audit.StartFor(ctx, rc, names, future)
	if err != nil {
		t.Fatal(err)
	}
	list, err := source.OldestGTIDList(ctx, db, last)
	if err != nil {
		t.Fatal(err)
	}
	if fs.File != last || start.File != last || !position.Covers(info.Flavor, event.Position{GTIDSet: fs.GTIDs}, event.Position{GTIDSet: list}) ||
		!position.Covers(info.Flavor, event.Position{GTIDSet: list}, event.Position{GTIDSet: fs.GTIDs}) || fs.Begun.IsZero() {
		t.Fatalf("from %s: start %+v (file start %+v); want %s with GTID list %q", future, start, fs, last, list)
	}
	if _, fs, err := audit.StartFor(ctx, rc, names, time.Unix(0, 0)); err != nil || fs.File != names[0] {
		t.Fatalf("from 1970: %+v, %v; want the oldest, %s", fs, err, names[0])
	}
	cur, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	span, err := audit.Scan(ctx, rc, audit.Range{From: audit.Bound{Time: future}}, start, cur, func(e audit.Event, _ *event.Event, _ event.Position) error {
		got = append(got, e.ID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"future-1", "future-2"}) || span.Transactions != 1 {
		t.Fatalf("read %v in %d transactions; want future-1, future-2 in 1", got, span.Transactions)
	}
}
