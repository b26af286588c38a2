package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// BenchmarkStopSaves is the stop of a gateway of 100,000 endpoints, with a
// file store and with a MySQL one (durable commits): each endpoint's pipeline makes its final save at once,
// through the gateway's GroupCommit (50 ms gap), within its 10 s (the
// pipeline's final-save timeout). It reports how many saves timed out,
// the file writes, and the seconds until every save returned.
//
//	go test -run '^$' -bench StopSaves -benchtime 1x ./checkpoint/
func BenchmarkStopSaves(b *testing.B) {
	b.Run("file", func(b *testing.B) {
		st, err := checkpoint.OpenFile(filepath.Join(b.TempDir(), "cp.json"))
		if err != nil {
			b.Fatal(err)
		}
		benchStopSaves(b, st)
	})
	b.Run("mysql", func(b *testing.B) {
		srv := testserver.Start(b, testserver.Options{NoBinlog: true, ExtraArgs: []string{"--innodb-flush-log-at-trx-commit=1"}})
		st, err := checkpoint.OpenMySQL(context.Background(), srv.DB(b, srv.NewDatabase(b)), "cp", nil)
		if err != nil {
			b.Fatal(err)
		}
		benchStopSaves(b, st)
	})
}

func benchStopSaves(b *testing.B, st store) {
	const endpoints = 100_000
	all := make(map[string]checkpoint.Checkpoint, endpoints)
	key := func(i int) string { return fmt.Sprintf("hooks/endpoint-%06d", i) }
	for i := range endpoints {
		all[key(i)] = cp(i + 1)
	}
	if err := st.SaveMany(context.Background(), all); err != nil {
		b.Fatal(err)
	}
	writes := &countingStore{store: st}
	var timeouts, failed atomic.Int64
	var took time.Duration
	for n := 0; b.Loop(); n++ {
		g := checkpoint.NewGroupCommitEvery(writes, 50*time.Millisecond)
		start := time.Now()
		var wg sync.WaitGroup
		for i := range endpoints {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				err := g.Save(ctx, key(i), cp(endpoints+n*endpoints+i))
				switch {
				case errors.Is(err, context.DeadlineExceeded):
					timeouts.Add(1)
				case err != nil:
					failed.Add(1)
				}
			})
		}
		wg.Wait()
		took += time.Since(start)
	}
	b.ReportMetric(float64(timeouts.Load())/float64(b.N), "timeouts/op")
	b.ReportMetric(float64(failed.Load())/float64(b.N), "failed/op")
	b.ReportMetric(float64(writes.writes.Load())/float64(b.N), "writes/op")
	b.ReportMetric(took.Seconds()/float64(b.N), "s-to-all-saved/op")
}
