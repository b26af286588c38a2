package audit

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// destination is a synthetic audit: the range's events and what a
// destination holds, with every kind of finding in it.
type destination struct {
	events     []Event
	deliveries []Delivery
}

// makeDestination commits n events over aggs aggregates (every 997th id
// twice) and delivers them to 4 logs, an aggregate to one log, in commit
// order except that about 1 in 200 is lost, 1 in 300 delivered again later,
// 1 in 500 swapped with the 150th after it in its log, and strangers appear (half of
// them claiming the range).
func makeDestination(n, aggs int) destination {
	rng := rand.New(rand.NewPCG(1, 2))
	var d destination
	logs := make([][]Delivery, 4)
	commit := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("%08x-%04d-event", rng.Uint32(), i)
		if i%997 == 0 {
			id = d.events[i-10].ID // committed twice: the later one counts
		}
		agg := fmt.Sprintf("agg-%d", rng.IntN(aggs))
		e := Event{ID: id, AggregateID: agg, GTID: fmt.Sprintf("0-1-%d", i), Dest: "t", Seq: int64(i), Commit: commit.Add(time.Duration(i) * time.Millisecond)}
		d.events = append(d.events, e)
		l := len(agg) % 4
		if rng.IntN(200) == 0 {
			continue
		}
		logs[l] = append(logs[l], Delivery{ID: id, Log: fmt.Sprintf("t[%d]", l)})
		if rng.IntN(300) == 0 {
			logs[(l+1)%4] = append(logs[(l+1)%4], Delivery{ID: id, Log: fmt.Sprintf("t[%d]", (l+1)%4)})
		}
		if rng.IntN(250) == 0 {
			logs[l] = append(logs[l], Delivery{ID: fmt.Sprintf("stranger-%d", i), Log: fmt.Sprintf("t[%d]", l), Claims: i%2 == 0})
		}
	}
	for l, log := range logs {
		for i := 0; i+150 < len(log); i++ {
			if rng.IntN(500) == 0 {
				log[i], log[i+150] = log[i+150], log[i]
			}
		}
		log = append(log, log[:len(log)/50]...) // a redelivered prefix
		for i := range log {
			log[i].Offset = int64(i)
			log[i].Log = fmt.Sprintf("t[%d]", l)
		}
		d.deliveries = append(d.deliveries, log...)
	}
	rng.Shuffle(len(d.deliveries), func(i, j int) { d.deliveries[i], d.deliveries[j] = d.deliveries[j], d.deliveries[i] })
	return d
}

// expected is the report worked out naively, everything in maps.
func (d destination) expected(list int) Report {
	r := Report{Duplicates: map[string]int{}}
	byID := map[string]Event{}
	for _, e := range d.events {
		byID[e.ID] = e
	}
	count := map[string]int{}
	for _, x := range d.deliveries {
		count[x.ID]++
		if _, ok := byID[x.ID]; !ok && x.Claims {
			r.UnexpectedCount++
		}
	}
	for _, e := range d.events {
		if byID[e.ID].Seq != e.Seq {
			continue
		}
		switch n := count[e.ID]; {
		case n == 0:
			r.MissingCount++
			if len(r.Missing) < list {
				r.Missing = append(r.Missing, Missing{Event: e, Why: "not found in t"})
			}
		case n > 1:
			r.DuplicateCount++
			r.Duplicates[e.ID] = n
		}
	}
	// Order: each log in offset order; per aggregate, a first delivery of an
	// event committed before the latest first-delivered one.
	sorted := slices.Clone(d.deliveries)
	slices.SortFunc(sorted, func(a, b Delivery) int {
		return cmp.Or(cmp.Compare(a.Log, b.Log), cmp.Compare(a.Offset, b.Offset))
	})
	seen := map[string]bool{}
	maxSeq := map[[2]string]int64{}
	for _, x := range sorted {
		e, ok := byID[x.ID]
		if !ok || seen[x.ID] {
			continue
		}
		seen[x.ID] = true
		k := [2]string{e.AggregateID, x.Log}
		if m, ok := maxSeq[k]; ok && e.Seq < m {
			r.OrderCount++
			r.Order = append(r.Order, fmt.Sprintf("aggregate %s: event %s (binlog #%d) first delivered after #%d (%s)", e.AggregateID, e.ID, e.Seq, m, x.where()))
			continue
		}
		maxSeq[k] = e.Seq
	}
	return r
}

