package relay

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/attempts"
)

// attemptsRecord is the relay's attempts record (attempts.enabled): the
// Recorder every webhook endpoint is built with. The endpoints are built
// before the relay holds the checkpoint lock, and the store is opened only
// once it does (a standby opens nothing, and the file store admits one
// process), so it forwards to the Writer attached then; until then (no
// pipeline runs, so no attempt is made) it drops.
type attemptsRecord struct {
	w atomic.Pointer[attempts.Writer]
}

func (a *attemptsRecord) Record(x attempts.Attempt) {
	if w := a.w.Load(); w != nil {
		w.Record(x)
	}
}

// store is the open store, nil before openAttempts and after its close.
func (a *attemptsRecord) store() attempts.Store {
	if w := a.w.Load(); w != nil {
		return w.Store()
	}
	return nil
}

// attemptsLockWait is how long the relay waits for another process to let
// go of the attempts file (a relay that held the checkpoint lock, still
// exiting; the attempts command reading it).
const attemptsLockWait = 10 * time.Second

// Attempts returns the running relay's attempts store, for searches: nil
// when attempts.enabled is false, or until the relay holds the checkpoint
// lock and has opened it.
func (r *Relay) Attempts() attempts.Store {
	if r.attempts == nil {
		return nil
	}
	return r.attempts.store()
}

// openAttempts opens the attempts store and starts its Writer, with its
// metrics on the relay's (nothing when attempts.enabled is false); the
// returned close stores what is queued and closes the store. Call it
// holding the checkpoint lock, and close it after the pipelines stopped.
func (r *Relay) openAttempts(ctx context.Context) (func(), error) {
	if r.attempts == nil {
		return func() {}, nil
	}
	c := r.cfg.Attempts
	st, err := attempts.Open(ctx, r.cfg, attemptsLockWait)
	if err != nil {
		return nil, fmt.Errorf("attempts record: %w", err)
	}
	var am *attempts.Metrics
	if r.metrics != nil {
		if am, err = attempts.NewMetrics(r.metrics); err != nil {
			st.Close()
			return nil, err
		}
	}
	w := attempts.NewWriter(st, attempts.WriterOptions{Queue: c.Queue, BatchSize: c.BatchSize, Interval: c.Interval,
		MaxAge: c.MaxAge, MaxRows: c.MaxRows, Metrics: am, Logger: r.log})
	r.attempts.w.Store(w)
	return func() {
		r.attempts.w.Store(nil)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := w.Close(ctx); err != nil {
			r.log.Warn("attempts record: close before every queued attempt was stored", slog.Any("err", err))
		}
		if err := st.Close(); err != nil {
			r.log.Warn("attempts record: close the store", slog.Any("err", err))
		}
	}, nil
}
