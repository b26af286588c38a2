package webhook

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/metrics"
	"github.com/outbox-relay/outbox-relay/sink"
)

// latencies collects Delivered latencies.
type latencies struct {
	nopObserver
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) Delivered(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// BenchmarkDeliver delivers b.N events of 200 aggregates to each of 20
// loopback endpoints, each its own Endpoint fed as its pipeline would
// (batches of 100 submitted in order, up to 4 or 32 batches in flight), with
// two signing secrets. It reports deliveries/s over all endpoints, the p99
// of the time from Submit to the 2xx, which is mostly time spent queued, and
// the process's CPU time per delivery (the receivers' included: compare it
// between builds, not with a client alone).
//
// Each runs with the attempts record off and on (attempts=file: every
// attempt handed to an attempts.Writer storing into its file store, as the
// relay with attempts.enabled and a file checkpoint store), in one run, so
// the two can be compared (BENCHMARKS.md, "Webhook attempts record").
func BenchmarkDeliver(b *testing.B) {
	for _, inFlight := range []int{4, 32} {
		for _, rec := range []string{"off", "file"} {
			b.Run(fmt.Sprintf("batches_in_flight=%d/attempts=%s", inFlight, rec), func(b *testing.B) { benchmarkDeliver(b, inFlight, rec) })
		}
	}
}

func benchmarkDeliver(b *testing.B, batchesInFlight int, record string) {
	const endpoints, aggregates, batchSize = 20, 200, 100
	events := make([]*event.Event, b.N)
	for i := range events {
		events[i] = ev(fmt.Sprintf("evt-%d", i), fmt.Sprintf("agg-%d", i%aggregates))
	}
	obs := &latencies{}
	var rec *attempts.Writer
	reg := prometheus.NewRegistry()
	if record == "file" {
		st, err := attempts.OpenFile(filepath.Join(b.TempDir(), "attempts"), 0)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		m, err := metrics.New(reg, "bench")
		if err != nil {
			b.Fatal(err)
		}
		am, err := attempts.NewMetrics(m)
		if err != nil {
			b.Fatal(err)
		}
		rec = attempts.NewWriter(st, attempts.WriterOptions{Metrics: am})
	}
	var eps []*Endpoint
	for i := range endpoints {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusNoContent)
		}))
		b.Cleanup(srv.Close)
		cfg := testConfig(srv.URL)
		cfg.Name = fmt.Sprintf("endpoint-%d", i)
		cfg.Observer = obs
		if rec != nil {
			cfg.Attempts, cfg.Sink = rec, "bench"
		}
		eps = append(eps, newEndpoint(b, cfg))
	}

	b.ResetTimer()
	cpu0 := processCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for _, e := range eps {
		wg.Go(func() {
			room := make(chan struct{}, batchesInFlight)
			var pending sync.WaitGroup
			for batch := range slices.Chunk(events, batchSize) {
				room <- struct{}{}
				pending.Add(1)
				e.Submit(context.Background(), batch, sink.Collect(len(batch), func(err error) {
					if err != nil {
						b.Error(err)
					}
					<-room
					pending.Done()
				}))
			}
			pending.Wait()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	b.StopTimer()
	if rec != nil {
		// Stored after the deliveries (the record is off their path):
		// what was dropped for a full queue says whether it kept up.
		if err := rec.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(counterValue(b, reg, "outbox_relay_attempts_dropped_total"), "attempts-dropped")
	}

	slices.Sort(obs.d)
	if len(obs.d) != endpoints*b.N {
		b.Fatalf("%d deliveries, want %d", len(obs.d), endpoints*b.N)
	}
	b.ReportMetric(float64(endpoints*b.N)/elapsed.Seconds(), "deliveries/s")
	b.ReportMetric(float64(obs.d[len(obs.d)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(cpu.Microseconds())/float64(endpoints*b.N), "cpu-µs/delivery")
	b.ReportMetric(0, "ns/op")
}

// processCPU is the process's user and system CPU time so far: the
// endpoints' and the in-process receivers' together.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// counterValue sums the samples of the counter family name in reg.
func counterValue(b *testing.B, reg prometheus.Gatherer, name string) float64 {
	b.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
