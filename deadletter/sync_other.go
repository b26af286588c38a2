//go:build !unix

package deadletter

import (
	"io/fs"
	"path/filepath"
)

// syncTree makes durable every directory under root and the names of what
// they hold: an fsync of each, and of root's parent.
func syncTree(root string) error {
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		return syncDir(path)
	})
	if err != nil {
		return err
	}
	return syncDir(filepath.Dir(root))
}
