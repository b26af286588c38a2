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

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/audit"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/position"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
	"github.com/outbox-relay/outbox-relay/sink/sinktest/audittest"
	"github.com/outbox-relay/outbox-relay/source"
)

// auditSink audits cfg's first sink over (from, to]; queue is the stream
// queue of a rabbitmq sink (its audit flag).
func auditSink(t *testing.T, cfg *config.Config, from, to event.Position, opts audit.Options, queue string) (audit.Report, error) {
	t.Helper()
	return audittest.Audit(t, cfg, from, to, opts, map[string]string{"queue": queue})
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

var (
	healthy    = audittest.Healthy
	missingIDs = audittest.MissingIDs
)

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
	rc, err := audit.Reader(cfg, info, slog.New(slog.DiscardHandler))
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
