package deadletter_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// A tenant's List of a file store holding 2,000 records of 100 tenants
// (2 KB payloads) reads its own 20 files; the operator's reads all of
// them, as every tenant's did before records kept their tenant.
func BenchmarkFileList(b *testing.B) {
	st, err := deadletter.OpenFile(b.TempDir() + "/dl")
	if err != nil {
		b.Fatal(err)
	}
	benchList(b, st)
}

// The same in the MySQL store: a tenant's List reads its 20 rows by the
// index ix_tenant.
func BenchmarkMySQLList(b *testing.B) {
	srv := testserver.Start(b, testserver.Options{NoBinlog: true})
	st, err := deadletter.OpenMySQL(context.Background(), srv.DB(b, srv.NewDatabase(b)), "")
	if err != nil {
		b.Fatal(err)
	}
	benchList(b, st)
}

func benchList(b *testing.B, st deadletter.Store) {
	payload := []byte(`{"x": "` + strings.Repeat("p", 2048) + `"}`)
	for i := range 2000 {
		err := st.Put(context.Background(), deadletter.Letter{Sink: "hooks/e", Tenant: fmt.Sprintf("tenant-%d", i%100), Reason: "400",
			First: time.Now(), Last: time.Now(), Event: &event.Event{ID: fmt.Sprint(i), AggregateID: "a", Payload: payload}})
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		f    deadletter.Filter
		want int
	}{{"one tenant", deadletter.Filter{Tenant: "tenant-7"}, 20}, {"every record", deadletter.Filter{}, 2000}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				recs, err := st.List(context.Background(), c.f)
				if err != nil || len(recs) != c.want {
					b.Fatalf("List = %d records, %v", len(recs), err)
				}
			}
		})
	}
}

// A page of 100 records of the file store, from the middle of 10,000 and
// of 100,000 records: it reads the directory's names (all of them) and
// opens only the page's 100 files.
//
//	go test -run '^$' -bench FilePage ./deadletter/
func BenchmarkFilePage(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			st, err := deadletter.OpenFile(dir)
			if err != nil {
				b.Fatal(err)
			}
			var mid string
			for i := range n {
				// Written as Put writes them, without its fsyncs: the
				// setup of 100,000 files would take minutes.
				id := fmt.Sprintf("20261207T000000.%09dZ-%06d", i, i%1000000)
				if i == n/2 {
					mid = id
				}
				body := fmt.Sprintf(`{"id":%q,"sink":"hooks/e%d","event":{"id":"evt-%d"},"reason":"gave up","attempts":5}`, id, i, i)
				if err := os.WriteFile(filepath.Join(dir, id+".json"), []byte(body), 0o640); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				recs, err := st.List(context.Background(), deadletter.Filter{After: mid, Limit: 100})
				if err != nil || len(recs) != 100 {
					b.Fatalf("List: %d records, %v", len(recs), err)
				}
			}
		})
	}
}

// A page of 100 dead letters of one endpoint of the file store, with
// 100,000 other endpoints' letters present (one each) and the endpoint's
// 200 spread among them: its index directory's names are read, and its
// page's files opened; p99-ns is the 99th percentile of the pages' times.
// The store is written as an earlier version left it (no index), so the
// setup also times the first OpenFile, which indexes it.
//
//	go test -run '^$' -bench FileEndpointPage -benchtime 200x ./deadletter/
func BenchmarkFileEndpointPage(b *testing.B) {
	const others, own = 100_000, 200
	dir := b.TempDir()
	var n int
	write := func(sink string) {
		id := fmt.Sprintf("20261207T000000.%09dZ-%06d", n, n%1000000)
		n++
		body := fmt.Sprintf(`{"id":%q,"sink":%q,"event":{"id":"evt-%d"},"reason":"gave up","attempts":5}`, id, sink, n)
		if err := os.WriteFile(filepath.Join(dir, id+".json"), []byte(body), 0o640); err != nil {
			b.Fatal(err)
		}
	}
	for i := range others {
		write(fmt.Sprintf("hooks/e%06d", i))
		if i%(others/own) == 0 {
			write("hooks/target")
		}
	}
	start := time.Now()
	st, err := deadletter.OpenFile(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("the first OpenFile of %d records took %v", n, time.Since(start))
	var times []time.Duration
	for b.Loop() {
		t0 := time.Now()
		recs, err := st.List(context.Background(), deadletter.Filter{Sink: "hooks/target", Limit: 100})
		times = append(times, time.Since(t0))
		if err != nil || len(recs) != 100 || recs[0].Sink != "hooks/target" {
			b.Fatalf("List: %d records, %v", len(recs), err)
		}
	}
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)*99/100].Nanoseconds()), "p99-ns")
}
