package relay_test

import (
	"context"
	"log/slog"
	"runtime/debug"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/audit"
	"github.com/outbox-relay/outbox-relay/sink/kafka"
	"github.com/outbox-relay/outbox-relay/source"
)

// BenchmarkAudit audits the 200,000-event backlog (20,000 transactions, 1,000
// aggregates) after a relay delivered it to an in-process Kafka-protocol
// broker (6 partitions): the binlog range read, every record read back, the
// comparison and the order check. "256MiB" is the default memory (nothing
// spills); "16MiB" and "1MiB" spill sorted runs to a temporary directory.
// Reported: events/s, the peak heap above the heap before the audit (GC at
// 10% growth meanwhile, so the peak is near the live heap; the in-process
// broker's fetch responses are in it too), and the runs spilled.
func BenchmarkAudit(b *testing.B) {
	makeBacklog(b)
	k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(6, "outbox.event.order"))
	if err != nil {
		b.Fatal(err)
	}
	defer k.Close()
	cfg, _ := drainBacklog(b, k.ListenAddrs()[0])
	ctx := context.Background()
	db, err := source.Open(ctx, cfg.Source)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	info, err := source.Inspect(ctx, db, cfg.Source)
	if err != nil {
		b.Fatal(err)
	}
	rc, err := audit.Reader(cfg, info, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	kc := *cfg.Sinks[0].Config.(*kafka.Config)
	kc.Defaults()
	rb, err := kafka.NewAuditor(kc)
	if err != nil {
		b.Fatal(err)
	}
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	for _, mem := range []struct {
		name  string
		bytes int64
	}{{"256MiB", 256 << 20}, {"16MiB", 16 << 20}, {"1MiB", 1 << 20}} {
		b.Run(mem.name, func(b *testing.B) {
			for range b.N {
				cur, err := source.CurrentPosition(ctx, db, info)
				if err != nil {
					b.Fatal(err)
				}
				base := heapAfterGC()
				peak := watchHeap()
				start := time.Now()
				r, err := audit.Run(ctx, audit.Options{Memory: mem.bytes, TempDir: b.TempDir()}, rc,
					audit.Range{From: audit.Bound{GTID: backlog.start.GTIDSet}, To: audit.Bound{GTID: backlog.end.GTIDSet}}, backlog.start, cur, "kafka", rb)
				elapsed := time.Since(start)
				top := peak.end()
				if err != nil {
					b.Fatal(err)
				}
				if r.Events != backlogRows || !r.OK() || r.UnexpectedCount != 0 || r.OrderCount != 0 {
					b.Fatalf("%d events, %d missing, %d unexpected, %d order", r.Events, r.MissingCount, r.UnexpectedCount, r.OrderCount)
				}
				b.ReportMetric(float64(r.Events)/elapsed.Seconds(), "events/s")
				b.ReportMetric(float64(top-min(top, base))/(1<<20), "peak-heap-MB")
				b.ReportMetric(float64(r.Spill.Runs), "runs")
			}
		})
	}
}
