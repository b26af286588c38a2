package kafka

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"time"

	"github.com/segmentio/kafka-go/compress"
)

// The sink encodes each produce request's record batch itself, in one
// buffer, and sends it with kafka-go's RawProduce: kafka-go's own encoder
// (Client.Produce) writes every field of every record (the length, the
// key, the value, each header's name and value) through a reflection-built
// encoder into paged buffers, which cost more CPU per event than all the
// sink's other work. Each record's headers come already in wire form
// (wireRecord, written once from the event by build): encoding a record is
// a few varints and three copies. The bytes are the same as kafka-go's (record batch
// format v2, Kafka 0.11 and later; TestRecordBatchIsKafkaGos compares them).

// castagnoli is the CRC-32C table of a record batch's checksum.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Offsets in a record batch (after the 4-byte size that precedes it in a
// produce request).
const (
	batchHeaderSize = 61 // base offset … record count
	offCRC          = 17
	offAttributes   = 21
)

// encodeBatch returns msgs as a produce request's record set, in dst's
// memory when it is large enough: its size (int32), then one record batch
// of format v2 holding every message, its records compressed with codec
// when codec is not nil. now is the timestamp of a message without one
// (build always sets one).
func encodeBatch(dst []byte, msgs []*pending, codec compress.Codec, now time.Time) ([]byte, error) {
	n := 4 + batchHeaderSize
	for _, p := range msgs {
		n += p.size + 16 // size counts what a record holds, and a little more
	}
	b := dst[:0]
	if cap(b) < n {
		b = make([]byte, 0, n)
	}
	b = b[:4+batchHeaderSize]
	first, maxTS := int64(0), int64(0)
	for i, p := range msgs {
		t := millis(p.rec.time, now)
		if i == 0 {
			first = t
		}
		maxTS = max(maxTS, t)
	}
	start := len(b)
	for i, p := range msgs {
		b = appendRecord(b, &p.rec, millis(p.rec.time, now)-first, int64(i))
	}
	var attributes int16
	if codec != nil {
		var z bytes.Buffer
		w := codec.NewWriter(&z)
		if _, err := w.Write(b[start:]); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		b = append(b[:start], z.Bytes()...)
		attributes = int16(codec.Code()) & 0x7
	}
	be := binary.BigEndian
	be.PutUint32(b[0:], uint32(len(b)-4))  // the record set's size
	h := b[4:]                             // the batch
	be.PutUint64(h[0:], 0)                 // base offset
	be.PutUint32(h[8:], uint32(len(h)-12)) // batch length: what follows it
	be.PutUint32(h[12:], 0xffffffff)       // partition leader epoch: -1
	h[16] = 2                              // magic
	be.PutUint16(h[offAttributes:], uint16(attributes))
	be.PutUint32(h[23:], uint32(len(msgs)-1)) // last offset delta
	be.PutUint64(h[27:], uint64(first))       // first timestamp
	be.PutUint64(h[35:], uint64(maxTS))       // max timestamp
	be.PutUint64(h[43:], 0xffffffffffffffff)  // producer id: -1
	be.PutUint16(h[51:], 0xffff)              // producer epoch: -1
	be.PutUint32(h[53:], 0xffffffff)          // base sequence: -1
	be.PutUint32(h[57:], uint32(len(msgs)))   // records
	be.PutUint32(h[offCRC:], crc32.Checksum(h[offAttributes:], castagnoli))
	return b, nil
}

// millis is t in milliseconds since the epoch, as kafka-go writes it
// (now's when t is zero).
func millis(t, now time.Time) int64 {
	if t.IsZero() {
		t = now
	}
	return t.UnixNano() / int64(time.Millisecond)
}

// appendRecord appends r as one record of a batch: its headers are copied
// as they are, already in wire form.
func appendRecord(b []byte, r *wireRecord, tsDelta, offDelta int64) []byte {
	length := 1 + varIntLen(tsDelta) + varIntLen(offDelta) + nullBytesLen(r.key) + nullBytesLen(r.value) +
		varIntLen(int64(r.nh)) + len(r.headers)
	b = binary.AppendVarint(b, int64(length))
	b = append(b, 0) // record attributes (unused)
	b = binary.AppendVarint(b, tsDelta)
	b = binary.AppendVarint(b, offDelta)
	b = appendNullBytes(b, r.key)
	b = appendNullBytes(b, r.value)
	b = binary.AppendVarint(b, int64(r.nh))
	return append(b, r.headers...)
}

// appendNullBytes appends v's length and v; a nil v is length -1 (null).
func appendNullBytes(b, v []byte) []byte {
	if v == nil {
		return binary.AppendVarint(b, -1)
	}
	return append(binary.AppendVarint(b, int64(len(v))), v...)
}

func nullBytesLen(v []byte) int {
	if v == nil {
		return varIntLen(-1)
	}
	return varIntLen(int64(len(v))) + len(v)
}
