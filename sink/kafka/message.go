package kafka

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink/internal/route"
)

// Header names set on every message, before the event's own headers.
const (
	HeaderID            = route.HeaderID
	HeaderType          = route.HeaderType
	HeaderAggregateType = route.HeaderAggregateType
	HeaderGTID          = route.HeaderGTID
	HeaderBinlogFile    = route.HeaderBinlogFile
	HeaderBinlogPos     = route.HeaderBinlogPos
	HeaderTable         = route.HeaderTable
	// HeaderTraceParent and HeaderTraceState carry the row's W3C trace
	// context, only when it has one: the names OpenTelemetry's Kafka
	// instrumentations read.
	HeaderTraceParent = route.HeaderTraceParent
	HeaderTraceState  = route.HeaderTraceState
	// HeaderSink names the sink that produced the message (Config.Writer),
	// and HeaderPartitions is the partition count of its topic when it was
	// produced: what Recover checks before it trusts a partition.
	HeaderSink       = "relay_sink"
	HeaderPartitions = "relay_partitions"
	// Set on dead-letter messages only.
	HeaderDLQReason        = "dlq_reason"
	HeaderDLQOriginalTopic = "dlq_original_topic"
)

// wireRecord is the Kafka record of one event as the sink writes it: its
// headers are kept in a record's wire form (each name and value after its
// varint length), written once, straight from the event, into the buffer
// of the event's batch, so that placing the record in a record batch is one
// copy of them. A nil value is a null one.
type wireRecord struct {
	topic      string
	key, value []byte
	time       time.Time
	headers    []byte // the headers in wire form, without their count
	nh         int    // how many
}

// size is kafka-go's estimate of the record's size (Message.totalSize,
// unexported), which its writer compares with BatchBytes: what the record
// holds, and a little more.
func (r *wireRecord) size() int {
	return 4 + 1 + 1 + 4 + len(r.key) + 4 + len(r.value) + 8 + varIntLen(int64(r.nh)) + len(r.headers)
}

// message returns r as a kafka-go message: its headers a list of capped
// slices of r's.
func (r *wireRecord) message() kafkago.Message {
	return kafkago.Message{Topic: r.topic, Key: r.key, Value: r.value, Time: r.time, Headers: decodeHeaders(r.headers, r.nh)}
}

// headers returns the message headers of e, without the sink's own
// (relay_sink, relay_partitions). Their values share one buffer: each value
// is a capped slice of it.
func headers(e *event.Event) []kafkago.Header {
	b, n := appendHeaders(make([]byte, 0, headersLen(e)), e, nil, -1)
	return decodeHeaders(b, n)
}

// headersLen is about the length of e's headers in wire form (a little more
// when its numbers are short).
func headersLen(e *event.Event) int {
	n := len(e.ID) + len(e.Type) + len(e.AggregateType) + len(e.Source.GTID) + len(e.Source.File) +
		len(e.Table) + len(e.TraceParent) + len(e.TraceState) + 160 // the names, lengths and numbers
	for _, h := range e.Headers {
		n += len(h.Key) + len(h.Value) + 4
	}
	return n
}

// appendHeaders appends the headers of e's message to b in a record's wire
// form, in their order on the wire: the metadata, then the sink's own when
// writer is set (relay_sink, relay_partitions: partitions, unless it is
// negative, which leaves both out), then the trace context, then the event's
// own; it returns b and how many it appended. Every message the sink makes
// gets its headers here.
func appendHeaders(b []byte, e *event.Event, writer []byte, partitions int) ([]byte, int) {
	var num [20]byte
	n := 7 + len(e.Headers)
	b = appendHeader(b, HeaderID, e.ID)
	b = appendHeader(b, HeaderType, e.Type)
	b = appendHeader(b, HeaderAggregateType, e.AggregateType)
	b = appendHeader(b, HeaderGTID, e.Source.GTID)
	b = appendHeader(b, HeaderBinlogFile, e.Source.File)
	b = appendHeaderBytes(b, HeaderBinlogPos, strconv.AppendUint(num[:0], uint64(e.Source.Pos), 10))
	b = appendHeader(b, HeaderTable, e.Table)
	if writer != nil && partitions >= 0 {
		b = appendHeaderBytes(b, HeaderSink, writer)
		b = appendHeaderBytes(b, HeaderPartitions, strconv.AppendInt(num[:0], int64(partitions), 10))
		n += 2
	}
	if e.TraceParent != "" {
		b = appendHeader(b, HeaderTraceParent, e.TraceParent)
		n++
		if e.TraceState != "" {
			b = appendHeader(b, HeaderTraceState, e.TraceState)
			n++
		}
	}
	for _, h := range e.Headers {
		b = appendHeader(b, h.Key, h.Value)
	}
	return b, n
}