func (d destination) audit(t *testing.T, opts Options) Report {
	t.Helper()
	c := NewComparison(opts)
	defer c.Close()
	for _, e := range d.events {
		if err := c.Expect(e, ""); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range d.deliveries {
		if err := c.Deliver(x); err != nil {
			t.Fatal(err)
		}
	}
	span := &Span{Events: len(d.events)}
	r, err := c.Report(context.Background(), "s", span)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func sameFindings(t *testing.T, what string, got, want Report) {
	t.Helper()
	slices.Sort(got.Order)
	slices.Sort(want.Order)
	switch {
	case got.MissingCount != want.MissingCount || !slices.Equal(got.Missing, want.Missing):
		t.Errorf("%s: missing %d %v; want %d %v", what, got.MissingCount, got.Missing, want.MissingCount, want.Missing)
	case got.UnexpectedCount != want.UnexpectedCount:
		t.Errorf("%s: %d unexpected; want %d", what, got.UnexpectedCount, want.UnexpectedCount)
	case got.DuplicateCount != want.DuplicateCount || fmt.Sprint(got.Duplicates) != fmt.Sprint(want.Duplicates):
		t.Errorf("%s: duplicates %d %v; want %d %v", what, got.DuplicateCount, got.Duplicates, want.DuplicateCount, want.Duplicates)
	case got.OrderCount != want.OrderCount || !slices.Equal(got.Order, want.Order):
		t.Errorf("%s: order %d %q; want %d %q", what, got.OrderCount, got.Order, want.OrderCount, want.Order)
	}
}

// The comparison gives the same exact findings whether it fits in memory or
// spills hundreds of runs (merged in rounds), and both match a naive count.
func TestComparisonIsExactWithinAnyMemoryBound(t *testing.T) {
	d := makeDestination(30000, 500)
	want := d.expected(100000)
	if want.MissingCount == 0 || want.UnexpectedCount == 0 || want.DuplicateCount == 0 || want.OrderCount == 0 {
		t.Fatalf("the workload lacks a kind of finding: %d missing, %d unexpected, %d duplicates, %d order", want.MissingCount, want.UnexpectedCount, want.DuplicateCount, want.OrderCount)
	}
	big := d.audit(t, Options{Memory: 1 << 30, List: 100000, TempDir: t.TempDir()})
	if big.Spill.Runs != 0 {
		t.Errorf("1 GiB: spilled %d runs", big.Spill.Runs)
	}
	sameFindings(t, "in memory", big, want)
	small := d.audit(t, Options{Memory: MinMemory, List: 100000, TempDir: t.TempDir()})
	if small.Spill.Runs <= fanIn {
		t.Errorf("64 KiB: spilled %d runs; want more than %d, to merge in rounds", small.Spill.Runs, fanIn)
	}
	sameFindings(t, "spilled", small, want)
	t.Logf("%d events, %d deliveries: %d missing, %d unexpected, %d duplicates, %d order; 64 KiB spilled %d runs, %d bytes",
		len(d.events), len(d.deliveries), want.MissingCount, want.UnexpectedCount, want.DuplicateCount, want.OrderCount, small.Spill.Runs, small.Spill.Bytes)
}

// A report lists the earliest-committed missing events and counts the rest.
func TestReportListsTheEarliestMissing(t *testing.T) {
	d := makeDestination(5000, 50)
	want := d.expected(7)
	got := d.audit(t, Options{Memory: MinMemory, List: 7, TempDir: t.TempDir()})
	if got.MissingCount != want.MissingCount || !slices.Equal(got.Missing, want.Missing) {
		t.Fatalf("missing %d %v; want %d %v", got.MissingCount, got.Missing, want.MissingCount, want.Missing)
	}
	if len(got.Order) > 7 || len(got.Duplicates) > 7 || len(got.Unexpected) > 7 {
		t.Fatalf("lists longer than 7: %d order, %d duplicates, %d unexpected", len(got.Order), len(got.Duplicates), len(got.Unexpected))
	}
}

// Nothing is left in the temporary directory after Close.
func TestComparisonRemovesItsRuns(t *testing.T) {
	dir := t.TempDir()
	d := makeDestination(3000, 20)
	r := d.audit(t, Options{Memory: MinMemory, TempDir: dir})
	if r.Spill.Runs == 0 {
		t.Fatal("nothing spilled")
	}
	left, err := filepathGlob(dir)
	if err != nil || len(left) != 0 {
		t.Fatalf("left in %s: %v %v", dir, left, err)
	}
}

func filepathGlob(dir string) ([]string, error) { return filepath.Glob(filepath.Join(dir, "*")) }
