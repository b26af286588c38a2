package attempts

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/maphash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/every"
)

// File keeps attempts in a directory beside the checkpoint file (the local
// default): a log of records appended in batches, cut in segments, and an
// index of every record kept in memory.
//
// The directory (0700, its files 0600: it holds receivers' answers) holds:
//
//	lock                      an flock: exclusive while the relay writes, shared while a reader reads
//	<first id, 16 hex>.seg    a segment: records, each batch one write at its end
//	pruned                    what Prune removed: every id below a floor, and the latest cut by age
//
// A record in a segment is framed: the length of what follows (4 bytes,
// big-endian), its CRC-32C (4 bytes), the record's id (8 bytes), the
// attempt (codec.go). A segment's ids follow one another from the one in
// its name; the next segment starts once one passes segmentSize.
//
// The index holds, for every record, 32 bytes (about 40 with the room its
// slices grow into): its time, where it is, its
// sink and endpoint and its tenant (names kept once), a hash of its event
// id, its status, and whether it failed or was removed. A search walks it
// newest first and reads from the segments only the records it selects, so
// that writing a record costs its bytes in one write and an entry in
// memory, not the pages of a tree. Opening the directory reads every
// segment to make the index again.
//
// Prune marks records removed in the index, writes what it removed to
// "pruned" (so that they stay removed when the directory is opened again)
// and deletes every segment but the last whose records are all removed:
// the disk holds the records kept, and the removed ones that share a
// segment with one kept.
//
// Nothing waits for the disk on the way in: the last segment is synced
// once a second while records come, and at Close. A power cut loses at
// most the last second of attempts (the record is a diagnosis, not the
// delivery's state); a record torn by it is cut off when the directory is
// opened again.
type File struct {
	path     string
	readOnly bool
	lock     *os.File
	seed     maphash.Seed

	mu     sync.RWMutex
	segs   []*segment // by first id; the last is written to
	next   uint64     // id of the next record
	live   int64      // records not removed
	cut    cutState
	names  map[string]uint32 // 0 is ""
	pairs  map[[2]uint32]uint32
	pairOf [][2]uint32 // sink and endpoint names of a pair
	closed bool
	buf    []byte // Append's
	// segSize is segmentSize (a test makes it small).
	segSize int64

	dirty     atomic.Bool // written since the last sync
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

type segment struct {
	first uint64
	fh    *os.File
	size  int64
	ents  []entry // ents[i] is record first+i
	live  int
}

// entry is a record in the index.
type entry struct {
	time   int64  // Unix µs
	off    uint32 // of its frame in the segment
	n      uint32 // length of the frame after its length and CRC
	ev     uint32 // hash of the event id
	pair   uint32 // sink and endpoint
	tenant uint32
	status uint16
	flags  uint8
}

const (
	flagFailed  = 1 << iota // outcome not delivered
	flagRemoved             // pruned
)

const (
	// segmentSize is the size past which the next batch starts a new
	// segment: what Prune leaves on disk beyond the records it keeps is at
	// most about one segment.
	segmentSize = 8 << 20
	// syncEvery is how often the last segment is synced while records
	// come: what a power cut can lose.
	syncEvery = time.Second
	frameHead = 8 // length and CRC
	segSuffix = ".seg"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrLocked is returned by OpenFile and OpenFileReadOnly when another
// process (the running relay) has the file open.
var ErrLocked = errors.New("the attempts file is open in another process")

// OpenFile opens (creating it and its directory) the attempts directory at
// path for reading and writing, waiting up to wait for another process to
// let go of it (0: fail at once).
//
// The record holds receivers' answers, so it is the relay's user's only,
// as the checkpoint file is: the directory is 0700 and every file in it
// 0600. A directory or file that an earlier version made readable by
// others (0755, 0644) is made so when it is opened; one that cannot be
// (owned by another user) is refused.
func OpenFile(path string, wait time.Duration) (*File, error) {
	if err := os.MkdirAll(path, dirMode); err != nil {
		return nil, dirError(path, err)
	}
	if err := private(path); err != nil {
		return nil, err
	}
	f := &File{path: path, segSize: segmentSize}
	lock, err := os.OpenFile(filepath.Join(path, "lock"), os.O_CREATE|os.O_RDWR, fileMode)
	if err != nil {
		return nil, fmt.Errorf("attempts file %q: %w", path, err)
	}
	if err := f.take(lock, true, wait); err != nil {
		return nil, err
	}
	if err := f.load(); err != nil {
		f.lock.Close()
		return nil, err
	}
	f.stop, f.done = make(chan struct{}), make(chan struct{})
	go f.syncer()
	return f, nil
}

// OpenFileReadOnly opens the attempts directory at path for reading only,
// waiting up to wait for a writer to let go of it. A missing one reads as
// no attempts (Search returns none) and is not created; Append and Prune
// return ErrReadOnly.
func OpenFileReadOnly(path string, wait time.Duration) (*File, error) {
	f := &File{path: path, readOnly: true}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return f, nil
	}
	lock, err := os.Open(filepath.Join(path, "lock"))
	switch {
	case err == nil:
		if err := f.take(lock, false, wait); err != nil {
			return nil, err
		}
	case errors.Is(err, os.ErrNotExist): // no writer ever opened it
	default:
		return nil, dirError(path, err)
	}
	if err := f.load(); err != nil {
		if f.lock != nil {
			f.lock.Close()
		}
		return nil, err
	}
	return f, nil
}

const (
	dirMode  = 0o700 // the attempts directory's
	fileMode = 0o600 // every file in it
)

// private takes from path (the directory or a file in it) every permission
// of its group and of others: the modes an earlier version created them
// with (0755, 0644).
func private(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("attempts file %q: %w", path, err)
	}
	perm := fi.Mode().Perm()
	if perm&0o077 == 0 {
		return nil
	}
	if err := os.Chmod(path, perm&^0o077); err != nil {
		return fmt.Errorf("attempts file %q is mode %#o, readable by other users, and holds receivers' answers: it could not be made %#o (%w); make it so (chmod go-rwx), or set attempts.path to a directory of the relay's user", path, perm, perm&^0o077, err)
	}
	return nil
}

