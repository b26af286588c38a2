package checkpoint

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrFenced is returned by Save and Fence once another relay may have taken
// over the store: this relay lost its lock, or the store's fencing epoch
// moved past the one this relay took with the lock. It is final: the relay
// must stop delivering at once, without draining or saving.
var ErrFenced = errors.New("fenced: another relay has taken over the checkpoint store")

// Fencer is implemented by stores whose lock can be lost while the process
// lives (the MySQL store: its lock lives on a server connection).
type Fencer interface {
	// Fence returns nil while this process surely holds the lock: within
	// the lease of its last confirmation by the server. Past the lease it
	// asks the server and waits for the answer (a frozen process resumes
	// here). Once the lock is lost it returns ErrFenced, for good. A store
	// that was never locked returns nil.
	Fence(ctx context.Context) error
}

// lease is what a locked MySQL store knows of its lock: the fencing epoch
// it took, and until when the lock is surely still its own.
type lease struct {
	mu      sync.Mutex
	epoch   uint64        // 0: not locked, saves are not fenced
	lost    bool          // the lock is gone: fenced for good
	until   time.Time     // monotonic; the lock is ours at least until then
	renewed chan struct{} // closed and replaced at each confirmation, and on loss
	kick    chan struct{} // asks the renewer for a confirmation now
}

func (l *lease) start(epoch uint64, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.epoch, l.lost, l.until = epoch, false, until
	l.renewed = make(chan struct{})
	l.kick = make(chan struct{}, 1)
}

func (l *lease) renew(until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost {
		return
	}
	l.until = until
	close(l.renewed)
	l.renewed = make(chan struct{})
}

// lose fences the store for good.
func (l *lease) lose() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost || l.epoch == 0 {
		l.lost = true
		return
	}
	l.lost = true
	close(l.renewed)
}

func (l *lease) epochForSave() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost {
		return 0, ErrFenced
	}
	return l.epoch, nil
}

func (l *lease) fence(ctx context.Context) error {
	for {
		l.mu.Lock()
		switch {
		case l.lost:
			l.mu.Unlock()
			return ErrFenced
		case l.epoch == 0 || time.Now().Before(l.until):
			l.mu.Unlock()
			return nil
		}
		renewed, kick := l.renewed, l.kick
		l.mu.Unlock()
		select {
		case kick <- struct{}{}:
		default:
		}
		select {
		case <-renewed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Fence implements Fencer.
func (m *MySQL) Fence(ctx context.Context) error { return m.lease.fence(ctx) }

// Epoch is the fencing epoch this store took with its lock; 0 before Lock.
func (m *MySQL) Epoch() uint64 {
	m.lease.mu.Lock()
	defer m.lease.mu.Unlock()
	return m.lease.epoch
}
