package relay_test

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/audit"
	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sink/kafka"
	"github.com/outbox-relay/outbox-relay/source"
)

// auditKafka audits cfg's kafka sink over (from, to].
func auditKafka(t *testing.T, cfg *config.Config, from, to event.Position, opts audit.Options) audit.Report {
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
	cur, err := canal.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := relay.AuditReader(cfg, info, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	kc := *cfg.Sinks[0].Kafka
	kc.Defaults()
	rb, err := kafka.NewReadBack(kc)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	rng := audit.Range{From: audit.Bound{GTID: from.GTIDSet}, To: audit.Bound{GTID: to.GTIDSet}}
	rep, err := audit.Run(ctx, opts, rc, rng, from, cur, "kafka", rb.Topic, func(c *audit.Comparison, span *audit.Span, topics []string) error {
		return audit.Kafka(ctx, c, span, topics, kc.Brokers, rb)
	})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	t.Logf("audit of %d events (%d transactions) took %s: %.0f events/s", rep.Events, rep.Transactions, took.Round(time.Millisecond), float64(rep.Events)/took.Seconds())
	return rep
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
	info, _ := canal.Inspect(ctx, db)
	from, err := canal.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	c := collect(t, k.ListenAddrs(), "outbox.event.order")
	txns := 60 // enough for the 64 KiB audit below to spill
	if os.Getenv("OUTBOX_MEASURE") != "" { // the audit rate: -run TestAuditKafka -v
		txns = 3000
	}
	outboxtest.Produce(ctx, t, db, w, 2, txns, []int{1, 3, 2}, 8)
	if recs := c.waitFor(t, w.Events(), 30*time.Second); len(recs) < w.Events() {
		t.Fatalf("%d of %d events in the topic", len(recs), w.Events())
	}
	to, _ := canal.CurrentPosition(ctx, db, info)
	time.Sleep(500 * time.Millisecond)
	stop()

	rep := auditKafka(t, cfg, from, to, audit.Options{})
	if rep.Events != w.Events() || !rep.OK() || len(rep.Unexpected) != 0 || len(rep.Order) != 0 {
		t.Fatalf("a healthy run: %d events (want %d), missing %v, unexpected %v, order %v", rep.Events, w.Events(), missingIDs(rep), rep.Unexpected, rep.Order)
	}

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
	rep = auditKafka(t, cfg, from, to, audit.Options{})
	if got := missingIDs(rep); !slices.Equal(got, lost) {
		t.Fatalf("after dropping partition 0's %d records, missing %v; want exactly %v", len(lost), got, lost)
	}
	// The same audit with the least memory spills its sorts and finds the same.
	small := auditKafka(t, cfg, from, to, audit.Options{Memory: audit.MinMemory, TempDir: t.TempDir()})
	if got := missingIDs(small); small.Spill.Runs == 0 || !slices.Equal(got, lost) || small.DuplicateCount != rep.DuplicateCount || small.OrderCount != 0 {
		t.Fatalf("with 64 KiB (%d runs spilled): missing %v, %d duplicates, %d order; want %v, %d, 0", small.Spill.Runs, got, small.DuplicateCount, small.OrderCount, lost, rep.DuplicateCount)
	}

	// One event committed while the relay is stopped.
	insertAt(t, db, time.Now(), "never-produced")
	to2, _ := canal.CurrentPosition(ctx, db, info)
	rep = auditKafka(t, cfg, to, to2, audit.Options{})
	if got := missingIDs(rep); !slices.Equal(got, []string{"never-produced"}) {
		t.Fatalf("an event never produced: missing %v", got)
	}
}
