package audit

import (
	"bufio"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
)

// codec is what a sorter needs of its records: an order, an estimate of
// the memory one takes, and a binary form for spilling.
type codec[T any] struct {
	cmp   func(a, b T) int
	size  func(T) int64
	write func(w *bufio.Writer, v T)
	read  func(r *bufio.Reader) (T, error)
}

// Sizes of a spill: fanIn runs are merged at once (more are merged in
// rounds first), each read through a buffer of runBuffer bytes.
const (
	fanIn     = 16
	runBuffer = 32 << 10
)

// sorter is an external sort: records are kept in memory up to limit bytes
// (by codec.size), then sorted and written to a run file in dir; sorted
// reads the runs back merged. Without a spill nothing touches the disk.
type sorter[T any] struct {
	c     codec[T]
	limit int64
	dir   string
	buf   []T
	bytes int64
	runs  []string
	stats *SpillStats
}

// SpillStats counts what the audit wrote to its temporary directory.
type SpillStats struct {
	Runs  int   // sorted runs written (merge rounds included)
	Bytes int64 // bytes written
}

func newSorter[T any](c codec[T], limit int64, dir string, stats *SpillStats) *sorter[T] {
	return &sorter[T]{c: c, limit: limit, dir: dir, stats: stats}
}

func (s *sorter[T]) add(v T) error {
	s.buf = append(s.buf, v)
	s.bytes += s.c.size(v)
	if s.bytes >= s.limit {
		return s.spill()
	}
	return nil
}

// spill sorts the records in memory and writes them to a new run.
func (s *sorter[T]) spill() error {
	slices.SortFunc(s.buf, s.c.cmp)
	i := 0
	path, err := s.writeRun(func() (T, bool, error) {
		if i == len(s.buf) {
			var zero T
			return zero, false, nil
		}
		i++
		return s.buf[i-1], true, nil
	})
	if err != nil {
		return err
	}
	s.runs = append(s.runs, path)
	clear(s.buf) // drop the strings for the collector; keep the capacity
	s.buf, s.bytes = s.buf[:0], 0
	return nil
}

// writeRun writes what next yields to a new temporary file.
func (s *sorter[T]) writeRun(next func() (T, bool, error)) (string, error) {
	f, err := os.CreateTemp(s.dir, "outbox-relay-audit-*.run")
	if err != nil {
		return "", fmt.Errorf("spill the audit's sort to disk: %w (set --temp-dir to a writable directory with room, or raise --memory)", err)
	}
	cw := &countingWriter{w: f}
	w := bufio.NewWriterSize(cw, runBuffer)
	for {
		v, ok, err := next()
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			return "", err
		}
		if !ok {
			break
		}
		s.c.write(w, v)
	}
	err = w.Flush()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("spill the audit's sort to %s: %w (set --temp-dir to a directory with room, or raise --memory)", f.Name(), err)
	}
	s.stats.Runs++
	s.stats.Bytes += cw.n
	return f.Name(), nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// sorted returns an iterator over every record added, in order, and a
// function that releases the runs. No record may be added after.
func (s *sorter[T]) sorted() (func() (T, bool, error), func(), error) {
	if len(s.runs) == 0 {
		slices.SortFunc(s.buf, s.c.cmp)
		i := 0
		buf := s.buf
		s.buf = nil
		return func() (T, bool, error) {
			if i == len(buf) {
				var zero T
				return zero, false, nil
			}
			i++
			return buf[i-1], true, nil
		}, func() { buf = nil }, nil
	}
	if len(s.buf) > 0 {
		if err := s.spill(); err != nil {
			return nil, nil, err
		}
	}
	s.buf = nil
	for len(s.runs) > fanIn { // merge in rounds so that at most fanIn files are open
		m, err := s.merge(s.runs[:fanIn])
		if err != nil {
			return nil, nil, err
		}
		path, err := s.writeRun(m.next)
		m.close()
		if err != nil {
			return nil, nil, err
		}
		for _, r := range s.runs[:fanIn] {
			os.Remove(r)
		}
		s.runs = append(s.runs[fanIn:], path)
	}
	m, err := s.merge(s.runs)
	if err != nil {
		return nil, nil, err
	}
	return m.next, m.close, nil
}

// remove deletes the sorter's runs.
func (s *sorter[T]) remove() {
	for _, r := range s.runs {
		os.Remove(r)
	}
	s.runs, s.buf = nil, nil
}

