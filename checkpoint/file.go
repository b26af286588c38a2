package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sync"
)

// File keeps every key's checkpoint in one JSON document at Path.
type File struct {
	path     string
	readOnly bool
	mu       sync.Mutex
	all      map[string]Checkpoint
	// waited: the last Lock had to wait for another holder.
	waited bool
}

// fileFormat is the document on disk; Version lets later formats be told apart.
type fileFormat struct {
	Version     int                   `json:"version"`
	Checkpoints map[string]Checkpoint `json:"checkpoints"`
}

// OpenFile opens (or prepares to create) the checkpoint file at path. Its
// directory is created if missing. A file that exists but cannot be parsed is
// an error, never silently replaced.
func OpenFile(path string) (*File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create checkpoint directory: %w", err)
	}
	return readFile(path)
}

// OpenFileReadOnly opens the checkpoint file at path for reading only (for
// status and check): it creates nothing, a missing file or directory reads
// as no checkpoints, and Save returns ErrReadOnly.
func OpenFileReadOnly(path string) (*File, error) {
	f, err := readFile(path)
	if err != nil {
		return nil, err
	}
	f.readOnly = true
	return f, nil
}

func readFile(path string) (*File, error) {
	f := &File{path: path, all: map[string]Checkpoint{}}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return f, nil
	case err != nil:
		return nil, fmt.Errorf("read checkpoint file %q: %w", path, err)
	}
	all, err := decodeFile(b)
	if err != nil {
		return nil, fmt.Errorf("checkpoint file %q %w", path, err)
	}
	f.all = all
	return f, nil
}

// decodeFile reads the checkpoint file's document. Its errors read after
// `checkpoint file "<path>"`.
func decodeFile(b []byte) (map[string]Checkpoint, error) {
	var doc fileFormat
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("is not valid JSON (%v): restore it from a backup or move it away to start from checkpoint.start", err)
	}
	if doc.Version != 1 {
		return nil, fmt.Errorf("has version %d; this relay reads version 1", doc.Version)
	}
	all := make(map[string]Checkpoint, len(doc.Checkpoints))
	for k, v := range doc.Checkpoints {
		all[k] = v
	}
	return all, nil
}

// encodeFile is the document Save writes.
func encodeFile(all map[string]Checkpoint) ([]byte, error) {
	b, err := json.MarshalIndent(fileFormat{Version: 1, Checkpoints: all}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// reload rereads the file: another process may have written it (a relay
// that held the lock before this one).
func (f *File) reload() error {
	g, err := OpenFile(f.path)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.all = g.all
	f.mu.Unlock()
	return nil
}

// Load implements Store.
func (f *File) Load(_ context.Context, key string) (Checkpoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cp, ok := f.all[key]
	if !ok {
		return Checkpoint{}, ErrNotFound
	}
	return cp, nil
}

// Save implements Store: the whole document is rewritten atomically.
func (f *File) Save(_ context.Context, key string, cp Checkpoint) error {
	return f.rewrite(func(all map[string]Checkpoint) { all[key] = cp })
}

// SaveMany implements BatchSaver: every key's checkpoint in one atomic
// rewrite of the document (one fsync), all or nothing.
func (f *File) SaveMany(_ context.Context, cps map[string]Checkpoint) error {
	if len(cps) == 0 && !f.readOnly {
		return nil
	}
	return f.rewrite(func(all map[string]Checkpoint) {
		for k, cp := range cps {
			all[k] = cp
		}
	})
}

// Delete implements Deleter: the document is rewritten without key. A key
// with no checkpoint is not an error, and writes nothing.
func (f *File) Delete(_ context.Context, key string) error {
	f.mu.Lock()
	_, ok := f.all[key]
	f.mu.Unlock()
	if !ok && !f.readOnly {
		return nil
	}
	return f.rewrite(func(all map[string]Checkpoint) { delete(all, key) })
}

// List implements Lister.
func (f *File) List(context.Context) (map[string]Checkpoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.all), nil
}

// rewrite applies change to a copy of every checkpoint and writes the copy
// atomically; the store's view moves to it only once it is durable.
func (f *File) rewrite(change func(map[string]Checkpoint)) error {
	if f.readOnly {
		return ErrReadOnly
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	next := maps.Clone(f.all)
	change(next)
	b, err := encodeFile(next)
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(f.path, b); err != nil {
		return fmt.Errorf("save checkpoint %q: %w", f.path, err)
	}
	f.all = next
	return nil
}

// Close implements Store.
func (f *File) Close() error { return nil }

// LockWaited reports whether the last Lock had to wait for another holder:
// this relay was a standby and has taken over.
func (f *File) LockWaited() bool { return f.waited }

// WriteFileAtomic replaces path with data so that a crash at any moment leaves
// either the old content or the new one: write a temporary file in the same
// directory, fsync it, rename it over path, fsync the directory.
func WriteFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	cleanup := func() { tmp.Close(); os.Remove(name) }
	if _, err := tmp.Write(data); err != nil {
		cleanup()
		return err
	}
	if err := tmp.Sync(); err != nil {
		cleanup()
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(name)
		return err
	}
	if err := os.Rename(name, path); err != nil {
		os.Remove(name)
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
