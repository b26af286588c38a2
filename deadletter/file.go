package deadletter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// File keeps one JSON file per record in a directory, named for the
// record's id: "<id>.json", and indexes them by sink (index.go): a List of
// one endpoint's records ("hooks/billing") reads the names of that
// endpoint's records only, whatever the others' number.
//
// The id of a record of a tenant ends in its tenant's tag: "-t" and 16 hex
// digits of the tenant's SHA-256. List for a tenant (Filter.Tenant), or for
// ids, opens only the files whose names can match: another tenant's
// records, and records of no tenant, are not read. It compares the tenant
// kept in each record it reads (two tenants' tags may agree).
type File struct {
	dir      string
	readOnly bool
}

// OpenFile opens (creating if needed) the directory dir. The first
// OpenFile of a directory an earlier version wrote indexes its records by
// sink, reading each once.
func OpenFile(dir string) (*File, error) {
	dir = filepath.Clean(dir)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create dead-letter directory %q: %w", dir, err)
	}
	f := &File{dir: dir}
	if err := f.buildIndex(); err != nil {
		return nil, err
	}
	return f, nil
}

// OpenFileReadOnly opens the directory dir for reading only (dlq list): it
// creates nothing, a missing directory lists as empty, and Put and Delete
// return ErrReadOnly.
func OpenFileReadOnly(dir string) *File {
	return &File{dir: filepath.Clean(dir), readOnly: true}
}

// Put implements Putter: the record's file is written and
// fsynced, and so is the directory, before it returns.
func (f *File) Put(_ context.Context, dl Letter) error {
	if f.readOnly {
		return ErrReadOnly
	}
	now := time.Now()
	id := newID(now)
	if dl.Tenant != "" {
		id += tagSep + tenantTag(dl.Tenant)
	}
	r := recordOf(dl, id, now)
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := f.putIndexed(dl.Sink, r.ID+".json", b); err != nil {
		return fmt.Errorf("store dead letter for event %s: %w", dl.Event.ID, err)
	}
	return nil
}

// List implements Store. It reads the directory's names (for one
// endpoint's records, flt.Sink "<sink>/<endpoint>", the names in its index
// directory), and opens only the files of the records it may return: those
// after flt.After whose names can match, in order, until flt.Limit records
// matched.
func (f *File) List(_ context.Context, flt Filter) ([]Record, error) {
	var entries []string
	var err error
	if strings.Contains(flt.Sink, "/") && f.indexed() {
		entries, err = f.sinkNames(flt.Sink)
	} else {
		entries, err = readNames(f.dir)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids map[string]bool
	if len(flt.IDs) > 0 {
		ids = make(map[string]bool, len(flt.IDs))
		for _, id := range flt.IDs {
			ids[id] = true
		}
	}
	var tag string
	if flt.Tenant != "" {
		tag = tenantTag(flt.Tenant)
	}
	var names []string
	for _, name := range entries {
		id, ok := strings.CutSuffix(name, ".json")
		if !ok || strings.HasPrefix(name, ".") {
			continue
		}
		if ids != nil && !ids[id] || flt.After != "" && id <= flt.After {
			continue
		}
		if tag != "" {
			if _, t, ok := strings.Cut(id, tagSep); !ok || t != tag {
				continue
			}
		}
		names = append(names, id)
	}
	sort.Strings(names) // by id (a name's ".json" would sort "X.json" after "X-t…")
	var out []Record
	for _, id := range names {
		b, err := os.ReadFile(filepath.Join(f.dir, id+".json"))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted since the directory was read
		}
		if err != nil {
			if st, serr := os.Stat(filepath.Join(f.dir, id+".json")); serr == nil && st.IsDir() {
				continue // not a record
			}
		}
		if err != nil {
			return nil, err
		}
		var r Record
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("dead letter %s.json is not valid JSON: %w", id, err)
		}
		if flt.Match(r) {
			if out = append(out, r); flt.Limit > 0 && len(out) == flt.Limit {
				break
			}
		}
	}
	return out, nil
}

// Delete implements Store.
func (f *File) Delete(_ context.Context, ids ...string) error {
	if f.readOnly {
		return ErrReadOnly
	}
	// Each record leaves dir first, then its sink's index (index.go).
	sinks := make(map[string]string, len(ids)) // by file name
	for _, id := range ids {
		if strings.ContainsAny(id, `/\`) || strings.HasPrefix(id, ".") {
			return fmt.Errorf("bad dead-letter id %q", id)
		}
		name := id + ".json"
		b, err := os.ReadFile(filepath.Join(f.dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if sink, ok := sinkOf(b); ok {
			sinks[name] = sink
		}
		if err := os.Remove(filepath.Join(f.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := syncDir(f.dir); err != nil {
		return err
	}
	for name, sink := range sinks {
		if err := f.unlink(sink, name); err != nil {
			return err
		}
	}
	return nil
}

// Close implements Store.
func (f *File) Close() error { return nil }

// readNames returns the names in dir, unsorted (List sorts the ids it
// keeps, often far fewer).
func readNames(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}

// tagSep starts a tenant's tag in a record's id.
const tagSep = "-t"

// tenantTag is the tag of tenant in its records' ids: 16 hex digits of its
// SHA-256.
func tenantTag(tenant string) string {
	sum := sha256.Sum256([]byte(tenant))
	return hex.EncodeToString(sum[:8])
}
