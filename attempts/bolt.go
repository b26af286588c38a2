package attempts

import (
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// File keeps attempts in a bbolt file beside the checkpoint file (the
// local default). Only one process opens it at a time: bbolt holds an
// flock on it, exclusive while the relay writes, shared while a reader
// reads.
//
// Layout: bucket "rec" maps an id (8 bytes, big-endian, so ids sort as
// numbers) to the attempt (codec.go); each index bucket maps a key made of a
// field and the id to nothing, so that a search by that field walks only
// that field's keys, newest id first:
//
//	"endpoint"  len(sink) sink len(endpoint) endpoint id
//	"event"     len(event id) event id id
//	"time"      time (8 bytes, Unix ns, offset so it sorts) id
//	"tenant"    len(tenant) tenant id (attempts with a tenant only)
//	"failed"    id (attempts whose outcome is not delivered only)
//	"status"    status (2 bytes) id (statuses other than 2xx only)
//
// A delivered attempt costs four entries (its record, endpoint, event,
// time); the indexes of what one looks for when something is wrong
// (failures, their statuses) hold only those. A search takes the most
// selective index its query names and reads the records it points at; one
// by time only walks the time range; one by a 2xx status or a sink alone
// walks the records newest first. "time" also makes pruning by age read
// only what it removes; a count of the records (bucket "meta") prunes by
// count without counting them.
type File struct {
	db       *bolt.DB
	path     string
	readOnly bool
}

var (
	bRec      = []byte("rec")
	bEndpoint = []byte("endpoint")
	bEvent    = []byte("event")
	bTenant   = []byte("tenant")
	bStatus   = []byte("status")
	bFailed   = []byte("failed")
	bTime     = []byte("time")
	bMeta     = []byte("meta")
	kCount    = []byte("count")
	buckets   = [][]byte{bRec, bEndpoint, bEvent, bTenant, bStatus, bFailed, bTime, bMeta}
)

// ErrLocked is returned by OpenFile and OpenFileReadOnly when another
// process (the running relay) has the file open.
var ErrLocked = errors.New("the attempts file is open in another process")

// OpenFile opens (creating it and its directory) the file at path for
// reading and writing, waiting up to wait for another process to let go
// of it (0: fail at once).
func OpenFile(path string, wait time.Duration) (*File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("attempts file %q: %w", path, err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockWait(wait), FreelistType: bolt.FreelistMapType})
	if err != nil {
		return nil, openError(path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range buckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("attempts file %q: %w", path, err)
	}
	return &File{db: db, path: path}, nil
}

// OpenFileReadOnly opens the file at path for reading only, waiting up to
// wait for a writer to let go of it. A missing file reads as no attempts
// (Search returns none) and is not created; Append and Prune return
// ErrReadOnly.
func OpenFileReadOnly(path string, wait time.Duration) (*File, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return &File{path: path, readOnly: true}, nil
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: lockWait(wait)})
	if err != nil {
		return nil, openError(path, err)
	}
	return &File{db: db, path: path, readOnly: true}, nil
}

// lockWait is bbolt's Timeout for wait: 0 there means forever.
func lockWait(wait time.Duration) time.Duration { return max(wait, time.Millisecond) }

func openError(path string, err error) error {
	if errors.Is(err, bolterrors.ErrTimeout) {
		return fmt.Errorf("attempts file %q: %w (a running relay holds it: ask it over its HTTP listener, `outbox-relay attempts --url http://<http.listen>`, or stop it)", path, ErrLocked)
	}
	return fmt.Errorf("open attempts file %q: %w", path, err)
}

// Path returns the file's path.
func (f *File) Path() string { return f.path }

func idKey(id uint64) []byte { return binary.BigEndian.AppendUint64(nil, id) }

// field appends s with a 2-byte length before it, so that no field's key
// is a prefix of another field's.
func field(k []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint16(k, uint16(len(s))), s...)
}

// timeKey is t as 8 bytes that sort as times do.
func timeKey(k []byte, t time.Time) []byte {
	return binary.BigEndian.AppendUint64(k, uint64(t.UnixNano())^(1<<63))
}

// indexKeys returns the index entries of a stored as id: bucket and key.
func indexKeys(a *Attempt, id uint64, fn func(bucket, key []byte) error) error {
	idb := idKey(id)
	keys := []struct{ b, k []byte }{
		{bEndpoint, append(field(field(nil, a.Sink), a.Endpoint), idb...)},
		{bEvent, append(field(nil, a.EventID), idb...)},
		{bTime, append(timeKey(nil, a.Time), idb...)},
	}
	if a.Tenant != "" {
		keys = append(keys, struct{ b, k []byte }{bTenant, append(field(nil, a.Tenant), idb...)})
	}
	if a.Failed() {
		keys = append(keys, struct{ b, k []byte }{bFailed, idb})
	}
	if statusIndexed(a.Status) {
		keys = append(keys, struct{ b, k []byte }{bStatus, append(binary.BigEndian.AppendUint16(nil, uint16(a.Status)), idb...)})
	}
	for _, e := range keys {
		if err := fn(e.b, e.k); err != nil {
			return err
		}
	}
	return nil
}

