package checkpoint_test

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// ListPrefix of both stores returns exactly the keys that start with the
// prefix, as bytes: not the key just before or after the range ("/repla",
// "/replay0"), the prefix itself when it is a key, multi-byte and 0xff
// bytes at the range's end (the MySQL store's keys are bytes; the file's
// are JSON text); of a store reopened (the file's keys not sorted yet) and
// after a save adds a key.
func TestStoresListAPrefix(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{NoBinlog: true})
	db := srv.DB(t, srv.NewDatabase(t))
	keys := []string{"/repla", "/replay", "/replay/", "/replay/j1", "/replay/j1/progress", "/replay0", "/replaz",
		"hooks", "hooks/a", "hooks/é", "hooks/é/x", "hooks/ê"}
	for _, kind := range []storeKind{fileKind(t), mysqlKind(db, "cp")} {
		t.Run(kind.name, func(t *testing.T) {
			keys := keys
			if kind.name == "mysql" {
				keys = append(keys, "hooks\xff", "hooks\xff\xff", "hooks\xff\xffz")
			}
			ctx := context.Background()
			if got, err := kind.readOnly(t).(checkpoint.PrefixLister).ListPrefix(ctx, "/replay/"); err != nil || len(got) != 0 {
				t.Fatalf("ListPrefix of a store not yet created = %v, %v; want empty", got, err)
			}
			st := kind.open(t)
			all := map[string]checkpoint.Checkpoint{}
			for i, k := range keys {
				all[k] = cp(i + 1)
			}
			if err := st.SaveMany(ctx, all); err != nil {
				t.Fatal(err)
			}
			check := func(t *testing.T, st checkpoint.PrefixLister, all map[string]checkpoint.Checkpoint) {
				for _, prefix := range []string{"/replay/", "/replay", "hooks/é", "hooks\xff", "hooks\xff\xff", "", "nothing"} {
					want := map[string]checkpoint.Checkpoint{}
					for k, c := range all {
						if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
							want[k] = c
						}
					}
					got, err := st.ListPrefix(ctx, prefix)
					if err != nil || !maps.Equal(got, want) {
						t.Errorf("ListPrefix(%q) = %q, %v; want %q", prefix, slices.Sorted(maps.Keys(got)), err, slices.Sorted(maps.Keys(want)))
					}
				}
			}
			check(t, kind.open(t).(checkpoint.PrefixLister), all)
			if err := st.Save(ctx, "/replay/j2", cp(99)); err != nil {
				t.Fatal(err)
			}
			all["/replay/j2"] = cp(99)
			check(t, st.(checkpoint.PrefixLister), all)
		})
	}
}

// BenchmarkListReplayJobs is what each replay.poll reads of a checkpoint
// store holding 100,000 endpoints' checkpoints and 10 replay jobs'
// records: every key (List, as it did) or the jobs' prefix (ListPrefix).
//
//	go test -run '^$' -bench ListReplayJobs ./checkpoint/
func BenchmarkListReplayJobs(b *testing.B) {
	const endpoints, jobs = 100_000, 10
	all := make(map[string]checkpoint.Checkpoint, endpoints+jobs)
	for i := range endpoints {
		all[fmt.Sprintf("hooks/endpoint-%06d", i)] = cp(i + 1)
	}
	for i := range jobs {
		all[fmt.Sprintf("/replay/job-%02d", i)] = checkpoint.Checkpoint{Record: `{"id":"job"}`}
	}
	file, err := checkpoint.OpenFile(filepath.Join(b.TempDir(), "cp.json"))
	if err != nil {
		b.Fatal(err)
	}
	srv := testserver.Start(b, testserver.Options{NoBinlog: true})
	my, err := checkpoint.OpenMySQL(context.Background(), srv.DB(b, srv.NewDatabase(b)), "cp", nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, st := range []interface {
		checkpoint.BatchSaver
		checkpoint.Lister
		checkpoint.PrefixLister
	}{file, my} {
		name := "file"
		if st == checkpoint.PrefixLister(my) {
			name = "mysql"
		}
		if err := st.SaveMany(context.Background(), all); err != nil {
			b.Fatal(err)
		}
		b.Run(name+"/List", func(b *testing.B) {
			for b.Loop() {
				if got, err := st.List(context.Background()); err != nil || len(got) != endpoints+jobs {
					b.Fatalf("List = %d, %v", len(got), err)
				}
			}
		})
		b.Run(name+"/ListPrefix", func(b *testing.B) {
			for b.Loop() {
				if got, err := st.ListPrefix(context.Background(), "/replay/"); err != nil || len(got) != jobs {
					b.Fatalf("ListPrefix = %d, %v", len(got), err)
				}
			}
		})
	}
}
