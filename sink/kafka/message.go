package kafka

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/event"
)

// Header names set on every message, before the event's own headers.
const (
	HeaderID            = "id"
	HeaderType          = "type"
	HeaderAggregateType = "aggregate_type"
	HeaderGTID          = "gtid"
	HeaderBinlogFile    = "binlog_file"
	HeaderBinlogPos     = "binlog_pos"
	HeaderTable         = "table"
	// HeaderTraceParent and HeaderTraceState carry the row's W3C trace
	// context, only when it has one: the names OpenTelemetry's Kafka
	// instrumentations read.
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
	// HeaderSink names the sink that produced the message (Config.Writer),
	// and HeaderPartitions is the partition count of its topic when it was
	// produced: what Recover checks before it trusts a partition.
	HeaderSink       = "relay_sink"
	HeaderPartitions = "relay_partitions"
	// Set on dead-letter messages only.
	HeaderDLQReason        = "dlq_reason"
	HeaderDLQOriginalTopic = "dlq_original_topic"
)

// headers returns the message headers of e, without the sink's own
// (relay_sink, relay_partitions). Their values share one buffer, allocated
// once per message: each value is a capped slice of it.
func headers(e *event.Event) []kafkago.Header {
	one := [1]*event.Event{e}
	a := newArena(one[:], 0)
	return a.headers(e, nil, -1)
}

// arena is what the messages of one batch are cut from: one buffer for
// their keys and header values, one list their header lists are capped
// slices of, so that a batch's messages cost a few allocations, not a few
// per message. Every slice handed out is capped at its end, so appending to
// one (a CloudEvents header) can never overwrite the next; when an estimate
// falls short, the rest is cut from a new block (what was handed out stays
// valid).
type arena struct {
	buf valueBuf
	hs  []kafkago.Header
}

// newArena sizes an arena for the messages of evs, with extra bytes of
// room per message (a rendered key).
func newArena(evs []*event.Event, extra int) arena {
	n, h := 0, 0
	for _, e := range evs {
		n += headerBytes(e) + 20 + extra + len(e.AggregateID)
		h += 11 + len(e.Headers)
	}
	return arena{buf: make([]byte, 0, n), hs: make([]kafkago.Header, 0, h)}
}

// headerBytes is the length of e's header values.
func headerBytes(e *event.Event) int {
	n := len(e.ID) + len(e.Type) + len(e.AggregateType) + len(e.Source.GTID) + len(e.Source.File) +
		len(e.Table) + len(e.TraceParent) + len(e.TraceState)
	for _, h := range e.Headers {
		n += len(h.Value)
	}
	return n
}

// list returns an empty header list with room for n.
func (a *arena) list(n int) []kafkago.Header {
	if cap(a.hs)-len(a.hs) < n {
		a.hs = make([]kafkago.Header, 0, max(n, cap(a.hs)))
	}
	at := len(a.hs)
	a.hs = a.hs[:at+n]
	return a.hs[at : at : at+n]
}

// headers returns the headers of e's message, in their order on the wire:
// the metadata, then the sink's own when writer is set (relay_sink,
// relay_partitions: partitions, unless it is negative, which leaves both
// out), then the trace context, then the event's own.
func (a *arena) headers(e *event.Event, writer []byte, partitions int) []kafkago.Header {
	var num [20]byte
	pos := strconv.AppendUint(num[:0], uint64(e.Source.Pos), 10)
	own := writer != nil && partitions >= 0
	n := 7 + len(e.Headers)
	if own {
		n += 2
	}
	if e.TraceParent != "" {
		n += 2
	}
	b := &a.buf
	hs := a.list(n)
	hs = append(hs,
		kafkago.Header{Key: HeaderID, Value: b.add(e.ID)},
		kafkago.Header{Key: HeaderType, Value: b.add(e.Type)},
		kafkago.Header{Key: HeaderAggregateType, Value: b.add(e.AggregateType)},
		kafkago.Header{Key: HeaderGTID, Value: b.add(e.Source.GTID)},
		kafkago.Header{Key: HeaderBinlogFile, Value: b.add(e.Source.File)},
		kafkago.Header{Key: HeaderBinlogPos, Value: b.addBytes(pos)},
		kafkago.Header{Key: HeaderTable, Value: b.add(e.Table)},
	)
	if own {
		hs = append(hs,
			kafkago.Header{Key: HeaderSink, Value: writer},
			kafkago.Header{Key: HeaderPartitions, Value: b.addBytes(strconv.AppendInt(num[:0], int64(partitions), 10))})
	}
	if e.TraceParent != "" {
		hs = append(hs, kafkago.Header{Key: HeaderTraceParent, Value: b.add(e.TraceParent)})
		if e.TraceState != "" {
			hs = append(hs, kafkago.Header{Key: HeaderTraceState, Value: b.add(e.TraceState)})
		}
	}
	for _, h := range e.Headers {
		hs = append(hs, kafkago.Header{Key: h.Key, Value: b.add(h.Value)})
	}
	return hs
}

// valueBuf is the buffer a message's header values are cut from. A value
// is capped at its end, so that appending to one cannot overwrite the next.
type valueBuf []byte

func (b *valueBuf) add(s string) []byte {
	b.room(len(s))
	at := len(*b)
	*b = append(*b, s...)
	return (*b)[at:len(*b):len(*b)]
}

func (b *valueBuf) addBytes(v []byte) []byte {
	b.room(len(v))
	at := len(*b)
	*b = append(*b, v...)
	return (*b)[at:len(*b):len(*b)]
}

// room makes sure n more bytes fit without append moving what was cut
// already (it would stay valid, but twice in memory): a new block.
func (b *valueBuf) room(n int) {
	if cap(*b)-len(*b) < n {
		*b = make([]byte, 0, max(n, cap(*b), 64))
	}
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

// messageSize is kafka-go's estimate of a message's size (Message.totalSize,
// unexported), which its writer compares with BatchBytes.
func messageSize(m *kafkago.Message) int {
	n := 4 + 1 + 1 + 4 + len(m.Key) + 4 + len(m.Value) + 8
	n += varIntLen(int64(len(m.Headers)))
	for _, h := range m.Headers {
		n += varIntLen(int64(len(h.Key))) + len(h.Key) + varIntLen(int64(len(h.Value))) + len(h.Value)
	}
	return n
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
