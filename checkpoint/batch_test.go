package checkpoint_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// store is what these tests use of File and MySQL.
type store interface {
	checkpoint.Store
	checkpoint.BatchSaver
	checkpoint.Deleter
	checkpoint.Lister
}

// storeKind opens stores of one kind that share what they save: open
// returns a new store on it (as a restarted relay would), readOnly a
// read-only one.
type storeKind struct {
	name     string
	path     string // the file kind's
	open     func(t testing.TB) store
	readOnly func(t testing.TB) store
}

func fileKind(t testing.TB) storeKind {
	path := filepath.Join(t.TempDir(), "cp.json")
	return storeKind{
		name: "file", path: path,
		open: func(t testing.TB) store {
			st, err := checkpoint.OpenFile(path)
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
		readOnly: func(t testing.TB) store {
			st, err := checkpoint.OpenFileReadOnly(path)
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
	}
}

func mysqlKind(db *sql.DB, table string) storeKind {
	return storeKind{
		name: "mysql",
		open: func(t testing.TB) store {
			st, err := checkpoint.OpenMySQL(context.Background(), db, table, nil)
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
		readOnly: func(t testing.TB) store {
			st, err := checkpoint.OpenMySQLReadOnly(db, table)
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
	}
}

// many is n keys' checkpoints, key i at checkpoint base+i.
func many(n, base int) map[string]checkpoint.Checkpoint {
	cps := make(map[string]checkpoint.Checkpoint, n)
	for i := range n {
		cps[fmt.Sprintf("endpoint-%04d", i)] = cp(base + i)
	}
	return cps
}

func assertHolds(t *testing.T, st checkpoint.Lister, want map[string]checkpoint.Checkpoint) {
	t.Helper()
	got, err := st.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("the store holds %d checkpoints, want %d", len(got), len(want))
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("%s = %+v, want %+v", k, got[k], w)
		}
	}
}

// SaveMany, Delete and List of both stores: 1,201 keys (three MySQL
// statements) in one SaveMany, read back by List and Load from a store
// opened afresh; a read-only store refuses to write and lists an absent
// store as empty.
func testSaveManyDeleteList(t *testing.T, kind storeKind) {
	ctx := context.Background()
	if got, err := kind.readOnly(t).List(ctx); err != nil || len(got) != 0 {
		t.Fatalf("List of a store not yet created = %v, %v; want empty", got, err)
	}
	st := kind.open(t)
	if err := st.SaveMany(ctx, nil); err != nil {
		t.Fatalf("SaveMany of nothing: %v", err)
	}
	want := many(1201, 1)
	if err := st.SaveMany(ctx, want); err != nil {
		t.Fatal(err)
	}
	assertHolds(t, kind.open(t), want)
	// Replace some, add one, keep the rest.
	next := many(600, 5000)
	next["new"] = cp(9)
	if err := st.SaveMany(ctx, next); err != nil {
		t.Fatal(err)
	}
	maps.Copy(want, next)
	again := kind.open(t)
	assertHolds(t, again, want)
	if got, err := again.Load(ctx, "endpoint-0599"); err != nil || got != cp(5599) {
		t.Fatalf("Load = %+v, %v; want %+v", got, err, cp(5599))
	}

	if err := st.Delete(ctx, "endpoint-0001"); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "never-saved"); err != nil {
		t.Fatalf("Delete of a key with no checkpoint: %v", err)
	}
	delete(want, "endpoint-0001")
	again = kind.open(t)
	assertHolds(t, again, want)
	if _, err := again.Load(ctx, "endpoint-0001"); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("Load of a deleted key = %v, want ErrNotFound", err)
	}

	ro := kind.readOnly(t)
	assertHolds(t, ro, want)
	if err := ro.SaveMany(ctx, many(1, 1)); !errors.Is(err, checkpoint.ErrReadOnly) {
		t.Fatalf("read-only SaveMany = %v, want ErrReadOnly", err)
	}
	if err := ro.Delete(ctx, "endpoint-0002"); !errors.Is(err, checkpoint.ErrReadOnly) {
		t.Fatalf("read-only Delete = %v, want ErrReadOnly", err)
	}
	assertHolds(t, kind.open(t), want)
}