func dirError(path string, err error) error {
	if fi, serr := os.Stat(path); serr == nil && !fi.IsDir() {
		return fmt.Errorf("attempts file %q is a file, not the directory the record is kept in (an earlier version's): remove it, or set attempts.path to another place", path)
	}
	return fmt.Errorf("attempts file %q: %w", path, err)
}

func (f *File) take(lock *os.File, exclusive bool, wait time.Duration) error {
	ok, err := lockFile(lock, exclusive, wait)
	if err != nil || !ok {
		lock.Close()
	}
	if err != nil {
		return fmt.Errorf("lock attempts file %q: %w", f.path, err)
	}
	if !ok {
		return fmt.Errorf("attempts file %q: %w (a running relay holds it: ask it over its HTTP listener, `outbox-relay attempts --url http://<http.listen>`, or stop it)", f.path, ErrLocked)
	}
	f.lock = lock
	return nil
}

// Path returns the directory's path.
func (f *File) Path() string { return f.path }

// load reads what Prune removed and every segment into the index; opened
// for writing, it cuts a torn record off the last segment, starts one if
// there is none, and deletes the segments whose records are all removed.
func (f *File) load() error {
	f.seed = maphash.MakeSeed()
	f.names = map[string]uint32{"": 0}
	f.pairs = map[[2]uint32]uint32{}
	f.pairOf = nil
	if err := f.cut.read(f.path); err != nil {
		return err
	}
	des, err := os.ReadDir(f.path)
	if err != nil {
		return fmt.Errorf("attempts file %q: %w", f.path, err)
	}
	for _, de := range des {
		if strings.HasPrefix(de.Name(), "pruned.") && !f.readOnly {
			os.Remove(filepath.Join(f.path, de.Name())) // a write of "pruned" a crash cut short
			continue
		}
		if !f.readOnly && de.Type().IsRegular() {
			if err := private(filepath.Join(f.path, de.Name())); err != nil {
				return err
			}
		}
		name, ok := strings.CutSuffix(de.Name(), segSuffix)
		if !ok || len(name) != 16 {
			continue
		}
		first, err := strconv.ParseUint(name, 16, 64)
		if err != nil {
			continue
		}
		f.segs = append(f.segs, &segment{first: first})
	}
	slices.SortFunc(f.segs, func(a, b *segment) int { return cmp.Compare(a.first, b.first) })
	f.next = max(1, f.cut.floor)
	for _, c := range f.cut.ages {
		f.next = max(f.next, c.limit)
	}
	for i, s := range f.segs {
		last := i == len(f.segs)-1
		if err := f.read(s, last && !f.readOnly); err != nil {
			f.closeSegments()
			return err
		}
		f.next = max(f.next, s.first+uint64(len(s.ents)))
	}
	if f.readOnly {
		return nil
	}
	if len(f.segs) == 0 || f.segs[len(f.segs)-1].first+uint64(len(f.segs[len(f.segs)-1].ents)) < f.next {
		s, err := f.create(f.next)
		if err != nil {
			f.closeSegments()
			return err
		}
		f.segs = append(f.segs, s)
	}
	f.dropDead()
	return nil
}

