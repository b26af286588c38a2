package canal

// DecodeWhole makes r decode every column of an outbox row, as go-mysql
// does, instead of only the columns used.
func DecodeWhole(r *Reader) { r.decodeWhole = true }

// Narrowed is the number of rows events r decoded narrow, and of those it
// decoded whole because a value's length could not be told.
func Narrowed(r *Reader) (narrow, unknown int64) { return r.narrowed.Load(), r.unknown.Load() }

// Direct is the number of rows events r decoded straight into events.
func Direct(r *Reader) int64 { return r.direct.Load() }

// Marks are the transaction boundaries f remembers of file.
func Marks(f *CommitFinder, file string) []uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]uint32(nil), f.marks[file]...)
}

// Reads are how many finds of f one XID event answered, and how many read
// the file.
func Reads(f *CommitFinder) (xid, file int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads[0], f.reads[1]
}
