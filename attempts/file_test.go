package attempts_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/attempts"
)

func openFile(t *testing.T, path string) *attempts.File {
	t.Helper()
	st, err := attempts.OpenFile(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// What the file keeps, and what Prune removed, are the same when it is
// opened again; ids go on growing.
func TestFileKeepsItsRecordAndItsPruningAcrossOpens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.json.attempts")
	st := openFile(t, path)
	base := appendFixture(t, st)
	if n, err := st.Prune(ctx, t0.Add(4*time.Minute), 0); err != nil || n != 5 {
		t.Fatalf("Prune by age = %d, %v; want 5", n, err)
	}
	if n, err := st.Prune(ctx, time.Time{}, 4); err != nil || n != 1 {
		t.Fatalf("Prune by count = %d, %v; want 1", n, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st = openFile(t, path)
	for _, q := range []attempts.Query{{}, {EventID: "e1"}, {Failed: true}, {Sink: "wh", Endpoint: "billing"}, {Tenant: "globex"}} {
		recs, err := st.Search(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		want := []int{8, 7, 6, 5}
		want = slices.DeleteFunc(want, func(i int) bool {
			return !q.Matches(attempts.Record{ID: base + int64(i), Attempt: normalTime(fixture()[i])})
		})
		if got := indexes(recs, base); !slices.Equal(got, want) {
			t.Errorf("%+v after reopening: got %v, want %v", q, got, want)
		}
	}
	if n, err := st.Prune(ctx, time.Time{}, 4); err != nil || n != 0 {
		t.Errorf("Prune after reopening = %d, %v; want 0 (4 left)", n, err)
	}
	if err := st.Append(ctx, fixture()[:1]); err != nil {
		t.Fatal(err)
	}
	recs, err := st.Search(ctx, attempts.Query{Limit: 1})
	if err != nil || len(recs) != 1 || recs[0].ID != base+10 {
		t.Errorf("the next record after reopening: %+v, %v; want id %d", recs, err, base+10)
	}
}

func normalTime(a attempts.Attempt) attempts.Attempt {
	a.Time = a.Time.Truncate(time.Microsecond)
	return a
}

// A batch torn by a crash is cut off when the file is opened again: the
// records before it are found, and what is stored after it too.
func TestFileCutsATornBatchOff(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.json.attempts")
	st := openFile(t, path)
	base := appendFixture(t, st)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(path, "*.seg"))
	if len(segs) != 1 {
		t.Fatalf("segments %v, want one", segs)
	}
	fh, err := os.OpenFile(segs[0], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The start of a frame of 200 bytes, and 10 of them.
	if _, err := fh.Write([]byte{0, 0, 0, 200, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 11, 1, 2}); err != nil {
		t.Fatal(err)
	}
	fh.Close()

	st = openFile(t, path)
	if err := st.Append(ctx, fixture()[:2]); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st = openFile(t, path)
	recs, err := st.Search(ctx, attempts.Query{})
	if err != nil {
		t.Fatal(err)
	}
	if got := indexes(recs, base); !slices.Equal(got, []int{11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}) {
		t.Errorf("after a torn batch: got %v", got)
	}
}

// A file where the record's directory should be (an earlier version's)
// fails with what to do.
func TestFileAtTheRecordsPathIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.json.attempts")
	if err := os.WriteFile(path, []byte("bbolt"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := attempts.OpenFile(path, 0)
	if err == nil || !strings.Contains(err.Error(), "remove it") || !strings.Contains(err.Error(), "attempts.path") {
		t.Errorf("OpenFile of a file = %v, want an error saying to remove it or set attempts.path", err)
	}
}

// The record holds receivers' answers: its directory is the relay's user's
// only (0700, every file in it 0600), as the checkpoint file is, when it is
// made and when an earlier version made it readable by others (0755, 0644).
func TestFileIsReadableByItsOwnerOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.json.attempts")
	modes := func(when string) {
		t.Helper()
		des, err := os.ReadDir(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: the directory is %v (%v), want 0700", when, fi.Mode().Perm(), err)
		}
		var names []string
		for _, de := range des {
			fi, err := de.Info()
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, de.Name())
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: %s is %v, want 0600", when, de.Name(), fi.Mode().Perm())
			}
		}
		for _, want := range []string{"lock", "pruned"} {
			if !slices.Contains(names, want) {
				t.Errorf("%s: no %s among %v", when, want, names)
			}
		}
		if !slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, ".seg") }) {
			t.Errorf("%s: no segment among %v", when, names)
		}
	}
	st := openFile(t, path)
	appendFixture(t, st)
	if _, err := st.Prune(ctx, time.Time{}, 4); err != nil {
		t.Fatal(err)
	}
	modes("made")
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// As an earlier version left it.
	des, err := os.ReadDir(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if err := os.Chmod(filepath.Join(path, de.Name()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(path, 0o755); err != nil {
		t.Fatal(err)
	}
	openFile(t, path)
	modes("opened again")
}