func (f *File) segPath(first uint64) string {
	return filepath.Join(f.path, fmt.Sprintf("%016x%s", first, segSuffix))
}

func (f *File) create(first uint64) (*segment, error) {
	fh, err := os.OpenFile(f.segPath(first), os.O_CREATE|os.O_RDWR|os.O_TRUNC, fileMode)
	if err != nil {
		return nil, fmt.Errorf("attempts file %q: %w", f.path, err)
	}
	return &segment{first: first, fh: fh}, nil
}

// read opens s and indexes its records, up to the first that does not
// read whole (a torn write): the rest of the segment is not read, and cut
// off when repair is set (the last segment, opened for writing).
func (f *File) read(s *segment, repair bool) error {
	flag := os.O_RDONLY
	if !f.readOnly {
		flag = os.O_RDWR
	}
	fh, err := os.OpenFile(f.segPath(s.first), flag, 0)
	if err != nil {
		return fmt.Errorf("attempts file %q: %w", f.path, err)
	}
	s.fh = fh
	b, err := io.ReadAll(fh)
	if err != nil {
		return fmt.Errorf("attempts file %q: read %s: %w", f.path, fh.Name(), err)
	}
	var off int
	for off+frameHead <= len(b) {
		n := int(binary.BigEndian.Uint32(b[off:]))
		end := off + frameHead + n
		if n < 8 || end > len(b) {
			break
		}
		p := b[off+frameHead : end]
		if crc32.Checksum(p, castagnoli) != binary.BigEndian.Uint32(b[off+4:]) ||
			binary.BigEndian.Uint64(p) != s.first+uint64(len(s.ents)) {
			break
		}
		x, ok := peek(p[8:])
		if !ok {
			break
		}
		e := entry{time: x.time, off: uint32(off), n: uint32(n), ev: uint32(maphash.Bytes(f.seed, x.eventID)),
			pair: f.pair(f.internBytes(x.sink), f.internBytes(x.endpoint)), tenant: f.internBytes(x.tenant), status: status16(x.status)}
		if string(x.outcome) != OutcomeDelivered {
			e.flags |= flagFailed
		}
		if f.cut.removes(s.first+uint64(len(s.ents)), e.time) {
			e.flags |= flagRemoved
		} else {
			s.live++
		}
		s.ents = append(s.ents, e)
		off = end
	}
	s.size = int64(off)
	f.live += int64(s.live)
	if off < len(b) && repair {
		if err := fh.Truncate(int64(off)); err != nil {
			return fmt.Errorf("attempts file %q: cut a torn record off %s: %w", f.path, fh.Name(), err)
		}
	}
	return nil
}

func status16(s int) uint16 { return uint16(min(max(s, 0), 1<<16-1)) }

func (f *File) internBytes(b []byte) uint32 {
	if id, ok := f.names[string(b)]; ok {
		return id
	}
	return f.intern(string(b))
}

func (f *File) intern(s string) uint32 {
	id, ok := f.names[s]
	if !ok {
		id = uint32(len(f.names))
		f.names[s] = id
	}
	return id
}

func (f *File) pair(sink, endpoint uint32) uint32 {
	k := [2]uint32{sink, endpoint}
	id, ok := f.pairs[k]
	if !ok {
		id = uint32(len(f.pairOf))
		f.pairs[k] = id
		f.pairOf = append(f.pairOf, k)
	}
	return id
}

