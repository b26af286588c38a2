//go:build unix

package checkpoint

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Lock implements Locker with an exclusive flock on "<path>.lock", held
// until release or the process's death (the kernel drops it then).
func (f *File) Lock(ctx context.Context) (func(), <-chan struct{}, error) {
	name := f.path + ".lock"
	fh, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("open lock file %q: %w", name, err)
	}
	for attempt := 0; ; attempt++ {
		err := syscall.Flock(int(fh.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			f.waited = attempt > 0
			break
		}
		if err != syscall.EWOULDBLOCK {
			fh.Close()
			return nil, nil, fmt.Errorf("lock %q: %w", name, err)
		}
		select {
		case <-ctx.Done():
			fh.Close()
			return nil, nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	// The previous holder may have saved since this store was opened.
	if err := f.reload(); err != nil {
		fh.Close()
		return nil, nil, err
	}
	_ = fh.Truncate(0)
	_, _ = fmt.Fprintf(fh, "pid %d\n", os.Getpid())
	// A local flock is not lost while the process lives.
	return func() { fh.Close() }, make(chan struct{}), nil
}

// FileLockHeld reports whether a relay holds the lock of the file store at
// path, without taking it.
func FileLockHeld(path string) (bool, error) {
	fh, err := os.Open(path + ".lock")
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer fh.Close()
	switch err := syscall.Flock(int(fh.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err {
	case nil:
		_ = syscall.Flock(int(fh.Fd()), syscall.LOCK_UN)
		return false, nil
	case syscall.EWOULDBLOCK:
		return true, nil
	default:
		return false, err
	}
}
