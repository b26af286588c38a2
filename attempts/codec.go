package attempts

import (
	"encoding/binary"
	"errors"
	"time"
)

// The file store keeps an attempt as bytes: a version byte (1), then its
// fields in a fixed order, numbers as varints, times as microseconds since
// the Unix epoch (0: none), strings and the answer with their length
// first. A third of its JSON, and no reflection: the record is most of
// what a batch writes.
const codecVersion = 1

func encode(buf []byte, a *Attempt) []byte {
	buf = append(buf, codecVersion)
	buf = binary.AppendVarint(buf, micros(a.Time))
	for _, s := range []string{a.Sink, a.Endpoint, a.Tenant, a.EventID, a.EventType} {
		buf = appendString(buf, s)
	}
	buf = binary.AppendUvarint(buf, uint64(max(a.Number, 0)))
	buf = binary.AppendUvarint(buf, uint64(max(a.Status, 0)))
	for _, s := range []string{a.Class, a.Error, a.Outcome} {
		buf = appendString(buf, s)
	}
	buf = binary.AppendVarint(buf, int64(a.Duration))
	buf = appendString(buf, string(a.Answer))
	buf = appendString(buf, a.Replay)
	buf = binary.AppendVarint(buf, micros(a.Committed))
	buf = appendString(buf, a.GTID)
	buf = appendString(buf, a.File)
	return binary.AppendUvarint(buf, uint64(a.Pos))
}

func appendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func fromMicros(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.UnixMicro(n).UTC()
}

var errCorrupt = errors.New("attempts file: a record does not decode (written by another version?)")

// decode reads an attempt encode wrote.
func decode(b []byte) (Attempt, error) {
	d := decoder{b: b}
	if len(b) == 0 || b[0] != codecVersion {
		return Attempt{}, errCorrupt
	}
	d.b = b[1:]
	var a Attempt
	a.Time = fromMicros(d.varint())
	a.Sink, a.Endpoint, a.Tenant, a.EventID, a.EventType = d.str(), d.str(), d.str(), d.str(), d.str()
	a.Number, a.Status = int(d.uvarint()), int(d.uvarint())
	a.Class, a.Error, a.Outcome = d.str(), d.str(), d.str()
	a.Duration = time.Duration(d.varint())
	if ans := d.str(); ans != "" {
		a.Answer = []byte(ans)
	}
	a.Replay = d.str()
	a.Committed = fromMicros(d.varint())
	a.GTID, a.File = d.str(), d.str()
	a.Pos = uint32(d.uvarint())
	if d.bad || len(d.b) != 0 {
		return Attempt{}, errCorrupt
	}
	return a, nil
}

type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) uvarint() uint64 { return decodeVarint(d, binary.Uvarint) }

func (d *decoder) varint() int64 { return decodeVarint(d, binary.Varint) }

// decodeVarint takes the next varint off d with read (binary.Uvarint or
// Varint); a bad one marks d bad and empties it.
func decodeVarint[T uint64 | int64](d *decoder, read func([]byte) (T, int)) T {
	v, n := read(d.b)
	if n <= 0 {
		d.bad, d.b = true, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string { return string(d.bytes()) }

// bytes returns the next string's bytes, not copied.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.bad, d.b = true, nil
		return nil
	}
	s := d.b[:n:n]
	d.b = d.b[n:]
	return s
}

// summary is what the file store's index takes from an encoded attempt;
// its byte slices point into the encoding.
type summary struct {
	time                            int64 // Unix µs
	sink, endpoint, tenant, eventID []byte
	status                          int
	outcome                         []byte
}

// peek reads an encoded attempt's summary without copying its strings.
func peek(b []byte) (summary, bool) {
	if len(b) == 0 || b[0] != codecVersion {
		return summary{}, false
	}
	d := decoder{b: b[1:]}
	var x summary
	x.time = d.varint()
	x.sink, x.endpoint, x.tenant, x.eventID = d.bytes(), d.bytes(), d.bytes(), d.bytes()
	d.bytes()   // event type
	d.uvarint() // number
	x.status = int(d.uvarint())
	d.bytes() // class
	d.bytes() // error
	x.outcome = d.bytes()
	return x, !d.bad
}