// Append implements Store: the batch in one write at the end of the last
// segment.
func (f *File) Append(ctx context.Context, batch []Attempt) error {
	if f.readOnly {
		return ErrReadOnly
	}
	if len(batch) == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return fmt.Errorf("store %d attempts in %q: the store is closed", len(batch), f.path)
	}
	s := f.segs[len(f.segs)-1]
	if s.size >= f.segSize {
		ns, err := f.rotate(s)
		if err != nil {
			return fmt.Errorf("store %d attempts in %q: %w", len(batch), f.path, err)
		}
		s = ns
	}
	buf := f.buf[:0]
	at := len(s.ents)
	for i := range batch {
		a := normal(batch[i])
		start := len(buf)
		buf = append(buf, make([]byte, frameHead)...)
		buf = binary.BigEndian.AppendUint64(buf, f.next+uint64(i))
		buf = encode(buf, &a)
		p := buf[start+frameHead:]
		binary.BigEndian.PutUint32(buf[start:], uint32(len(p)))
		binary.BigEndian.PutUint32(buf[start+4:], crc32.Checksum(p, castagnoli))
		e := entry{time: micros(a.Time), off: uint32(s.size) + uint32(start), n: uint32(len(p)), ev: uint32(maphash.String(f.seed, a.EventID)),
			pair: f.pair(f.intern(a.Sink), f.intern(a.Endpoint)), tenant: f.intern(a.Tenant), status: status16(a.Status)}
		if a.Failed() {
			e.flags |= flagFailed
		}
		s.ents = append(s.ents, e)
	}
	f.buf = buf
	if _, err := s.fh.WriteAt(buf, s.size); err != nil {
		s.ents = s.ents[:at]
		_ = s.fh.Truncate(s.size) // a torn batch would stop a reader there
		return fmt.Errorf("store %d attempts in %q: %w", len(batch), f.path, err)
	}
	s.size += int64(len(buf))
	s.live += len(batch)
	f.live += int64(len(batch))
	f.next += uint64(len(batch))
	f.dirty.Store(true)
	if cap(f.buf) > 4<<20 {
		f.buf = nil // one huge batch does not keep its buffer
	}
	return nil
}

// rotate syncs the last segment and starts the next.
func (f *File) rotate(last *segment) (*segment, error) {
	if err := last.fh.Sync(); err != nil {
		return nil, err
	}
	s, err := f.create(f.next)
	if err != nil {
		return nil, err
	}
	f.segs = append(f.segs, s)
	return s, nil
}

// syncer syncs the last segment every syncEvery while records come, until
// Close.
func (f *File) syncer() {
	defer close(f.done)
	every.Tick(f.stop, syncEvery, func() bool {
		if f.dirty.Swap(false) {
			f.mu.RLock()
			fh := f.segs[len(f.segs)-1].fh
			f.mu.RUnlock()
			_ = fh.Sync() // a failure shows in the next Append's write, or is lost with a power cut
		}
		return true
	})
}

// Search implements Store.
func (f *File) Search(ctx context.Context, q Query) ([]Record, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed {
		return nil, fmt.Errorf("search attempts in %q: the store is closed", f.path)
	}
	m, ok := f.matcher(q)
	if !ok {
		return nil, nil
	}
	n := q.Size()
	var (
		out     []Record
		buf     []byte
		visited int
	)
	for si := len(f.segs) - 1; si >= 0; si-- {
		s := f.segs[si]
		if s.live == 0 || (m.before > 0 && s.first >= m.before) {
			continue
		}
		top := len(s.ents) - 1
		if m.before > 0 && m.before-s.first <= uint64(top) {
			top = int(m.before-s.first) - 1 // a cursor: start at it, not at the segment's end
		}
		for i := top; i >= 0; i-- {
			if visited++; visited%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
			}
			id := s.first + uint64(i)
			if !m.selects(&s.ents[i], id) {
				continue
			}
			r, err := s.load(id, &s.ents[i], &buf)
			if err != nil {
				return nil, fmt.Errorf("search attempts in %q: %w", f.path, err)
			}
			if !q.Matches(r) { // another event of the same hash
				continue
			}
			if out = append(out, r); len(out) == n {
				return out, nil
			}
		}
	}
	return out, nil
}