// merger is a k-way merge of sorted runs.
type merger[T any] struct {
	c     codec[T]
	files []*os.File
	h     mergeHeap[T]
	err   error
}

type cursor[T any] struct {
	r   *bufio.Reader
	v   T
	run int // ties go to the earlier run: a stable merge
}

type mergeHeap[T any] struct {
	cmp func(a, b T) int
	cs  []*cursor[T]
}

func (h *mergeHeap[T]) Len() int { return len(h.cs) }
func (h *mergeHeap[T]) Less(i, j int) bool {
	if c := h.cmp(h.cs[i].v, h.cs[j].v); c != 0 {
		return c < 0
	}
	return h.cs[i].run < h.cs[j].run
}
func (h *mergeHeap[T]) Swap(i, j int) { h.cs[i], h.cs[j] = h.cs[j], h.cs[i] }
func (h *mergeHeap[T]) Push(x any)    { h.cs = append(h.cs, x.(*cursor[T])) }
func (h *mergeHeap[T]) Pop() any {
	c := h.cs[len(h.cs)-1]
	h.cs = h.cs[:len(h.cs)-1]
	return c
}

func (s *sorter[T]) merge(runs []string) (*merger[T], error) {
	m := &merger[T]{c: s.c, h: mergeHeap[T]{cmp: s.c.cmp}}
	for i, path := range runs {
		f, err := os.Open(path)
		if err != nil {
			m.close()
			return nil, fmt.Errorf("read back the audit's spilled sort: %w", err)
		}
		m.files = append(m.files, f)
		c := &cursor[T]{r: bufio.NewReaderSize(f, runBuffer), run: i}
		if err := m.advance(c); err != nil {
			m.close()
			return nil, err
		}
	}
	return m, nil
}

// advance reads c's next record and puts it on the heap; at the end of its
// run c is dropped.
func (m *merger[T]) advance(c *cursor[T]) error {
	v, err := m.c.read(c.r)
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read back the audit's spilled sort: %w", err)
	}
	c.v = v
	heap.Push(&m.h, c)
	return nil
}

func (m *merger[T]) next() (T, bool, error) {
	var zero T
	if m.err != nil {
		return zero, false, m.err
	}
	if m.h.Len() == 0 {
		return zero, false, nil
	}
	c := heap.Pop(&m.h).(*cursor[T])
	v := c.v
	if err := m.advance(c); err != nil {
		m.err = err
		return zero, false, err
	}
	return v, true, nil
}

func (m *merger[T]) close() {
	for _, f := range m.files {
		f.Close()
	}
	m.files = nil
}

// Binary forms: varints and length-prefixed strings.

func putString(w *bufio.Writer, s string) {
	putUvarint(w, uint64(len(s)))
	w.WriteString(s)
}

func putUvarint(w *bufio.Writer, v uint64) {
	var b [binary.MaxVarintLen64]byte
	w.Write(b[:binary.PutUvarint(b[:], v)])
}

func putVarint(w *bufio.Writer, v int64) {
	var b [binary.MaxVarintLen64]byte
	w.Write(b[:binary.PutVarint(b[:], v)])
}

// reader decodes one record's fields, keeping the first error; a record
// cut short is io.ErrUnexpectedEOF, a clean end of the run io.EOF.
type reader struct {
	r     *bufio.Reader
	err   error
	first bool
}

func newReader(r *bufio.Reader) *reader { return &reader{r: r, first: true} }

func (r *reader) fail(err error) {
	if r.err != nil {
		return
	}
	if errors.Is(err, io.EOF) && !r.first {
		err = io.ErrUnexpectedEOF
	}
	r.err = err
}

func (r *reader) uvarint() uint64 { return readVarint(r, binary.ReadUvarint) }

func (r *reader) varint() int64 { return readVarint(r, binary.ReadVarint) }

// readVarint reads the next varint of r with read (binary.ReadUvarint or
// ReadVarint); nothing once r has failed.
func readVarint[T uint64 | int64](r *reader, read func(io.ByteReader) (T, error)) T {
	if r.err != nil {
		return 0
	}
	v, err := read(r.r)
	if err != nil {
		r.fail(err)
	}
	r.first = false
	return v
}

func (r *reader) string() string {
	n := r.uvarint()
	if r.err != nil || n == 0 {
		return ""
	}
	if n > 1<<30 {
		r.fail(fmt.Errorf("a spilled string of %d bytes: the run is corrupt", n))
		return ""
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.r, b); err != nil {
		r.fail(io.ErrUnexpectedEOF)
		return ""
	}
	return string(b)
}
