package checkpoint_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// countingStore counts the writes that reach the store.
type countingStore struct {
	store
	writes atomic.Int64
}

func (c *countingStore) Save(ctx context.Context, key string, cp checkpoint.Checkpoint) error {
	c.writes.Add(1)
	return c.store.Save(ctx, key, cp)
}

func (c *countingStore) SaveMany(ctx context.Context, cps map[string]checkpoint.Checkpoint) error {
	c.writes.Add(1)
	return c.store.SaveMany(ctx, cps)
}

// BenchmarkSave1000Keys is one checkpoint interval of a gateway with 1,000
// endpoints: each op, 1,000 pipelines save their own key at once, each
// straight to the store (Save) or through a GroupCommit. The MySQL store is
// locked (its saves fenced, as the relay runs it) on a private server whose
// commits are durable (innodb_flush_log_at_trx_commit=1), through at most
// 100 connections (the server allows 200).
func BenchmarkSave1000Keys(b *testing.B) {
	const keys = 1000
	srv := testserver.Start(b, testserver.Options{NoBinlog: true, ExtraArgs: []string{"--innodb-flush-log-at-trx-commit=1"}})
	db := srv.DB(b, srv.NewDatabase(b))
	db.SetMaxOpenConns(100)
	for _, kind := range []storeKind{fileKind(b), mysqlKind(db, "cp_bench")} {
		st := kind.open(b)
		if m, ok := st.(*checkpoint.MySQL); ok {
			release, _, err := m.Lock(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(release)
		}
		if err := st.SaveMany(context.Background(), many(keys, 0)); err != nil {
			b.Fatal(err)
		}
		counted := &countingStore{store: st}
		for _, way := range []struct {
			name  string
			store checkpoint.Store
		}{{"Save", counted}, {"GroupCommit", checkpoint.NewGroupCommit(counted)}} {
			b.Run(kind.name+"/"+way.name, func(b *testing.B) {
				counted.writes.Store(0)
				round := 0
				for b.Loop() {
					round++
					var wg sync.WaitGroup
					var failed atomic.Value
					for p := range keys {
						wg.Go(func() {
							if err := way.store.Save(context.Background(), fmt.Sprintf("endpoint-%04d", p), cp(round*keys+p)); err != nil {
								failed.Store(err)
							}
						})
					}
					wg.Wait()
					if err, _ := failed.Load().(error); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(keys*round)/b.Elapsed().Seconds(), "saves/s")
				b.ReportMetric(float64(counted.writes.Load())/float64(round), "writes/op")
			})
		}
	}
}