// matcher selects the entries of a query (a superset of its records: an
// event id by its hash).
type matcher struct {
	before                             uint64
	pairs                              []bool // by pair; nil: any
	tenant, ev                         uint32
	byTenant, byEvent, byStatus, fails bool
	status                             uint16
	since, until                       int64
	bySince, byUntil                   bool
}

// matcher returns q's matcher, or false if q can select nothing (a name
// no record has).
func (f *File) matcher(q Query) (matcher, bool) {
	q = q.stored()
	m := matcher{before: uint64(max(q.Before, 0)), fails: q.Failed}
	if q.Sink != "" || q.Endpoint != "" {
		sink, ok1 := f.names[q.Sink]
		ep, ok2 := f.names[q.Endpoint]
		if !ok1 || !ok2 {
			return m, false
		}
		m.pairs = make([]bool, len(f.pairOf))
		for i, p := range f.pairOf {
			m.pairs[i] = (q.Sink == "" || p[0] == sink) && (q.Endpoint == "" || p[1] == ep)
		}
	}
	if q.Tenant != "" {
		t, ok := f.names[q.Tenant]
		if !ok {
			return m, false
		}
		m.tenant, m.byTenant = t, true
	}
	if q.EventID != "" {
		m.ev, m.byEvent = uint32(maphash.String(f.seed, q.EventID)), true
	}
	if q.Status > 0 && q.Status < 1<<16 {
		m.status, m.byStatus = uint16(q.Status), true
	}
	if !q.Since.IsZero() {
		m.since, m.bySince = micros(micro(q.Since)), true
	}
	if !q.Until.IsZero() {
		m.until, m.byUntil = micros(micro(q.Until)), true
	}
	return m, true
}

func (m *matcher) selects(e *entry, id uint64) bool {
	switch {
	case e.flags&flagRemoved != 0,
		m.before > 0 && id >= m.before,
		m.pairs != nil && !m.pairs[e.pair],
		m.byTenant && e.tenant != m.tenant,
		m.byEvent && e.ev != m.ev,
		m.byStatus && e.status != m.status,
		m.fails && e.flags&flagFailed == 0,
		m.bySince && e.time < m.since,
		m.byUntil && e.time >= m.until:
		return false
	}
	return true
}

// load reads record id from s (buf is reused).
func (s *segment) load(id uint64, e *entry, buf *[]byte) (Record, error) {
	b := slices.Grow((*buf)[:0], frameHead+int(e.n))[:frameHead+int(e.n)]
	*buf = b
	if _, err := s.fh.ReadAt(b, int64(e.off)); err != nil {
		return Record{}, fmt.Errorf("record %d: %w", id, err)
	}
	p := b[frameHead:]
	if crc32.Checksum(p, castagnoli) != binary.BigEndian.Uint32(b[4:]) || binary.BigEndian.Uint64(p) != id {
		return Record{}, fmt.Errorf("record %d: %w", id, errCorrupt)
	}
	a, err := decode(p[8:])
	if err != nil {
		return Record{}, fmt.Errorf("record %d: %w", id, err)
	}
	return Record{ID: int64(id), Attempt: a}, nil
}

// Prune implements Store.
func (f *File) Prune(ctx context.Context, before time.Time, keep int64) (int64, error) {
	if f.readOnly {
		return 0, ErrReadOnly
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, fmt.Errorf("prune attempts in %q: the store is closed", f.path)
	}
	var removed int64
	remove := func(s *segment, e *entry) {
		e.flags |= flagRemoved
		s.live--
		f.live--
		removed++
	}
	cut := f.cut.clone()
	if !before.IsZero() {
		b := micros(micro(before))
		for _, s := range f.segs {
			for i := range s.ents {
				if e := &s.ents[i]; e.flags&flagRemoved == 0 && e.time < b {
					remove(s, e)
				}
			}
		}
		if removed > 0 {
			cut.addAge(b, f.next)
		}
	}
	if over := f.live - keep; keep > 0 && over > 0 {
	oldest:
		for _, s := range f.segs {
			for i := range s.ents {
				if e := &s.ents[i]; e.flags&flagRemoved == 0 {
					remove(s, e)
					cut.floor = s.first + uint64(i) + 1
					if over--; over == 0 {
						break oldest
					}
				}
			}
		}
	}
	if removed == 0 {
		return 0, nil
	}
	cut.forget(f.segs[0].first)
	if err := cut.write(f.path); err != nil {
		// Removed from the index but not for good: they come back
		// when the directory is opened again, and are pruned again.
		return removed, fmt.Errorf("prune attempts in %q: %w", f.path, err)
	}
	f.cut = cut
	f.dropDead()
	return removed, nil
}

