package kafka

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/readback"
)

// A neighbour with write access to the topic produces 64 records that
// carry this sink's relay_sink and relay_partitions headers, a gtid after
// the checkpoint and a 4 MB id header (the topic takes 8 MB messages). The
// read-back's memory stays small and fixed: the heap in use after a GC,
// with a chunk of records read and not yet judged, and after the read with
// everything it reported still held (as the pipeline holds it). The
// sink's own messages on either side of them are still read back and
// proven.
func TestRecoverMemoryIsBoundedWhateverANeighbourProduces(t *testing.T) {
	ctx := context.Background()
	cl := startCluster(t)
	addr := cl.ListenAddrs()[0]
	createTopic(t, addr, "orders", 1, kafkago.ConfigEntry{ConfigName: "max.message.bytes", ConfigValue: "8388608"})
	s := newSink(t, Config{Brokers: cl.ListenAddrs(), Topic: "orders", Writer: "orders-sink"})
	evs := gtidEvents(0, 14, 3, mysqlGTID) // transactions 1..7
	write(t, s, evs[:10])
	neighbour := &kafkago.Writer{Addr: kafkago.TCP(addr), Topic: "orders", RequiredAcks: kafkago.RequireAll,
		BatchSize: 1, BatchBytes: 16 << 20}
	big := strings.Repeat("x", 4<<20)
	for i := range 64 {
		err := neighbour.WriteMessages(ctx, kafkago.Message{Key: []byte("order-1"), Value: []byte("{}"), Headers: []kafkago.Header{
			{Key: HeaderID, Value: []byte(big + strings.Repeat("y", i))},
			{Key: HeaderGTID, Value: []byte(mysqlGTID(100 + i))},
			{Key: HeaderSink, Value: []byte("orders-sink")},
			{Key: HeaderPartitions, Value: []byte("1")},
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := neighbour.Close(); err != nil {
		t.Fatal(err)
	}
	big = ""
	write(t, s, evs[10:])

	restarted := newSink(t, Config{Brokers: cl.ListenAddrs(), Topic: "orders", Writer: "orders-sink"})
	var before, after, chunk runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	// A chunk's records, read and not yet judged, are the most the read
	// holds at once: measured there too.
	var peak int64
	defer func(f func()) { afterChunk = f }(afterChunk)
	afterChunk = func() {
		runtime.GC()
		runtime.ReadMemStats(&chunk)
		peak = max(peak, int64(chunk.HeapInuse)-int64(before.HeapInuse))
	}
	var held []sink.Held
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := restarted.Recover(rctx, event.Position{GTIDSet: recoverUUID + ":1-2"}, func(h sink.Held) { held = append(held, h) })
	runtime.GC()
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	kept := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("heap in use with a chunk read: %+.1f MiB at most; after Recover, with its %d reports held: %+.1f MiB",
		float64(peak)/(1<<20), len(held), float64(kept)/(1<<20))
	// The broker runs in this process (kfake): the fetch response it is
	// writing, one 4 MB record and its framing, can be live beside the
	// record the read-back is judging when the heap is read, so the peak
	// allows two such records (16 MiB); what the read-back kept before
	// its bound was the 64 records' 256 MB.
	if peak > 16<<20 {
		t.Errorf("the heap in use grew by %d bytes with a chunk read; want at most 16 MiB", peak)
	}
	if kept > 8<<20 {
		t.Errorf("the heap in use grew by %d bytes with Recover's reports held; want at most 8 MiB", kept)
	}
	dropped := 0
	for _, h := range held {
		if h.Dropped != "" {
			dropped++
			if h.Dropped != readback.Oversized || len(h.ID) > 100 || h.Digest != (sink.Digest{}) {
				t.Errorf("a neighbour's record reported as dropped %q, id of %d bytes, digest %x; want oversized, its id cut short, no digest",
					h.Dropped, len(h.ID), h.Digest[:4])
			}
		}
	}
	if dropped != 64 {
		t.Errorf("%d of the neighbour's 64 records reported as dropped", dropped)
	}

	byID := map[string]*event.Event{}
	for _, e := range evs {
		byID[e.ID] = e
	}
	var proven []string
	for _, h := range held {
		if e := byID[h.ID]; e != nil {
			if d, ok := restarted.Digest(e); ok && d == h.Digest && h.GTID == e.Source.GTID {
				proven = append(proven, h.ID)
			}
		}
	}
	slices.Sort(proven)
	if want := idsOf(evs[4:]); !slices.Equal(proven, want) {
		t.Errorf("the sink's own messages after the checkpoint read back and proven: %v; want %v", proven, want)
	}
	runtime.KeepAlive(held)
}
