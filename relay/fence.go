package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/metrics"
)

// errLockLost stops an active relay whose checkpoint lock went away (its
// connection to the checkpoint database broke or timed out) or whose store
// fenced it: a standby may be active now. It is checkpoint.ErrFenced, so the
// pipelines stop at once, without draining or saving.
var errLockLost = fmt.Errorf("lost the checkpoint lock: another relay may be active now; stopped delivering at once and saved no checkpoint since; exiting so a supervisor restarts this one as a standby (%w)", checkpoint.ErrFenced)

// held is the checkpoint lock as the pipelines see it.
type held struct {
	// lose ends the context holdLock returned with errLockLost.
	lose func()
	// fence gates deliveries (nil: nothing to gate: no lock, or a lock
	// that cannot be lost while the process lives).
	fence func(context.Context) error
	// tookOver: this relay waited for the lock as a standby.
	tookOver bool
	release  func()
}

// holdLock takes the checkpoint store's lock when checkpoint.lock is on,
// waiting as a standby while another relay holds it. It returns the lock and
// a context derived from ctx that ends, with errLockLost as its cause, when
// the lock is lost or a pipeline found its store fenced (held.lose); the
// lock is nil, and the error too, when ctx ends while waiting.
func (r *Relay) holdLock(ctx context.Context, store checkpoint.Store) (context.Context, *held, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	h := &held{lose: func() { cancel(errLockLost) }, release: func() { cancel(nil) }}
	locker, ok := store.(checkpoint.Locker)
	if !ok || !*r.cfg.Checkpoint.Lock {
		return ctx, h, nil
	}
	r.log.Info("taking the checkpoint lock (a relay that already holds it stays active; this one waits as a standby)")
	if r.metrics != nil {
		r.metrics.Standby(true)
	}
	release, lost, err := locker.Lock(ctx)
	if r.metrics != nil {
		r.metrics.Standby(false)
	}
	switch {
	case errors.Is(err, checkpoint.ErrLockUnsupported):
		r.log.Warn("this platform cannot lock the checkpoint file: make sure only one relay runs on it")
		return ctx, h, nil
	case err != nil && ctx.Err() != nil:
		cancel(nil)
		return nil, nil, nil
	case err != nil:
		cancel(nil)
		return nil, nil, fmt.Errorf("take the checkpoint lock: %w (set checkpoint.lock: false to run without one)", err)
	}
	if w, ok := store.(interface{ LockWaited() bool }); ok {
		h.tookOver = w.LockWaited()
	}
	attrs := []any{slog.Bool("took_over", h.tookOver)}
	if e, ok := store.(interface{ Epoch() uint64 }); ok {
		attrs = append(attrs, slog.Uint64("fencing_epoch", e.Epoch()))
	}
	r.log.Info("checkpoint lock taken: this relay is active", attrs...)
	if f, ok := store.(checkpoint.Fencer); ok {
		h.fence = f.Fence
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-lost:
			r.log.Error("checkpoint lock lost: stopping every pipeline at once, without draining or saving")
			cancel(errLockLost)
		case <-ctx.Done():
		}
	}()
	h.release = func() {
		cancel(nil)
		<-done
		release()
	}
	return ctx, h, nil
}

// listen serves h on http.listen. With the checkpoint lock on, an address in
// use is waited for rather than an error: a standby on the same host as the
// active relay serves its health once that one has gone.
func (r *Relay) listen(h http.Handler) (*metrics.Server, error) {
	if !*r.cfg.Checkpoint.Lock {
		srv, err := metrics.Listen(r.cfg.HTTP.Listen, h, r.log)
		if err == nil {
			r.log.Info("http listening: /metrics, /healthz, /readyz", slog.String("addr", srv.Addr().String()))
		}
		return srv, err
	}
	srv, err := metrics.ListenWhenFree(r.cfg.HTTP.Listen, h, r.log, time.Second)
	if err == nil && srv.Addr() != nil {
		r.log.Info("http listening: /metrics, /healthz, /readyz", slog.String("addr", srv.Addr().String()))
	}
	return srv, err
}
