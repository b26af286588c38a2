//go:build unix

package deadletter

import "syscall"

// syncTree makes durable every directory under root and the names of
// what they hold: sync(2), one call for the whole file system, which
// returns once written (Linux, the BSDs, macOS), instead of an fsync of
// each of 100,000 directories.
func syncTree(root string) error {
	syscall.Sync()
	return nil
}