// Through a GroupCommit, 1,000 pipelines save their own key over and over,
// all at once: each key's last saved checkpoint is the one a store opened
// afresh reads.
func testGroupCommitUnderConcurrency(t *testing.T, st checkpoint.Store, reopen func(testing.TB) store, pipelines, saves int) {
	g := checkpoint.NewGroupCommit(st)
	var wg sync.WaitGroup
	errs := make(chan error, pipelines)
	for p := range pipelines {
		wg.Go(func() {
			key := fmt.Sprintf("endpoint-%04d", p)
			for n := 1; n <= saves; n++ {
				if err := g.Save(context.Background(), key, cp(p*1000+n)); err != nil {
					errs <- fmt.Errorf("%s save %d: %w", key, n, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := map[string]checkpoint.Checkpoint{}
	for p := range pipelines {
		want[fmt.Sprintf("endpoint-%04d", p)] = cp(p*1000 + saves)
	}
	assertHolds(t, reopen(t), want)
	if got, err := g.Load(context.Background(), "endpoint-0000"); err != nil || got != cp(saves) {
		t.Fatalf("Load through the GroupCommit = %+v, %v; want %+v", got, err, cp(saves))
	}
}

// saveOnly hides every ability of a store but Store's.
type saveOnly struct{ checkpoint.Store }

func TestFileStoreSaveManyDeleteList(t *testing.T) {
	testSaveManyDeleteList(t, fileKind(t))
}

// A SaveMany that cannot be written leaves every previous checkpoint as it
// was, on disk and in the store.
func TestFileStoreSaveManyIsAllOrNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.json")
	st, err := checkpoint.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	before := many(10, 1)
	if err := st.SaveMany(ctx, before); err != nil {
		t.Fatal(err)
	}
	// A directory in the file's place: the rename over it fails.
	if err := os.Rename(path, path+".saved"); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path, "blocker"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveMany(ctx, many(10, 100)); err == nil {
		t.Fatal("SaveMany over a directory succeeded")
	}
	assertHolds(t, st, before)
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".saved", path); err != nil {
		t.Fatal(err)
	}
	reopened, err := checkpoint.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	assertHolds(t, reopened, before)
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".cp.json.tmp-*"))
	if len(left) != 0 {
		t.Fatalf("the failed write left %v behind", left)
	}
}

func TestFileStoreGroupCommitUnderConcurrency(t *testing.T) {
	kind := fileKind(t)
	t.Run("with SaveMany", func(t *testing.T) {
		testGroupCommitUnderConcurrency(t, kind.open(t), kind.open, 1000, 10)
	})
	t.Run("a store with Save only", func(t *testing.T) {
		kind := fileKind(t)
		testGroupCommitUnderConcurrency(t, saveOnly{kind.open(t)}, kind.open, 50, 3)
	})
}

// GroupCommit does not pass for the store it wraps where the relay asks for
// the lock, the fence or the epoch: those are asked of the wrapped store.
func TestGroupCommitHasNoneOfTheWrappedStoresLockAbilities(t *testing.T) {
	var st checkpoint.Store = checkpoint.NewGroupCommit(fileKind(t).open(t))
	if _, ok := st.(checkpoint.Locker); ok {
		t.Error("a GroupCommit is a Locker")
	}
	if _, ok := st.(checkpoint.Fencer); ok {
		t.Error("a GroupCommit is a Fencer")
	}
	if _, ok := st.(interface{ Epoch() uint64 }); ok {
		t.Error("a GroupCommit has Epoch")
	}
	if _, ok := st.(interface{ LockWaited() bool }); ok {
		t.Error("a GroupCommit has LockWaited")
	}
}

// The MySQL store's SaveMany, Delete and List, its all-or-nothing
// transaction, the GroupCommit on it, and its fencing, on one private
// server whose commits are durable (innodb_flush_log_at_trx_commit=1).
func TestMySQLStoreSaveManyDeleteListAndGroupCommit(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{NoBinlog: true, ExtraArgs: []string{"--innodb-flush-log-at-trx-commit=1"}})
	db := srv.DB(t, srv.NewDatabase(t))
	ctx := context.Background()

	t.Run("SaveMany, Delete and List", func(t *testing.T) {
		testSaveManyDeleteList(t, mysqlKind(db, "cp_many"))
	})

	t.Run("a SaveMany whose last statement fails saves nothing", func(t *testing.T) {
		kind := mysqlKind(db, "cp_atomic")
		st := kind.open(t)
		before := many(700, 1)
		if err := st.SaveMany(ctx, before); err != nil {
			t.Fatal(err)
		}
		bad := many(700, 100)
		bad[strings.Repeat("z", 300)] = cp(1) // longer than the name column: its statement, the second, fails
		if err := st.SaveMany(ctx, bad); err == nil {
			t.Fatal("a key longer than the name column was saved")
		}
		assertHolds(t, kind.open(t), before)
	})

	t.Run("GroupCommit under concurrency", func(t *testing.T) {
		kind := mysqlKind(db, "cp_group")
		st := kind.open(t)
		release, _, err := st.(*checkpoint.MySQL).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		testGroupCommitUnderConcurrency(t, st, kind.open, 1000, 5)
	})

	t.Run("a fenced store refuses SaveMany, Delete and every save through a GroupCommit", func(t *testing.T) {
		kind := mysqlKind(db, "cp_fenced")
		st := kind.open(t).(*checkpoint.MySQL)
		release, _, err := st.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		before := many(3, 1)
		if err := st.SaveMany(ctx, before); err != nil {
			t.Fatal(err)
		}
		// Another relay takes the epoch (as its Lock would).
		if _, err := db.Exec("UPDATE `"+checkpoint.FenceTable+"` SET epoch = epoch + 1 WHERE name = ?", "cp_fenced"); err != nil {
			t.Fatal(err)
		}
		if err := st.SaveMany(ctx, many(3, 100)); !errors.Is(err, checkpoint.ErrFenced) {
			t.Fatalf("SaveMany of a fenced store = %v, want ErrFenced", err)
		}
		if err := st.Delete(ctx, "endpoint-0000"); !errors.Is(err, checkpoint.ErrFenced) {
			t.Fatalf("Delete of a fenced store = %v, want ErrFenced", err)
		}
		g := checkpoint.NewGroupCommit(st)
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for i := range 100 {
			wg.Go(func() { errs <- g.Save(ctx, fmt.Sprintf("endpoint-%04d", i), cp(500+i)) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if !errors.Is(err, checkpoint.ErrFenced) {
				t.Fatalf("a save through the GroupCommit of a fenced store = %v, want ErrFenced", err)
			}
		}
		assertHolds(t, kind.open(t), before)
	})
}

// WriteMany of both stores, and of a GroupCommit on each: saves and deletes
// in one write, read back from a store opened afresh (1,201 deletes: three
// MySQL statements); a save and a delete of one key in one call saves it;
// a read-only store refuses.
func testWriteMany(t *testing.T, kind storeKind) {
	ctx := context.Background()
	st := kind.open(t)
	want := many(1300, 1)
	if err := st.SaveMany(ctx, want); err != nil {
		t.Fatal(err)
	}
	for _, via := range []struct {
		name string
		w    checkpoint.BatchWriter
	}{{"store", st.(checkpoint.BatchWriter)}, {"group commit", checkpoint.NewGroupCommit(st)}} {
		var del []string
		for k := range want {
			if len(del) < 601 {
				del = append(del, k)
			}
		}
		save := map[string]checkpoint.Checkpoint{"/shared": cp(7000), del[0]: cp(7001), "never-saved-" + via.name: cp(7002)}
		del = append(del, "never-saved-either")
		if err := via.w.WriteMany(ctx, save, del); err != nil {
			t.Fatalf("%s: %v", via.name, err)
		}
		for _, k := range del {
			delete(want, k)
		}
		maps.Copy(want, save)
		assertHolds(t, kind.open(t), want)
	}
	if err := kind.readOnly(t).(checkpoint.BatchWriter).WriteMany(ctx, many(1, 1), nil); !errors.Is(err, checkpoint.ErrReadOnly) {
		t.Fatalf("read-only WriteMany = %v, want ErrReadOnly", err)
	}
}

func TestFileStoreWriteManySavesAndDeletesAtOnce(t *testing.T) {
	kind := fileKind(t)
	testWriteMany(t, kind)
	// The keys, merged as they came and went, are in order: a store opened
	// afresh (which sorts them all) writes the same document.
	st := kind.open(t)
	path := kind.path
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := st.Load(context.Background(), "/shared")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Save(context.Background(), "/shared", cp); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatalf("the document written after merging keys differs from one with its keys sorted:\n%s\n---\n%s", before, after)
	}
}

func TestMySQLStoreWriteManySavesAndDeletesAtOnce(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{NoBinlog: true})
	testWriteMany(t, mysqlKind(srv.DB(t, srv.NewDatabase(t)), "cp_write_many"))
}