// statusIndexed reports whether attempts of status have entries in the
// status index: any but a 2xx.
func statusIndexed(status int) bool { return status < 200 || status > 299 }

// appendFill is the fill of the pages of the buckets whose keys only grow
// (ids, times): bbolt splits a page at half by default, which leaves the
// pages of an append-only tree half empty.
const appendFill = 0.95

// Append implements Store: the batch in one transaction.
func (f *File) Append(ctx context.Context, batch []Attempt) error {
	if f.readOnly {
		return ErrReadOnly
	}
	if len(batch) == 0 {
		return nil
	}
	err := f.db.Update(func(tx *bolt.Tx) error {
		rec := tx.Bucket(bRec)
		rec.FillPercent = appendFill
		bs := map[string]*bolt.Bucket{}
		for _, b := range buckets {
			bs[string(b)] = tx.Bucket(b)
		}
		bs[string(bTime)].FillPercent = appendFill
		bs[string(bFailed)].FillPercent = appendFill
		put := func(b, k []byte) error { return bs[string(b)].Put(k, nil) }
		for i := range batch {
			a := normal(batch[i])
			id, err := rec.NextSequence()
			if err != nil {
				return err
			}
			if err := rec.Put(idKey(id), encode(nil, &a)); err != nil {
				return err
			}
			if err := indexKeys(&a, id, put); err != nil {
				return err
			}
		}
		return addCount(tx, int64(len(batch)))
	})
	if err != nil {
		return fmt.Errorf("store %d attempts in %q: %w", len(batch), f.path, err)
	}
	return nil
}

func addCount(tx *bolt.Tx, n int64) error {
	m := tx.Bucket(bMeta)
	var c int64
	if v := m.Get(kCount); len(v) == 8 {
		c = int64(binary.BigEndian.Uint64(v))
	}
	return m.Put(kCount, binary.BigEndian.AppendUint64(nil, uint64(max(c+n, 0))))
}

