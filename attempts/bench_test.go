package attempts

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// What one attempt costs the relay's CPU with the record on: the hand-off
// on the delivery path (Record, a channel send), and the store's share of
// a batch of 500 (Append of the file store; the MySQL store in
// BenchmarkAppendMySQL of the external tests). Reported per attempt.
func BenchmarkRecord(b *testing.B) {
	w := NewWriter(discard{}, WriterOptions{Queue: 1 << 16})
	defer w.Close(context.Background())
	a := benchAttempt(0)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		w.Record(a)
	}
}

func BenchmarkAppendFile(b *testing.B) {
	st := openFileB(b)
	benchAppend(b, st)
}

func benchAppend(b *testing.B, st Store) {
	const batch = 500
	all := make([]Attempt, batch)
	for i := range all {
		all[i] = benchAttempt(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i += batch {
		n := min(batch, b.N-i)
		if err := st.Append(context.Background(), all[:n]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/1000/float64(b.N), "cpu-µs/attempt")
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func openFileB(b *testing.B) *File {
	st, err := OpenFile(b.TempDir()+"/a", 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

func benchAttempt(i int) Attempt {
	return Attempt{Time: time.Now(), Sink: "hooks", Endpoint: fmt.Sprint("endpoint-", i%20), EventID: fmt.Sprint("0190a3f2-7b1c-7def-8000-", i),
		EventType: "order.created", Number: 1, Status: 204, Outcome: OutcomeDelivered, Duration: 3 * time.Millisecond,
		Committed: time.Now(), GTID: "0-1-4242", File: "mysql-bin.000003", Pos: 4242}
}

type discard struct{ Store }

func (discard) Append(context.Context, []Attempt) error                { return nil }
func (discard) Prune(context.Context, time.Time, int64) (int64, error) { return 0, nil }

// BenchmarkOpenFile is what opening a file store of 200,000 attempts costs
// (the relay opens it at start): reading its segments into the index, per
// attempt, and the heap the index takes.
func BenchmarkOpenFile(b *testing.B) {
	const n, batch = 200_000, 500
	path := b.TempDir() + "/a"
	st, err := OpenFile(path, 0)
	if err != nil {
		b.Fatal(err)
	}
	all := make([]Attempt, batch)
	for i := 0; i < n; i += batch {
		for j := range all {
			all[j] = benchAttempt(i + j)
		}
		if err := st.Append(context.Background(), all); err != nil {
			b.Fatal(err)
		}
	}
	st.Close()
	var heap uint64
	b.ResetTimer()
	for range b.N {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		st, err := OpenFile(path, 0)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		heap = m1.HeapAlloc - m0.HeapAlloc
		st.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/n, "µs/attempt")
	b.ReportMetric(float64(heap)/n, "heap-B/attempt")
}

// BenchmarkFileSearchPage is a page of 100 attempts of the file store of
// 100,000, from a cursor in the middle (Before): Search starts at the
// cursor in its index, not at the newest record. "one endpoint": the page
// of one of 20 endpoints.
//
//	go test -run '^$' -bench FileSearchPage ./attempts/
func BenchmarkFileSearchPage(b *testing.B) {
	const n, batch = 100_000, 500
	st := openFileB(b)
	all := make([]Attempt, batch)
	for i := 0; i < n; i += batch {
		for j := range all {
			all[j] = benchAttempt(i + j)
		}
		if err := st.Append(context.Background(), all); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		q    Query
	}{
		{"all", Query{Before: n / 2, Limit: 100}},
		{"one endpoint", Query{Sink: "hooks", Endpoint: "endpoint-7", Before: n / 2, Limit: 100}},
	} {
		b.Run(strings.ReplaceAll(c.name, " ", "_"), func(b *testing.B) {
			for b.Loop() {
				recs, err := st.Search(context.Background(), c.q)
				if err != nil || len(recs) != 100 || recs[0].ID >= n/2 {
					b.Fatalf("Search: %d records, %v", len(recs), err)
				}
			}
		})
	}
}
