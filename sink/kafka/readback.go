package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/listoffsets"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/readback"
	"github.com/outbox-relay/outbox-relay/sink/internal/route"
)

// Auditor reads a sink's topics back for `outbox-relay audit`
// (sink.Auditor): where each event goes, and a reader of the brokers with
// the sink's TLS and credentials. It is used by one goroutine.
type Auditor struct {
	topic *route.Template
	reader
}

// NewAuditor returns the Auditor of a (defaulted) sink config. It does
// not touch the network.
func NewAuditor(c Config) (*Auditor, error) {
	t, err := route.Parse("kafka.topic", c.Topic)
	if err != nil {
		return nil, err
	}
	tr, err := c.transport()
	if err != nil {
		return nil, err
	}
	return &Auditor{topic: t, reader: reader{
		client:    &kafkago.Client{Addr: kafkago.TCP(c.Brokers...), Transport: tr, Timeout: tr.DialTimeout},
		transport: tr,
	}}, nil
}

var _ sink.Auditor = (*Auditor)(nil)

// Dest is the topic the sink produces e to.
func (a *Auditor) Dest(e *event.Event) (string, error) { return a.topic.Render(e) }

// ReadBack reads every partition of each topic, from the offsets of the
// first records at or after from (a record's timestamp is its event's
// commit time) to the partition's end when the read begins. Records carry
// their "id" and "gtid" headers; each partition is a Log ("topic[p]"), in
// offset order. A topic that does not exist holds nothing.
func (a *Auditor) ReadBack(ctx context.Context, from time.Time, topics []string, each func(sink.Stored) error) error {
	for _, topic := range topics {
		n, err := a.Partitions(ctx, topic)
		if errors.Is(err, kafkago.UnknownTopicOrPartition) {
			continue
		}
		if err != nil {
			return err
		}
		ends, err := a.Offsets(ctx, topic, n, kafkago.LastOffset)
		if err != nil {
			return err
		}
		starts, err := a.Offsets(ctx, topic, n, from.UnixMilli())
		if err != nil {
			return fmt.Errorf("at %s: %w", from, err)
		}
		for p := range n {
			if starts[p] < 0 || starts[p] >= ends[p] {
				continue // nothing at or after from
			}
			log := topic + "[" + strconv.Itoa(p) + "]"
			err := a.Read(ctx, topic, p, starts[p], ends[p], func(r Record) error {
				return each(sink.Stored{ID: r.ID, GTID: r.GTID, Time: r.Time, Log: log, Offset: r.Offset})
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// Close closes the Auditor's idle connections.
func (a *Auditor) Close() error {
	a.transport.CloseIdleConnections()
	return nil
}

// Record is a message read back: where it is, and the headers read-back
// uses.
type Record struct {
	Topic     string
	Partition int
	Offset    int64
	Time      time.Time
	// ID, GTID and Sink are the id, gtid and relay_sink headers ("" when
	// absent), each cut short (readback.Clip) past readback.MaxID,
	// readback.MaxGTID and readback.MaxID bytes; HasSink tells an absent
	// relay_sink header from an empty one.
	ID, GTID, Sink string
	HasSink        bool
	// Size is the bytes of its key, its value and its headers' names and
	// values.
	Size int
	// Partitions is the relay_partitions header (the topic's partition
	// count when the sink produced the message); 0 without it.
	Partitions int
	// Replay is the relay_replay header (event.HeaderReplay): the message
	// is a replay job's copy of an event, not the live stream's.
	Replay bool
	// Key and Digest (see digest) are read only by a reader with digests
	// set (Recover's), and only of a record of at most its maxSize bytes.
	Key    []byte
	Digest sink.Digest
}

// readFetchBytes is the most bytes one fetch of a read-back asks for.
const readFetchBytes = 1 << 20

// reader reads a topic's partitions back with the sink's client (kafka-go):
// their offsets, and the records of a range of offsets. It is what the
// Auditor and Recover share.
type reader struct {
	client    *kafkago.Client
	transport *kafkago.Transport
	// digests makes Read fill each Record's Key and Digest, when the
	// record's Size is at most maxSize.
	digests bool
	maxSize int
}

// Partitions returns the partition count of topic.
func (r reader) Partitions(ctx context.Context, topic string) (int, error) {
	md, err := r.client.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return 0, fmt.Errorf("look up kafka topic %q: %w", topic, err)
	}
	for _, t := range md.Topics {
		if t.Name == topic {
			if t.Error != nil {
				return 0, fmt.Errorf("look up kafka topic %q: %w", topic, t.Error)
			}
			return len(t.Partitions), nil
		}
	}
	return 0, fmt.Errorf("look up kafka topic %q: %w", topic, kafkago.UnknownTopicOrPartition)
}

// Offsets returns, for each of topic's first n partitions, the offset of
// the first record at or after ts; with ts kafkago.FirstOffset the log
// start, with kafkago.LastOffset the end (the next offset to be written).
// A partition with no record at or after ts has the end offset, or -1
// (Kafka's answer to a time past the last record).
func (r reader) Offsets(ctx context.Context, topic string, n int, ts int64) ([]int64, error) {
	req := &listoffsets.Request{ReplicaID: -1, Topics: []listoffsets.RequestTopic{{Topic: topic}}}
	for p := range n {
		req.Topics[0].Partitions = append(req.Topics[0].Partitions,
			listoffsets.RequestPartition{Partition: int32(p), CurrentLeaderEpoch: -1, Timestamp: ts})
	}
	// kafka-go's Client.ListOffsets files the answer by the timestamp the
	// broker echoes, which brokers set to -1 for the log start too: ask
	// the transport directly.
	m, err := r.transport.RoundTrip(ctx, r.client.Addr, req)
	if err != nil {
		return nil, fmt.Errorf("list the offsets of kafka topic %q: %w", topic, err)
	}
	out := make([]int64, n)
	for i := range out {
		out[i] = -2
	}
	for _, t := range m.(*listoffsets.Response).Topics {
		for _, p := range t.Partitions {
			if t.Topic != topic || int(p.Partition) >= n || p.Partition < 0 {
				continue
			}
			if p.ErrorCode != 0 {
				return nil, fmt.Errorf("list the offsets of kafka %s[%d]: %w", topic, p.Partition, kafkago.Error(p.ErrorCode))
			}
			out[p.Partition] = p.Offset
		}
	}
	for p, o := range out {
		if o == -2 {
			return nil, fmt.Errorf("list the offsets of kafka %s[%d]: no answer for the partition", topic, p)
		}
	}
	return out, nil
}

// Read calls each for every record of topic[partition] with an offset in
// [from, to), in offset order (a compacted log may skip offsets). Control
// records (a transaction's commit or abort marker) are passed over: they
// take offsets but are not messages.
func (r reader) Read(ctx context.Context, topic string, partition int, from, to int64, each func(Record) error) error {
	for from < to {
		res, err := r.client.Fetch(ctx, &kafkago.FetchRequest{Topic: topic, Partition: partition, Offset: from,
			MinBytes: 1, MaxBytes: readFetchBytes, MaxWait: 500 * time.Millisecond})
		if err == nil {
			err = res.Error
		}
		if err != nil {
			return fmt.Errorf("read kafka %s[%d] at offset %d: %w", topic, partition, from, err)
		}
		next, done := from, false
		var eachErr error
		err = eachRecord(res.Records, func(rec *kafkago.Record, control bool) error {
			defer closeBytes(rec)
			if rec.Offset < next {
				return nil // a batch begins before the offset asked for
			}
			if rec.Offset >= to {
				done = true // offsets up to to were compacted away
				return errStop
			}
			next = rec.Offset + 1
			if control {
				return nil
			}
			out, err := r.recordOf(topic, partition, rec)
			if err != nil {
				return err
			}
			if eachErr = each(out); eachErr != nil {
				return errStop
			}
			return nil
		})
		switch {
		case eachErr != nil:
			return eachErr
		case err != nil && !errors.Is(err, errStop):
			return fmt.Errorf("read kafka %s[%d] after offset %d: %w", topic, partition, next, err)
		case done:
			return nil
		}
		if next == from {
			if res.HighWatermark <= from {
				return nil // nothing more: the log was truncated under us
			}
			return fmt.Errorf("read kafka %s[%d] at offset %d: the broker returned no record before the high watermark %d", topic, partition, from, res.HighWatermark)
		}
		from = next
	}
	return nil
}

// errStop ends eachRecord early.
var errStop = errors.New("stop")

// eachRecord calls each for every record of a fetch's record sets, control
// records included (control true), in offset order; kafka-go's own reader
// of them hides control batches, and with them the offsets they take. An
// error from each ends the walk and is returned.
func eachRecord(rr kafkago.RecordReader, each func(rec *kafkago.Record, control bool) error) error {
	batches := []kafkago.RecordReader{rr}
	if s, ok := rr.(*protocol.RecordStream); ok {
		batches = s.Records
	}
	for _, b := range batches {
		_, control := b.(*protocol.ControlBatch)
		for {
			rec, err := b.ReadRecord()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			if err := each(rec, control); err != nil {
				return err
			}
		}
	}
	return nil
}

func closeBytes(rec *kafkago.Record) {
	if rec.Key != nil {
		_ = rec.Key.Close()
	}
	if rec.Value != nil {
		_ = rec.Value.Close()
	}
}

// recordOf is what read-back keeps of rec.
func (r reader) recordOf(topic string, partition int, rec *kafkago.Record) (Record, error) {
	out := Record{Topic: topic, Partition: partition, Offset: rec.Offset, Time: rec.Time}
	if rec.Key != nil {
		out.Size += rec.Key.Len()
	}
	if rec.Value != nil {
		out.Size += rec.Value.Len()
	}
	for _, h := range rec.Headers {
		out.Size += len(h.Key) + len(h.Value)
		switch h.Key {
		case HeaderID:
			out.ID = clip(h.Value, readback.MaxID)
		case HeaderGTID:
			out.GTID = clip(h.Value, readback.MaxGTID)
		case HeaderSink:
			out.Sink, out.HasSink = clip(h.Value, readback.MaxID), true
		case HeaderPartitions:
			if len(h.Value) <= 10 {
				out.Partitions, _ = strconv.Atoi(string(h.Value))
			}
		case event.HeaderReplay:
			out.Replay = true
		}
	}
	if !r.digests || out.Size > r.maxSize {
		return out, nil
	}
	var value []byte
	var err error
	if rec.Key != nil {
		if out.Key, err = io.ReadAll(rec.Key); err != nil {
			return out, err
		}
	}
	if rec.Value != nil {
		if value, err = io.ReadAll(rec.Value); err != nil {
			return out, err
		}
	}
	out.Digest = digest(topic, out.Key, value, rec.Headers)
	return out, nil
}

// clip is b as a string, cut short past n bytes (readback.Clip): a long
// header is never copied whole.
func clip(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}

// digest is the sink.Digest of a message of topic: its key, its value and
// its headers, in order. It leaves out the relay_partitions header (Recover
// checks it against the topic's partition count, and the message's
// partition against its key; it is not known before the topic is looked
// up) and the timestamp (a topic with message.timestamp.type=LogAppendTime
// replaces it).
func digest(topic string, key, value []byte, hs []kafkago.Header) sink.Digest {
	h := readback.NewHash()
	h.String(topic)
	h.Bytes(key)
	h.Bytes(value)
	for _, x := range hs {
		if x.Key == HeaderPartitions {
			continue
		}
		h.String(x.Key)
		h.Bytes(x.Value)
	}
	return h.Sum()
}