func count(tx *bolt.Tx) int64 {
	if v := tx.Bucket(bMeta).Get(kCount); len(v) == 8 {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

// Search implements Store.
func (f *File) Search(ctx context.Context, q Query) ([]Record, error) {
	if f.db == nil { // read-only, no file yet
		return nil, nil
	}
	var out []Record
	err := f.db.View(func(tx *bolt.Tx) error {
		var err error
		out, err = search(ctx, tx, q)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("search attempts in %q: %w", f.path, err)
	}
	return out, nil
}

// search walks the index that q's most selective field names, newest id
// first, and keeps the records q selects.
func search(ctx context.Context, tx *bolt.Tx, q Query) ([]Record, error) {
	var (
		bucket, prefix []byte
	)
	switch {
	case q.EventID != "":
		bucket, prefix = bEvent, field(nil, q.EventID)
	case q.Endpoint != "" && q.Sink != "":
		bucket, prefix = bEndpoint, field(field(nil, q.Sink), q.Endpoint)
	case q.Tenant != "":
		bucket, prefix = bTenant, field(nil, q.Tenant)
	case q.Status != 0 && statusIndexed(q.Status):
		bucket, prefix = bStatus, binary.BigEndian.AppendUint16(nil, uint16(q.Status))
	case q.Failed:
		bucket = bFailed
	case (!q.Since.IsZero() || !q.Until.IsZero()) && q.Sink == "" && q.Endpoint == "" && q.Status == 0:
		return searchTime(ctx, tx, q)
	default:
		bucket = bRec
	}
	rec := tx.Bucket(bRec)
	c := tx.Bucket(bucket).Cursor()
	// Start at the cursor's id (exclusive) or past the prefix's last key.
	var k []byte
	if q.Before > 0 {
		k, _ = c.Seek(append(append([]byte(nil), prefix...), idKey(uint64(q.Before))...))
	} else {
		k, _ = seekPast(c, prefix)
	}
	if k == nil {
		k, _ = c.Last()
	} else {
		k, _ = c.Prev()
	}
	n := q.Size()
	var out []Record
	for i := 0; k != nil && len(k) == len(prefix)+8 && string(k[:len(prefix)]) == string(prefix); k, _ = c.Prev() {
		if i++; i%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		r, err := load(rec, k[len(prefix):])
		if err != nil {
			return nil, err
		}
		if r.ID == 0 || !q.Matches(r) {
			continue
		}
		if out = append(out, r); len(out) == n {
			break
		}
	}
	return out, nil
}

// seekPast moves c to the first key after every key that starts with
// prefix (nil: none).
func seekPast(c *bolt.Cursor, prefix []byte) ([]byte, []byte) {
	if len(prefix) == 0 {
		return nil, nil
	}
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return c.Seek(end[:i+1])
		}
	}
	return nil, nil
}

func load(rec *bolt.Bucket, id []byte) (Record, error) {
	v := rec.Get(id)
	if v == nil {
		return Record{}, nil // an index entry of a pruned record: cannot happen, pruned together
	}
	r := Record{ID: int64(binary.BigEndian.Uint64(id))}
	a, err := decode(v)
	if err != nil {
		return Record{}, fmt.Errorf("record %d: %w", r.ID, err)
	}
	r.Attempt = a
	return r, nil
}

// searchTime serves a query by time only: it walks the time index over
// [Since, Until) and keeps the Size() newest ids below Before (ids follow
// the order attempts were stored, not their times), then reads them.
func searchTime(ctx context.Context, tx *bolt.Tx, q Query) ([]Record, error) {
	c := tx.Bucket(bTime).Cursor()
	var k []byte
	if q.Since.IsZero() {
		k, _ = c.First()
	} else {
		k, _ = c.Seek(timeKey(nil, micro(q.Since)))
	}
	var until []byte
	if !q.Until.IsZero() {
		until = timeKey(nil, micro(q.Until))
	}
	n := q.Size()
	h := &idHeap{}
	for i := 0; k != nil; k, _ = c.Next() {
		if until != nil && string(k[:8]) >= string(until) {
			break
		}
		if i++; i%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		id := binary.BigEndian.Uint64(k[8:])
		if q.Before > 0 && id >= uint64(q.Before) {
			continue
		}
		if h.Len() < n {
			heap.Push(h, id)
		} else if id > (*h)[0] {
			(*h)[0] = id
			heap.Fix(h, 0)
		}
	}
	rec := tx.Bucket(bRec)
	out := make([]Record, h.Len())
	for i := len(out) - 1; i >= 0; i-- {
		r, err := load(rec, idKey(heap.Pop(h).(uint64)))
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

// idHeap is a min-heap of ids: the smallest of the newest kept is at 0.
type idHeap []uint64

func (h idHeap) Len() int           { return len(h) }
func (h idHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h idHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *idHeap) Push(x any)        { *h = append(*h, x.(uint64)) }
func (h *idHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// pruneBatch caps the records one transaction of Prune removes.
const pruneBatch = 5000

// Prune implements Store, removing at most pruneBatch records per
// transaction.
func (f *File) Prune(ctx context.Context, before time.Time, keep int64) (int64, error) {
	if f.readOnly {
		return 0, ErrReadOnly
	}
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		var n int
		err := f.db.Update(func(tx *bolt.Tx) error {
			var ids [][]byte
			if !before.IsZero() {
				c := tx.Bucket(bTime).Cursor()
				end := timeKey(nil, micro(before))
				for k, _ := c.First(); k != nil && string(k[:8]) < string(end) && len(ids) < pruneBatch; k, _ = c.Next() {
					ids = append(ids, append([]byte(nil), k[8:]...))
				}
			}
			if len(ids) == 0 && keep > 0 {
				over := count(tx) - keep
				c := tx.Bucket(bRec).Cursor()
				for k, _ := c.First(); k != nil && int64(len(ids)) < min(over, pruneBatch); k, _ = c.Next() {
					ids = append(ids, append([]byte(nil), k...))
				}
			}
			rec := tx.Bucket(bRec)
			del := func(b, k []byte) error { return tx.Bucket(b).Delete(k) }
			for _, id := range ids {
				r, err := load(rec, id)
				if err != nil {
					return err
				}
				if err := indexKeys(&r.Attempt, binary.BigEndian.Uint64(id), del); err != nil {
					return err
				}
				if err := rec.Delete(id); err != nil {
					return err
				}
			}
			n = len(ids)
			return addCount(tx, -int64(n))
		})
		total += int64(n)
		if err != nil {
			return total, fmt.Errorf("prune attempts in %q: %w", f.path, err)
		}
		if n == 0 {
			return total, nil
		}
	}
}

// Close implements Store.
func (f *File) Close() error {
	if f.db == nil {
		return nil
	}
	return f.db.Close()
}
