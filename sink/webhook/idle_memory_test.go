package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/metrics"
)

// idleBytesBound is what an idle endpoint row may cost the webhook kind's
// structures (its row, its gateway endpoint's Open and filter, its metrics
// and health), in bytes: the budget for the whole relay is 1.5 KB
// per idle endpoint, of which the gateway core takes its share.
const idleBytesBound = 600

// idleFootprint is the live heap, by structure, that n idle rows of an
// endpoints table (one tenant each, as the bench's) cost the webhook
// kind: the follower's rows and the gateway endpoints it hands on (their
// Open and filter; not the gateway core's own records: the slice holding
// them is made before the first reading), then the metrics of each
// endpoint as the relay makes them (its pipeline observer, its state),
// then the gateway's Health, then what each keeps once it has woken (its
// sink opened and closed: the carried rate limiter, each row limited to
// 10 attempts a second). Each is the difference of the live heap
// (runtime.ReadMemStats after runtime.GC) before and after.
type idleFootprint struct{ rows, metrics, health, woken int64 }

func measureIdle(tb testing.TB, n int) idleFootprint {
	tb.Helper()
	eps := make([]gateway.Endpoint, 0, n)
	keys := make([]string, 0, n)
	m, err := metrics.New(prometheus.NewRegistry(), "test")
	if err != nil {
		tb.Fatal(err)
	}
	gm, err := gateway.NewMetrics(m)
	if err != nil {
		tb.Fatal(err)
	}
	health := gateway.NewHealth()
	live := func() int64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}

	start := live()
	sm := gm.Sink("hooks")
	wc := &SinkConfig{EndpointsTable: &TableConfig{Table: "shop.outbox_endpoints", TenantHeader: "tenant"}}
	tbl, err := followTable(gateway.FanOutParams{Sink: "hooks", Config: wc, Health: health, States: sm,
		Observer: func(key string) any { return sm.Endpoint(key).Retries() }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	te := tbl.(followed).te
	row := goodRow()
	row["rate_limit"] = 10.0
	for i := range n {
		// A row as the table's read hands it on: fresh strings each.
		row["id"], row["url"], row["tenant"] = fmt.Sprintf("r%07d", i), fmt.Sprintf("https://hooks.example/in/%d", i%10), fmt.Sprintf("t%07d", i)
		got := te.loadRows([]map[string]any{row})
		if len(got) != 1 || got[0].Held || got[0].Open == nil || got[0].Sink != nil {
			tb.Fatalf("row %d made %+v, want one endpoint to wake with Open", i, got)
		}
		eps = append(eps, got[0])
		keys = append(keys, got[0].Key)
	}
	rowsAt := live()

	for _, key := range keys {
		sm.Endpoint(key) // the relay's pipeline observer of it
		sm.State(key, gateway.Attached)
	}
	metricsAt := live()

	for _, key := range keys {
		health.Attempt(key, true) // it delivered once: nothing failing to keep
	}
	healthAt := live()

	for _, ep := range eps {
		s, err := ep.Open()
		if err != nil {
			tb.Fatal(err)
		}
		if err := s.Close(context.Background()); err != nil {
			tb.Fatal(err)
		}
	}
	wokenAt := live()
	runtime.KeepAlive(eps)
	runtime.KeepAlive(te)
	runtime.KeepAlive(health)
	runtime.KeepAlive(gm)
	return idleFootprint{rows: rowsAt - start, metrics: metricsAt - rowsAt, health: healthAt - metricsAt, woken: wokenAt - healthAt}
}

// perEndpoint is the footprint of each of the rows 10,000 add to 1.
func perEndpoint(tb testing.TB, n int) (rows, metrics, health, woken float64) {
	one, many := measureIdle(tb, 1), measureIdle(tb, n)
	per := func(a, b int64) float64 { return (float64(b) - float64(a)) / float64(n-1) }
	return per(one.rows, many.rows), per(one.metrics, many.metrics), per(one.health, many.health), per(one.woken, many.woken)
}

// An idle endpoint row costs the webhook kind its row's strings and a few
// small records, not a sink: at 10,000 rows each costs less than
// idleBytesBound bytes of live heap across the follower, the endpoint it
// hands the gateway, the metrics and the health. (Memory is measured, not
// time: the bound holds on a loaded machine.)
func TestAnIdleEndpointRowCostsLessThanTheBound(t *testing.T) {
	rows, mets, health, _ := perEndpoint(t, 10_000)
	total := rows + mets + health
	t.Logf("per idle endpoint: rows %.0f B, metrics %.0f B, health %.0f B: %.0f B", rows, mets, health, total)
	if total > idleBytesBound {
		t.Errorf("an idle endpoint row costs %.0f bytes (rows %.0f, metrics %.0f, health %.0f), want at most %d", total, rows, mets, health, idleBytesBound)
	}
}

// The bytes of live heap an idle endpoint row costs the webhook kind, by
// structure (rows-B/endpoint: the follower's row and the endpoint handed
// to the gateway; metrics-B/endpoint; health-B/endpoint), at 10,000 rows,
// and what one that has woken once keeps besides (woken-B/endpoint: its
// rate limiter and the rest of carried).
func BenchmarkIdleEndpointBytes(b *testing.B) {
	var rows, mets, health, woken float64
	for range b.N {
		rows, mets, health, woken = perEndpoint(b, 10_000)
	}
	b.ReportMetric(rows, "rows-B/endpoint")
	b.ReportMetric(mets, "metrics-B/endpoint")
	b.ReportMetric(health, "health-B/endpoint")
	b.ReportMetric(woken, "woken-B/endpoint")
	b.ReportMetric(rows+mets+health, "B/endpoint")
}
