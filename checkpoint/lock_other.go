//go:build !unix

package checkpoint

import "context"

// Lock is not available for the file store on this platform.
func (f *File) Lock(context.Context) (func(), <-chan struct{}, error) {
	return nil, nil, ErrLockUnsupported
}

// FileLockHeld reports false: the file store cannot lock on this platform.
func FileLockHeld(string) (bool, error) { return false, nil }
