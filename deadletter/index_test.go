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
)

func putLetters(t *testing.T, st deadletter.Store, sink string, n int) {
	t.Helper()
	for i := range n {
		err := st.Put(context.Background(), deadletter.Letter{Sink: sink, Reason: "400", Attempts: 1, First: time.Now(), Last: time.Now(),
			Event: &event.Event{ID: fmt.Sprintf("%s-%d", sink, i), AggregateID: "a", Payload: []byte(`{}`)}})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func eventIDs(recs []deadletter.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Event.ID)
	}
	return out
}

// One endpoint's dead letters are listed from its own index directory: a
// record of another endpoint is never opened (one that does not decode
// would fail the List), pages by After and Limit are complete and in
// order, and an endpoint whose name merely starts the same is not
// selected. Names a file system would refuse as they are (a '/' inside a
// part is a separator, "..", "%2F", 300 bytes) are indexed all the same.
func TestFileStoreListsAnEndpointFromItsIndex(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "dl")
	st, err := deadletter.OpenFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	long := "hooks/" + strings.Repeat("é", 150)
	sinks := []string{"hooks/a", "hooks/ab", "hooks/a/b", "hooks/..", "hooks/%2F", long, long + "x", "kafka"}
	for i, s := range sinks {
		putLetters(t, st, s, 3+i)
	}
	// Another endpoint's record, first by id, that does not decode.
	if err := os.WriteFile(filepath.Join(dir, "20000101T000000.000000000Z-000001.json"), []byte("not JSON"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, s := range sinks[:len(sinks)-1] {
		want := 3 + i
		if s == "hooks/a" {
			want += 5 // "hooks/a/b"'s
		}
		var got []deadletter.Record
		after := ""
		for page := 0; ; page++ {
			recs, err := st.List(ctx, deadletter.Filter{Sink: s, After: after, Limit: 2})
			if err != nil {
				t.Fatalf("%.20q, page %d: %v", s, page, err)
			}
			if len(recs) == 0 {
				break
			}
			got = append(got, recs...)
			after = recs[len(recs)-1].ID
		}
		ids := make([]string, len(got))
		for j, r := range got {
			ids[j] = r.ID
			if r.Sink != s && !strings.HasPrefix(r.Sink, s+"/") {
				t.Errorf("%.20q lists a record of %.20q", s, r.Sink)
			}
		}
		if len(got) != want || !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
			t.Errorf("%.20q lists %d records by pages of 2 (%v), want %d, each once, in order", s, len(got), eventIDs(got), want)
		}
	}
	if _, err := st.List(ctx, deadletter.Filter{}); err == nil {
		t.Error("the operator's List of every record read past the broken file")
	}
	ro := deadletter.OpenFileReadOnly(dir)
	if recs, err := ro.List(ctx, deadletter.Filter{Sink: "hooks/ab"}); err != nil || len(recs) != 4 {
		t.Errorf("a read-only store lists hooks/ab: %d records, %v; want 4", len(recs), err)
	}
}

// A directory an earlier version wrote (records, no index) is indexed by
// the first OpenFile: its records are listed by endpoint. A record
// deleted leaves its endpoint's list; a link left in the index by a Put or
// a Delete a crash cut short (the record not in the directory) is not
// listed.
func TestFileStoreIndexesAnEarlierVersionsRecords(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "dl")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		id := fmt.Sprintf("20250101T000000.%09dZ-%06d", i, i)
		sink := []string{"hooks/a", "hooks/b"}[i%2]
		b := fmt.Sprintf(`{"id": %q, "sink": %q, "event": {"id": "old-%d"}, "reason": "400", "attempts": 1, "stored": "2025-01-01T00:00:00Z"}`, id, sink, i)
		if err := os.WriteFile(filepath.Join(dir, id+".json"), []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	st, err := deadletter.OpenFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	putLetters(t, st, "hooks/a", 1)
	recs, err := st.List(ctx, deadletter.Filter{Sink: "hooks/a"})
	if got := strings.Join(eventIDs(recs), " "); err != nil || got != "old-0 old-2 hooks/a-0" {
		t.Fatalf("hooks/a lists %q, %v; want old-0 old-2 hooks/a-0", got, err)
	}
	if err := st.Delete(ctx, recs[0].ID, recs[2].ID); err != nil {
		t.Fatal(err)
	}
	// A record removed from the directory alone, as by a crash.
	if err := os.Remove(filepath.Join(dir, recs[1].ID+".json")); err != nil {
		t.Fatal(err)
	}
	for _, st := range []deadletter.Store{st, mustOpen(t, dir)} {
		if recs, err := st.List(ctx, deadletter.Filter{Sink: "hooks/a"}); err != nil || len(recs) != 0 {
			t.Errorf("hooks/a after its records were deleted lists %v, %v; want none", eventIDs(recs), err)
		}
		if recs, err := st.List(ctx, deadletter.Filter{Sink: "hooks/b"}); err != nil || len(recs) != 2 {
			t.Errorf("hooks/b lists %v, %v; want its 2", eventIDs(recs), err)
		}
	}
}

func mustOpen(t *testing.T, dir string) *deadletter.File {
	t.Helper()
	st, err := deadletter.OpenFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
