package metrics

import (
	"bytes"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
)

// OutboxEvents counts each table's events in its own series when the
// tables a stream reads alternate, those named to Source and others alike,
// and exposes the same series as counting on the vector directly.
func TestOutboxEventsPerTable(t *testing.T) {
	m, reg, _ := newTest(t)
	want, wantReg, _ := newTest(t) // counted on the vector, as every call once was
	src := m.Source("kafka", "shop.outbox", "shop.outbox2")
	want.Source("kafka", "shop.outbox", "shop.outbox2")
	calls := []struct {
		table string
		n     int
	}{
		{"shop.outbox", 1}, {"shop.outbox", 2}, {"shop.outbox2", 3}, {"shop.outbox", 4},
		{"other.outbox", 5}, {"other.outbox", 6}, {"shop.outbox2", 7}, {"other.outbox", 8},
		{"shop.outbox", 9},
	}
	for _, c := range calls {
		src.OutboxEvents(c.table, c.n)
		want.outboxEvents.WithLabelValues("kafka", c.table).Add(float64(c.n))
	}
	for table, n := range map[string]float64{"shop.outbox": 16, "shop.outbox2": 10, "other.outbox": 19} {
		if got := testutil.ToFloat64(m.outboxEvents.WithLabelValues("kafka", table)); got != n {
			t.Errorf("outbox_events_total{table=%q} = %v, want %v", table, got, n)
		}
	}
	const name = "outbox_relay_outbox_events_total"
	gotText, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain, name)
	if err != nil {
		t.Fatal(err)
	}
	wantText, err := testutil.GatherAndFormat(wantReg, expfmt.TypeTextPlain, name)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gotText, wantText) || !bytes.Contains(gotText, []byte(`table="other.outbox"} 19`)) {
		t.Errorf("exposed:\n%s\nwant:\n%s", gotText, wantText)
	}
}

// Several goroutines counting into one observer, each switching tables,
// lose no event (run with -race).
func TestOutboxEventsConcurrent(t *testing.T) {
	m, _, _ := newTest(t)
	src := m.Source("kafka", "shop.a")
	tables := []string{"shop.a", "shop.b", "shop.c"}
	const goroutines, calls = 4, 3000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				// Runs of one table, of a length that differs per goroutine.
				src.OutboxEvents(tables[(i/(g+1))%len(tables)], 1)
			}
		})
	}
	wg.Wait()
	var total float64
	for _, table := range tables {
		total += testutil.ToFloat64(m.outboxEvents.WithLabelValues("kafka", table))
	}
	if total != goroutines*calls {
		t.Fatalf("outbox_events_total summed over the tables = %v, want %v", total, goroutines*calls)
	}
	for i, table := range tables {
		var want float64
		for g := range goroutines {
			for c := range calls {
				if (c/(g+1))%len(tables) == i {
					want++
				}
			}
		}
		if got := testutil.ToFloat64(m.outboxEvents.WithLabelValues("kafka", table)); got != want {
			t.Errorf("outbox_events_total{table=%q} = %v, want %v", table, got, want)
		}
	}
}

// BenchmarkOutboxEvents counts a transaction's events as the reader does:
// a steady stream from one outbox table, from two in turn, and from two in
// turn that were not given to Source.
func BenchmarkOutboxEvents(b *testing.B) {
	for _, c := range []struct {
		name          string
		tables, given []string
	}{
		{"tables=1", []string{"shop.outbox"}, []string{"shop.outbox"}},
		{"tables=2", []string{"shop.outbox", "shop.outbox2"}, []string{"shop.outbox", "shop.outbox2"}},
		{"tables=2,not-given", []string{"shop.outbox", "shop.outbox2"}, nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			m, err := New(prometheus.NewRegistry(), "bench")
			if err != nil {
				b.Fatal(err)
			}
			src := m.Source("kafka", c.given...)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				src.OutboxEvents(c.tables[i%len(c.tables)], 1)
				i++
			}
		})
	}
}
