package attempts

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// Segments are cut by size; Prune deletes those whose records are all
// removed, and keeps the one written to.
func TestFilePruneDeletesWholeSegments(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a")
	f, err := OpenFile(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.segSize = 100
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for b := range 10 {
		batch := make([]Attempt, 10)
		for i := range batch {
			batch[i] = Attempt{Time: t0.Add(time.Duration(b*10+i) * time.Second), Sink: "wh", Endpoint: "e", EventID: fmt.Sprint(b*10 + i), Outcome: OutcomeDelivered, Status: 200}
		}
		if err := f.Append(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	segs := func() int {
		m, _ := filepath.Glob(filepath.Join(path, "*.seg"))
		return len(m)
	}
	if n := segs(); n != 10 {
		t.Fatalf("%d segments, want 10 (one a batch, each over 100 bytes)", n)
	}
	// Half of the fifth batch is older than the cut: its segment stays.
	if n, err := f.Prune(ctx, t0.Add(45*time.Second), 0); err != nil || n != 45 {
		t.Fatalf("Prune = %d, %v; want 45", n, err)
	}
	if n := segs(); n != 6 {
		t.Errorf("%d segments after pruning four and a half, want 6", n)
	}
	if n, err := f.Prune(ctx, time.Time{}, 1); err != nil || n != 54 {
		t.Fatalf("Prune = %d, %v; want 54", n, err)
	}
	if n := segs(); n != 1 {
		t.Errorf("%d segments after keeping one record, want 1", n)
	}
	f.Close()
	f, err = OpenFile(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := f.Search(ctx, Query{})
	if err != nil || len(recs) != 1 || recs[0].EventID != "99" || recs[0].ID != 100 {
		t.Errorf("after reopening: %+v, %v; want event 99, id 100", recs, err)
	}
}
