package audit

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

// BenchmarkComparison compares 1,000,000 events with their deliveries (4
// logs, 10,000 aggregates, a few missing, duplicated and out of order) at
// several memory bounds, in memory alone: events/s and the peak heap above
// the heap before (GC at 10% growth, so the peak is near the live heap).
func BenchmarkComparison(b *testing.B) {
	d := makeDestination(1_000_000, 10_000)
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	for _, mem := range []int64{256 << 20, 64 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("%dMiB", mem>>20), func(b *testing.B) {
			for range b.N {
				runtime.GC()
				base := heapObjects()
				var peak uint64
				stop := make(chan struct{})
				done := make(chan struct{})
				go func() {
					defer close(done)
					for {
						if v := heapObjects(); v > peak {
							peak = v
						}
						select {
						case <-stop:
							return
						case <-time.After(5 * time.Millisecond):
						}
					}
				}()
				start := time.Now()
				c := NewComparison(Options{Memory: mem, TempDir: b.TempDir()})
				for _, e := range d.events {
					if err := c.Expect(e, ""); err != nil {
						b.Fatal(err)
					}
				}
				for _, x := range d.deliveries {
					if err := c.Deliver(x); err != nil {
						b.Fatal(err)
					}
				}
				r, err := c.Report(context.Background(), "s", &Span{Events: len(d.events)})
				c.Close()
				elapsed := time.Since(start)
				close(stop)
				<-done
				if err != nil || r.MissingCount == 0 {
					b.Fatal(err, r.MissingCount)
				}
				b.ReportMetric(float64(len(d.events))/elapsed.Seconds(), "events/s")
				b.ReportMetric(float64(peak-min(peak, base))/(1<<20), "peak-heap-MB")
				b.ReportMetric(float64(r.Spill.Runs), "runs")
			}
		})
	}
}

func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
