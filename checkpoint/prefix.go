package checkpoint

// This file owns the listing of the keys of one prefix (PrefixLister): a
// range of the file store's sorted keys, a range of the MySQL store's
// primary key. It costs what the prefix holds, not what the store holds.

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// PrefixLister is implemented by stores that can list the keys of one
// prefix (File and MySQL), at the cost of what the prefix holds: the
// relay's own records (a replay job's, under ReservedPrefix) are read
// every replay.poll beside a gateway's 100,000 endpoints' checkpoints.
// GroupCommit does not list, as it does not List.
type PrefixLister interface {
	// ListPrefix returns every saved checkpoint whose key starts with
	// prefix, by key; prefixes compare as bytes. A store with none (or,
	// read only, a missing file or table) returns an empty map.
	ListPrefix(ctx context.Context, prefix string) (map[string]Checkpoint, error)
}

// ListPrefix implements PrefixLister: a binary search of the sorted keys
// (sorted once, then kept by saves), and a copy of the range found.
func (f *File) ListPrefix(_ context.Context, prefix string) (map[string]Checkpoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.keys == nil {
		// As rewrite sorts them: the next save of known keys reuses them.
		keys := make([]string, 0, len(f.all))
		for k := range f.all {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		f.keys = keys
	}
	out := map[string]Checkpoint{}
	i, _ := slices.BinarySearch(f.keys, prefix)
	for _, k := range f.keys[i:] {
		if !strings.HasPrefix(k, prefix) {
			break
		}
		out[k] = f.all[k]
	}
	return out, nil
}

// ListPrefix implements PrefixLister: a range of the primary key (name is
// a binary column), name >= prefix and name < the first key after every
// key of prefix (prefixEnd).
func (m *MySQL) ListPrefix(ctx context.Context, prefix string) (map[string]Checkpoint, error) {
	where, args := " WHERE name >= ?", []any{prefix}
	if end, ok := prefixEnd(prefix); ok {
		where, args = where+" AND name < ?", append(args, []byte(end)) // bytes: end may not be UTF-8
	}
	all, err := m.query(ctx, where, args...)
	if err != nil {
		return nil, Denied(ctx, m.db, fmt.Errorf("list checkpoints %q… in %q: %w", prefix, m.table, err))
	}
	// A read-only store of a table an earlier version made (its name a
	// collated character column, not yet migrated) compares otherwise.
	for k := range all {
		if !strings.HasPrefix(k, prefix) {
			delete(all, k)
		}
	}
	return all, nil
}

// prefixEnd returns the least string greater than every string that starts
// with prefix (its last byte below 0xff incremented, what follows dropped);
// ok is false when there is none (prefix empty, or all 0xff bytes).
func prefixEnd(prefix string) (string, bool) {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1]), true
		}
	}
	return "", false
}
