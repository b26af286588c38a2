package kafka

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestRecordBatchIsKafkaGos: the record batch the sink encodes is byte for
// byte the one kafka-go's Client.Produce would send for the same messages
// (uncompressed), and with every codec it decodes to the same records:
// keys, values (an empty one stays empty, not null), headers in order,
// timestamps, offsets.
func TestRecordBatchIsKafkaGos(t *testing.T) {
	c := startCluster(t, kfake.SeedTopics(3, "t"))
	s := newSink(t, Config{Brokers: c.ListenAddrs(), Topic: "t", Writer: "w"})
	evs := makeEvents(50, 7)
	evs[3].Payload = nil                            // a SQL NULL payload: an empty value
	evs[4].Headers = nil                            // no headers of its own
	evs[5].CommitTime = evs[5].CommitTime.Add(-3e9) // a later message with an earlier time
	ps := s.prepare(context.Background(), evs, func(int, error) {}, false)
	if len(ps) != len(evs) {
		t.Fatalf("prepared %d of %d", len(ps), len(evs))
	}
	now := time.Unix(1800000000, 0)
	want := func(codec kafkago.Compression) []byte {
		recs := make([]protocol.Record, len(ps))
		for i, p := range ps {
			m := p.rec.message()
			recs[i] = protocol.Record{Time: m.Time, Key: protocol.NewBytes(m.Key), Value: protocol.NewBytes(m.Value)}
			for _, h := range m.Headers {
				recs[i].Headers = append(recs[i].Headers, protocol.Header{Key: h.Key, Value: h.Value})
			}
		}
		rs := protocol.RecordSet{Version: 2, Attributes: protocol.Attributes(codec) & 0x7, Records: protocol.NewRecordReader(recs...)}
		var b bytes.Buffer
		if _, err := rs.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	got, err := encodeBatch(nil, ps, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	if w := want(0); !bytes.Equal(got, w) {
		i := 0
		for i < min(len(got), len(w)) && got[i] == w[i] {
			i++
		}
		t.Fatalf("record batch (%d bytes) differs from kafka-go's (%d) at byte %d:\n got …%x\nwant …%x", len(got), len(w), i,
			got[i:min(i+16, len(got))], w[i:min(i+16, len(w))])
	}
	// In the memory of an earlier request (what drain keeps), the same bytes.
	used := bytes.Repeat([]byte{0xff}, 2*len(got))
	if again, err := encodeBatch(used[:7], ps, nil, now); err != nil || !bytes.Equal(again, got) || &again[0] != &used[0] {
		t.Fatalf("encoded again in used memory: %v, same bytes %v, in that memory %v", err, bytes.Equal(again, got), &again[0] == &used[0])
	}
	for _, c := range []kafkago.Compression{0, kafkago.Gzip, kafkago.Snappy, kafkago.Lz4, kafkago.Zstd} {
		got, err := encodeBatch(nil, ps, c.Codec(), now)
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		a, b := decodeBatch(t, got), decodeBatch(t, want(c))
		if len(a) != len(ps) || len(a) != len(b) {
			t.Fatalf("%v: %d records, kafka-go's %d, messages %d", c, len(a), len(b), len(ps))
		}
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("%v: record %d:\n got %s\nwant %s", c, i, a[i], b[i])
			}
		}
		if !bytes.Contains([]byte(a[3]), []byte("value=[] ")) {
			t.Fatalf("%v: record 3 (NULL payload) is %s: want an empty, non-null value", c, a[3])
		}
	}
}

// decodeBatch reads a record set as kafka-go reads one, each record as text.
func decodeBatch(t *testing.T, set []byte) []string {
	t.Helper()
	var rs protocol.RecordSet
	if _, err := rs.ReadFrom(bytes.NewReader(set)); err != nil {
		t.Fatalf("decode: %v", err)
	}
	var out []string
	for {
		r, err := rs.Records.ReadRecord()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		text := func(b protocol.Bytes) string {
			if b == nil {
				return "null"
			}
			v, _ := protocol.ReadAll(b)
			return "[" + string(v) + "]"
		}
		line := fmt.Sprintf("offset=%d time=%d key=%s value=%s ", r.Offset, r.Time.UnixMilli(), text(r.Key), text(r.Value))
		for _, h := range r.Headers {
			line += fmt.Sprintf("%s=%q ", h.Key, h.Value)
		}
		out = append(out, line)
	}
}