// appendHeader appends one header in a record's wire form: its name and its
// value, each after its varint length.
func appendHeader(b []byte, k, v string) []byte {
	b = binary.AppendVarint(b, int64(len(k)))
	b = append(b, k...)
	b = binary.AppendVarint(b, int64(len(v)))
	return append(b, v...)
}

// appendHeaderBytes is appendHeader of a []byte value; a nil one is null
// (length -1).
func appendHeaderBytes(b []byte, k string, v []byte) []byte {
	b = binary.AppendVarint(b, int64(len(k)))
	b = append(b, k...)
	return appendNullBytes(b, v)
}

// decodeHeaders returns the n headers of b (wire form) as a list, each value
// a capped slice of b (a null one nil), so that appending to one can never
// overwrite the next.
func decodeHeaders(b []byte, n int) []kafkago.Header {
	if n == 0 {
		return nil
	}
	hs := make([]kafkago.Header, 0, n)
	next := func() []byte {
		l, k := binary.Varint(b)
		b = b[k:]
		if l < 0 {
			return nil
		}
		v := b[:l:l]
		b = b[l:]
		return v
	}
	for range n {
		k := next()
		hs = append(hs, kafkago.Header{Key: string(k), Value: next()})
	}
	return hs
}

// withWriter returns hs, the headers of a message for a topic of partitions
// partitions, with the sink's relay_sink and relay_partitions headers after
// the metadata headers (before the event's own, which come last); hs
// unchanged when the sink has no Writer.
func (s *Sink) withWriter(hs []kafkago.Header, partitions int) []kafkago.Header {
	if s.cfg.Writer == "" {
		return hs
	}
	const at = 7 // after "table"
	return slices.Insert(hs, at,
		kafkago.Header{Key: HeaderSink, Value: s.writer},
		kafkago.Header{Key: HeaderPartitions, Value: strconv.AppendInt(nil, int64(partitions), 10)})
}

// envelopeHead is the envelope's fields before "headers" and "payload",
// in their order on the wire.
type envelopeHead struct {
	ID            string         `json:"id"`
	Type          string         `json:"type"`
	AggregateType string         `json:"aggregate_type"`
	AggregateID   string         `json:"aggregate_id"`
	Timestamp     string         `json:"timestamp"`
	Table         string         `json:"table"`
	Source        envelopeSource `json:"source"`
}

type envelopeSource struct {
	GTID string `json:"gtid"`
	File string `json:"file"`
	Pos  uint32 `json:"pos"`
}

// envelope returns e as one JSON document. A payload that is valid JSON is
// embedded byte for byte; any other payload is embedded as a base64 string
// and "payload_encoding" is "base64"; a SQL NULL payload is null with
// "payload_encoding" "sql_null".
func envelope(e *event.Event) []byte {
	var b bytes.Buffer
	b.Grow(256 + len(e.Payload))
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	ts := ""
	if !e.CommitTime.IsZero() {
		ts = e.CommitTime.UTC().Format(time.RFC3339)
	}
	// Encoding these plain strings and numbers cannot fail.
	_ = enc.Encode(envelopeHead{
		ID: e.ID, Type: e.Type, AggregateType: e.AggregateType, AggregateID: e.AggregateID,
		Timestamp: ts, Table: e.Table,
		Source: envelopeSource{GTID: e.Source.GTID, File: e.Source.File, Pos: e.Source.Pos},
	})
	b.Truncate(b.Len() - 2) // "}\n"
	b.WriteString(`,"headers":{`)
	for i, h := range e.Headers {
		if i > 0 {
			b.WriteByte(',')
		}
		_ = enc.Encode(h.Key)
		b.Truncate(b.Len() - 1)
		b.WriteByte(':')
		_ = enc.Encode(h.Value)
		b.Truncate(b.Len() - 1)
	}
	b.WriteByte('}')
	switch {
	case e.Payload == nil:
		b.WriteString(`,"payload_encoding":"sql_null","payload":null`)
	case json.Valid(e.Payload):
		b.WriteString(`,"payload":`)
		b.Write(e.Payload)
	default:
		b.WriteString(`,"payload_encoding":"base64","payload":"`)
		b.WriteString(base64.StdEncoding.EncodeToString(e.Payload))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.Bytes()
}

// varIntLen is the length of i as a zig-zag varint.
func varIntLen(i int64) int {
	u := uint64((i << 1) ^ (i >> 63))
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

// batchHeadersLen is about the length of the keys and headers of evs'
// records: the size of the one buffer prepare cuts them from.
func batchHeadersLen(evs []*event.Event) int {
	n := 0
	for _, e := range evs {
		n += headersLen(e) + len(e.AggregateID)
	}
	return n
}
