//go:build unix

package attempts

import (
	"os"
	"syscall"
	"time"
)

// lockFile takes an flock on fh, exclusive or shared, trying until wait
// has passed (0: once). It reports false if another process holds it.
func lockFile(fh *os.File, exclusive bool, wait time.Duration) (bool, error) {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(fh.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return true, nil
		}
		if err != syscall.EWOULDBLOCK {
			return false, err
		}
		if !time.Now().Before(deadline) {
			return false, nil
		}
		time.Sleep(min(10*time.Millisecond, time.Until(deadline)))
	}
}
