package redis

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/readback"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
)

// A neighbour with write access to the stream appends 64 entries that
// carry this sink's relay_sink field, a gtid after the checkpoint and a
// 4 MB id. The read-back's memory stays small and fixed: what its reads
// bring in (the bytes allocated while it runs) and what it keeps (the heap
// in use after a GC, with everything it reported still held, as the
// pipeline holds it). The sink's own entries on either side of them are
// still read back and proven.
func TestRecoverMemoryIsBoundedWhateverANeighbourAppends(t *testing.T) {
	ctx := context.Background()
	prefix := "t" + sinktest.Unique()
	s := recoverSink(t, prefix, prefix+":orders", "orders-sink")
	// A read of the neighbour's entries whole (as the read-back did before
	// its reads were bounded in bytes) takes longer than the default 5 s
	// timeout on a busy machine: give it the time, so that what is
	// measured is memory.
	slow, err := New(Config{Addr: sharedServer, Stream: prefix + ":orders", Writer: "orders-sink", Timeout: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := slow.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer slow.Close(ctx)
	evs := sinktest.Events(prefix, 15, 3) // GTIDs 0-1-100 .. 0-1-114
	writeAll(t, s, evs[:10], 10)
	neighbour := goredis.NewClient(&goredis.Options{Addr: sharedServer})
	defer neighbour.Close()
	big := strings.Repeat("x", 4<<20)
	for i := range 64 {
		err := neighbour.XAdd(ctx, &goredis.XAddArgs{Stream: prefix + ":orders", Values: []any{
			"id", fmt.Sprintf("%s%d", big, i), "gtid", fmt.Sprintf("0-1-%d", 200+i), FieldSink, "orders-sink", "payload", "{}"}}).Err()
		if err != nil {
			t.Fatal(err)
		}
	}
	big = ""
	for i, e := range evs[10:] {
		e.Source.GTID = fmt.Sprintf("0-1-%d", 300+i)
	}
	writeAll(t, s, evs[10:], 5)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var held []sink.Held
	err = slow.Recover(ctx, event.Position{GTIDSet: "0-1-104"}, func(h sink.Held) { held = append(held, h) })
	runtime.GC()
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	kept := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("Recover allocated %.1f MiB; heap in use after it, with its %d reports held: %+.1f MiB",
		float64(allocated)/(1<<20), len(held), float64(kept)/(1<<20))
	if allocated > 24<<20 {
		t.Errorf("Recover allocated %d bytes; want at most 24 MiB whatever the stream holds", allocated)
	}
	if kept > 8<<20 {
		t.Errorf("the heap in use grew by %d bytes with Recover's reports held; want at most 8 MiB", kept)
	}

	dropped := 0
	for _, h := range held {
		if h.Dropped != "" {
			dropped++
			if h.Dropped != readback.Oversized || len(h.ID) > 100 || h.Digest != (sink.Digest{}) {
				t.Errorf("a neighbour's entry reported as dropped %q, id of %d bytes, digest %x; want oversized, its id cut short, no digest",
					h.Dropped, len(h.ID), h.Digest[:4])
			}
		}
	}
	if dropped != 64 {
		t.Errorf("%d of the neighbour's 64 entries reported as dropped", dropped)
	}
	byID := map[string]*event.Event{}
	for _, e := range evs {
		byID[e.ID] = e
	}
	var proven []string
	for _, h := range held {
		if e := byID[h.ID]; e != nil {
			if d, ok := s.Digest(e); ok && d == h.Digest && h.GTID == e.Source.GTID {
				proven = append(proven, h.ID)
			}
		}
	}
	slices.Sort(proven)
	if want := sortedIDs(append(slices.Clone(evs[5:10]), evs[10:]...)); !slices.Equal(proven, want) {
		t.Errorf("the sink's own entries after the checkpoint read back and proven: %v; want %v", proven, want)
	}
	runtime.KeepAlive(held)
}

// countScripts counts the scripts a client runs (each a page of walk).
type countScripts struct{ n int }

func (c *countScripts) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (c *countScripts) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			c.n++
		}
		return next(ctx, cmd)
	}
}
func (c *countScripts) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// walk's pages hold about readback.PageBytes: as many whole entries as fit
// (at least one), and of an entry larger than that only its read-back
// fields and its size.
func TestWalkPagesAreBoundedInBytes(t *testing.T) {
	defer func(b int) { readback.PageBytes = b }(readback.PageBytes)
	readback.PageBytes = 4000
	ctx := context.Background()
	prefix := "t" + sinktest.Unique()
	s := recoverSink(t, prefix, prefix+":orders", "orders-sink")
	value := strings.Repeat("v", 900)
	for i := range 30 {
		payload := value
		if i == 20 {
			payload = strings.Repeat("w", 10_000)
		}
		if err := s.client.XAdd(ctx, &goredis.XAddArgs{Stream: prefix + ":orders", ID: fmt.Sprintf("1-%d", i+1),
			Values: []any{"id", fmt.Sprint(i), "gtid", "0-1-5", FieldSink, "orders-sink", "payload", payload}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	count := &countScripts{}
	s.client.AddHook(count)
	var got []entry
	for _, backwards := range []bool{false, true} {
		got, count.n = nil, 0
		start, stop := "-", "+"
		if backwards {
			start, stop = stop, start
		}
		if err := walk(ctx, s.client, prefix+":orders", backwards, start, stop, 500, func(e entry) bool { got = append(got, e); return true }); err != nil {
			t.Fatal(err)
		}
		if len(got) != 30 {
			t.Fatalf("backwards %v: walk read %d entries, want 30", backwards, len(got))
		}
		// An entry costs about 1,100 bytes as counted: 3 a page, 10 pages.
		if count.n < 9 || count.n > 12 {
			t.Errorf("backwards %v: walk read 30 entries in %d pages; want about 10 of 4,000 bytes", backwards, count.n)
		}
		for _, e := range got {
			f := fieldsOf(e)
			switch {
			case f.id == "20" && (e.Withheld < 10_000 || len(e.Fields) != 6 || f.gtid != "0-1-5" || f.sink != "orders-sink"):
				t.Errorf("the entry of 10 kB: withheld %d, fields %q; want withheld with its id, gtid and relay_sink", e.Withheld, e.Fields)
			case f.id != "20" && (e.Withheld != 0 || len(e.Fields) != 8):
				t.Errorf("entry %s: withheld %d, %d fields; want it whole", f.id, e.Withheld, len(e.Fields))
			}
		}
	}
}

// A neighbour's stream key that matches the sink's template but is longer
// than any key the read-back reads is never sent whole: the read-back says
// it cannot tell, and the restart falls back.
func TestRecoverRefusesAStreamKeyLongerThanItReads(t *testing.T) {
	ctx := context.Background()
	prefix := "t" + sinktest.Unique()
	s := recoverSink(t, prefix, prefix+":outbox:{{.AggregateType}}", "orders-sink")
	writeAll(t, s, sinktest.Events(prefix, 10, 2), 10)
	if got, err := recovered(t, s, "0-1-104", nil); err != nil || len(got) != 5 {
		t.Fatalf("before the neighbour's key: Recover = %d ids, %v; want 5", len(got), err)
	}
	long := prefix + ":outbox:" + strings.Repeat("k", 2*maxStreamKey)
	if err := s.client.XAdd(ctx, &goredis.XAddArgs{Stream: long, Values: []any{"hello", "world"}}).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := recovered(t, s, "0-1-104", nil)
	if !errors.Is(err, sink.ErrCannotRecover) || !strings.Contains(err.Error(), "stream keys of more than 1024 bytes") {
		t.Fatalf("Recover = %v; want ErrCannotRecover naming the long key", err)
	}
}

// serverError is an error as the server answers it.
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

// A server that refuses the read-back's scripts makes it fall back, saying
// what to grant, instead of retrying for ever; a server that is loading
// is retried.
func TestReadBackErrorOfARefusedScript(t *testing.T) {
	for _, c := range []struct {
		err      error
		fallback bool
		says     string
	}{
		{serverError("NOPERM User relay has no permissions to run the 'evalsha' command"), true, "+evalsha +eval"},
		{serverError("ERR unknown command 'evalsha', with args beginning with: "), true, "@scripting"},
		{serverError("WRONGTYPE Operation against a key holding the wrong kind of value"), true, "WRONGTYPE"},
		{serverError("LOADING Redis is loading the dataset in memory"), false, "LOADING"},
	} {
		err := readBackError(c.err)
		if errors.Is(err, sink.ErrCannotRecover) != c.fallback || !strings.Contains(err.Error(), c.says) {
			t.Errorf("readBackError(%q) = %v; want a fall-back %v, saying %q", c.err, err, c.fallback, c.says)
		}
	}
}
