package deadletter

// This file owns the file store's index by sink: beside each record
// "<id>.json", a hard link to it in a directory of its sink's, so that the
// records of one endpoint are listed by reading that directory, not the
// names of every endpoint's records.
//
//	<dir>/<id>.json                                     the record
//	<dir>/.by-sink/_<sink>/_<endpoint>/<id>.json        a link to it
//	<dir>/.by-sink/.complete                            every record is linked
//
// Each part of a sink's name ("hooks/billing" has two) is a directory,
// named "_" and the part escaped (a '/', a '%', a control byte, as %XX),
// cut to its FitKey form when long: a directory holds the links of the
// records of its sink, and the directories of the sinks whose names
// continue it.
//
// A record is written in the index before it is linked into dir, and
// unlinked from the index after it is removed from dir, each step made
// durable before the next: every record of dir is in the index, whatever
// the moment a crash came. A link whose record is not in dir (a Put the
// crash cut short, or a Delete) is skipped, since records are read by
// their name in dir; and a List compares each record's sink, so two sinks
// that share a directory (a file system that folds case) stay apart. A
// file system without hard links gets a copy instead.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/outbox-relay/outbox-relay/checkpoint"
)

const (
	indexDir      = ".by-sink"
	indexComplete = ".complete"
	// partLimit is the bytes of a sink part's directory name, under any
	// file system's 255.
	partLimit = 200
)

// sinkDir is the index directory of sink's records.
func (f *File) sinkDir(sink string) string {
	parts := strings.Split(sink, "/")
	path := make([]string, 0, len(parts)+2)
	path = append(path, f.dir, indexDir)
	for _, p := range parts {
		path = append(path, "_"+checkpoint.FitKey(url.PathEscape(p), partLimit))
	}
	return filepath.Join(path...)
}

// indexed reports whether the index holds every record of dir (a store
// written by an earlier version is indexed by the first OpenFile of this
// one).
func (f *File) indexed() bool {
	_, err := os.Stat(filepath.Join(f.dir, indexDir, indexComplete))
	return err == nil
}

// makeSinkDir returns sink's index directory, made durable (each new
// directory's name synced in its parent) if it was not there; sync false
// leaves that to the caller (buildIndex syncs once at its end).
func (f *File) makeSinkDir(sink string, sync bool) (string, error) {
	sd := f.sinkDir(sink)
	if _, err := os.Stat(sd); !errors.Is(err, fs.ErrNotExist) {
		return sd, err
	}
	// The deepest directory there already: the new ones are below it.
	have := filepath.Dir(sd)
	for ; have != f.dir && have != filepath.Dir(have); have = filepath.Dir(have) {
		if _, err := os.Stat(have); err == nil {
			break
		}
	}
	if err := os.MkdirAll(sd, 0o750); err != nil {
		return "", err
	}
	for d := sd; sync && d != have && d != filepath.Dir(d); d = filepath.Dir(d) {
		if err := syncDir(filepath.Dir(d)); err != nil {
			return "", err
		}
	}
	return sd, nil
}

// putIndexed writes record name (its body b) of sink durably in sink's
// index directory, then links it into dir and syncs dir: every record
// named in dir is linked in the index.
func (f *File) putIndexed(sink, name string, b []byte) error {
	sd, err := f.makeSinkDir(sink, true)
	if err != nil {
		return err
	}
	if err := checkpoint.WriteFileAtomic(filepath.Join(sd, name), b); err != nil {
		return err
	}
	if err := linkOrCopy(filepath.Join(sd, name), filepath.Join(f.dir, name), b); err != nil {
		return err
	}
	return syncDir(f.dir)
}

// link links record name of dir (its body b) into sink's index
// directory, not synced (buildIndex syncs once at its end).
func (f *File) link(sink, name string, b []byte) error {
	sd, err := f.makeSinkDir(sink, false)
	if err != nil {
		return err
	}
	if err := linkOrCopy(filepath.Join(f.dir, name), filepath.Join(sd, name), b); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// linkOrCopy makes to a hard link to from, or on a file system that has
// none a copy of it (its body b, written atomically): records are read by
// their name in dir, so the index's copy is only ever listed.
func linkOrCopy(from, to string, b []byte) error {
	err := os.Link(from, to)
	if err == nil || errors.Is(err, fs.ErrExist) {
		return err
	}
	if _, serr := os.Stat(from); serr != nil {
		return err // not the link that failed
	}
	return checkpoint.WriteFileAtomic(to, b)
}

// unlink removes name from sink's index directory, once the record is
// gone from dir.
func (f *File) unlink(sink, name string) error {
	sd := f.sinkDir(sink)
	if err := os.Remove(filepath.Join(sd, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return syncDir(sd)
}

// buildIndex links every record of dir that is not linked yet, makes the
// links durable (one sync of the file system: a directory's each would
// take minutes at 100,000 endpoints), then marks the index complete: the
// first OpenFile of a store an earlier version wrote reads each record
// once. A file that does not decode is left out (a List of every record
// still reports it).
func (f *File) buildIndex() error {
	if f.indexed() {
		return nil
	}
	names, err := readNames(f.dir)
	if err != nil {
		return err
	}
	linked := 0
	for _, name := range names {
		if !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(f.dir, name))
		if err != nil {
			continue // a directory, or removed since
		}
		sink, ok := sinkOf(b)
		if !ok {
			continue
		}
		if err := f.link(sink, name, b); err != nil {
			return fmt.Errorf("index dead letter %s by its sink: %w", name, err)
		}
		linked++
	}
	sync := func() error { return syncDir(f.dir) } // an empty store: the index's name
	if linked > 0 {
		sync = func() error { return syncTree(filepath.Join(f.dir, indexDir)) }
	}
	if err := os.MkdirAll(filepath.Join(f.dir, indexDir), 0o750); err != nil {
		return fmt.Errorf("index the dead letters of %q by sink: %w", f.dir, err)
	}
	if err := sync(); err != nil {
		return fmt.Errorf("index the dead letters of %q by sink: %w", f.dir, err)
	}
	if err := checkpoint.WriteFileAtomic(filepath.Join(f.dir, indexDir, indexComplete), nil); err != nil {
		return fmt.Errorf("index the dead letters of %q by sink: %w", f.dir, err)
	}
	return nil
}

// sinkNames returns the names of the records linked under sink's index
// directory and those of the sinks whose names continue it ("hooks/a"
// holds "hooks/a/b"'s); a missing directory holds none.
func (f *File) sinkNames(sink string) ([]string, error) {
	var out []string
	var walk func(dir string) error
	walk = func(dir string) error {
		names, err := readNames(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, n := range names {
			if strings.HasPrefix(n, "_") {
				if err := walk(filepath.Join(dir, n)); err != nil {
					return err
				}
				continue
			}
			out = append(out, n)
		}
		return nil
	}
	return out, walk(f.sinkDir(sink))
}

// sinkOf returns the sink of a record's file b; false when b does not
// decode.
func sinkOf(b []byte) (string, bool) {
	var r struct {
		Sink string `json:"sink"`
	}
	return r.Sink, json.Unmarshal(b, &r) == nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