// dropDead deletes every segment but the last whose records are all
// removed.
func (f *File) dropDead() {
	kept := f.segs[:0]
	for i, s := range f.segs {
		if s.live > 0 || i == len(f.segs)-1 {
			kept = append(kept, s)
			continue
		}
		s.fh.Close()
		if err := os.Remove(s.fh.Name()); err != nil {
			kept = append(kept, s) // tried again at the next prune
		}
	}
	clear(f.segs[len(kept):])
	f.segs = kept
}

// Close implements Store: it syncs the last segment.
func (f *File) Close() error {
	f.closeOnce.Do(func() {
		if f.stop != nil {
			close(f.stop)
			<-f.done
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if !f.readOnly && len(f.segs) > 0 {
			f.closeErr = f.segs[len(f.segs)-1].fh.Sync()
		}
		f.closeSegments()
		if f.lock != nil {
			f.lock.Close()
		}
		f.closed = true
	})
	if f.closeErr != nil {
		return fmt.Errorf("close attempts file %q: %w", f.path, f.closeErr)
	}
	return nil
}

func (f *File) closeSegments() {
	for _, s := range f.segs {
		if s.fh != nil {
			s.fh.Close()
		}
	}
	f.segs = nil
}

// cutState is what Prune removed, kept in the file "pruned": every id
// below floor, and for each cut by age, the ids below its limit older
// than its time. A later cut that reaches as far in both hides an
// earlier one, so that the retention, which cuts by an age that moves
// forward, keeps one.
type cutState struct {
	floor uint64
	ages  []ageCut
}

type ageCut struct {
	before int64 // Unix µs
	limit  uint64
}

const cutVersion = 1

func (c cutState) clone() cutState {
	c.ages = slices.Clone(c.ages)
	return c
}

func (c *cutState) removes(id uint64, t int64) bool {
	if id < c.floor {
		return true
	}
	for _, a := range c.ages {
		if id < a.limit && t < a.before {
			return true
		}
	}
	return false
}

func (c *cutState) addAge(before int64, limit uint64) {
	c.ages = slices.DeleteFunc(c.ages, func(a ageCut) bool { return a.before <= before && a.limit <= limit })
	c.ages = append(c.ages, ageCut{before, limit})
}

// forget drops the cuts that reach no record left: below floor, or below
// the first segment's first id.
func (c *cutState) forget(first uint64) {
	c.ages = slices.DeleteFunc(c.ages, func(a ageCut) bool { return a.limit <= max(c.floor, first) })
}

func (c *cutState) read(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "pruned"))
	if errors.Is(err, os.ErrNotExist) {
		*c = cutState{}
		return nil
	}
	if err != nil {
		return fmt.Errorf("attempts file %q: %w", dir, err)
	}
	d := decoder{b: b}
	if len(b) == 0 || b[0] != cutVersion {
		d.bad = true
	} else {
		d.b = b[1:]
	}
	c.floor = d.uvarint()
	c.ages = nil
	for n := d.uvarint(); n > 0 && !d.bad; n-- {
		c.ages = append(c.ages, ageCut{before: d.varint(), limit: d.uvarint()})
	}
	if d.bad || len(d.b) != 0 {
		return fmt.Errorf("attempts file %q: %q does not decode: remove it (the attempts pruned come back until the next prune)", dir, filepath.Join(dir, "pruned"))
	}
	return nil
}

// write replaces the file "pruned" with c (a temporary file renamed over
// it).
func (c *cutState) write(dir string) error {
	b := []byte{cutVersion}
	b = binary.AppendUvarint(b, c.floor)
	b = binary.AppendUvarint(b, uint64(len(c.ages)))
	for _, a := range c.ages {
		b = binary.AppendVarint(b, a.before)
		b = binary.AppendUvarint(b, a.limit)
	}
	name := filepath.Join(dir, "pruned")
	tmp, err := os.CreateTemp(dir, "pruned.*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
