package checkpoint

import (
	"context"
	"errors"
)

// Locker is implemented by stores that can make one relay the only one
// writing to them: the others wait as hot standbys and take over when it
// stops or dies.
type Locker interface {
	// Lock blocks until this process holds the store's lock, or ctx ends.
	// lost is closed if the lock is lost later (the lock's connection
	// broke): the caller must then stop delivering. release gives it up.
	Lock(ctx context.Context) (release func(), lost <-chan struct{}, err error)
}

// ErrLockUnsupported is returned by Lock where the platform cannot lock.
var ErrLockUnsupported = errors.New("checkpoint locking is not supported here")
