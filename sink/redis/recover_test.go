package redis

import (
	"context"
	"errors"
	"fmt"
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

const sharedServer = "127.0.0.1:6379"

// recoverSink returns a connected sink on the shared server appending to
// stream, named writer, and a cleanup of every key under prefix.
func recoverSink(t *testing.T, prefix, stream, writer string) *Sink {
	t.Helper()
	sinktest.RequireServer(t, "redis")
	s, err := New(Config{Addr: sharedServer, Stream: stream, Writer: writer, Timeout: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := s.client.Keys(ctx, prefix+":*").Result()
		if len(keys) > 0 {
			s.client.Del(ctx, keys...)
		}
		_ = s.Close(ctx)
	})
	return s
}

func writeAll(t *testing.T, s *Sink, evs []*event.Event, batch int) {
	t.Helper()
	for i := 0; i < len(evs); i += batch {
		if err := s.Write(context.Background(), evs[i:min(i+batch, len(evs))]); err != nil {
			t.Fatalf("Write: %v", err)
		}
	}
}

// recovered runs Recover and returns the ids it reported, sorted; it fails
// the test if an id is reported twice or with another GTID than written.
func recovered(t *testing.T, s *Sink, after string, evs []*event.Event) ([]string, error) {
	t.Helper()
	gtids := map[string]string{}
	byID := map[string]*event.Event{}
	for _, e := range evs {
		gtids[e.ID] = e.Source.GTID
		byID[e.ID] = e
	}
	var ids []string
	err := s.Recover(context.Background(), event.Position{GTIDSet: after}, func(h sink.Held) {
		g, id := h.GTID, h.ID
		if evs != nil && gtids[id] != g {
			t.Errorf("Recover reported %s with GTID %q; it was written with %q", id, g, gtids[id])
		}
		// The message read back is the sink's copy of its event: the
		// digests agree (the proof the pipeline skips an event on).
		if e := byID[id]; e != nil {
			if d, ok := s.Digest(e); !ok || d != h.Digest {
				t.Errorf("Recover reported %s at %s with a digest unlike the sink's of its event", id, h.At)
			}
		}
		ids = append(ids, id)
	})
	slices.Sort(ids)
	if c := slices.Compact(slices.Clone(ids)); len(c) != len(ids) {
		t.Errorf("Recover reported %d ids, %d distinct", len(ids), len(c))
	}
	return ids, err
}

func sortedIDs(evs []*event.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.ID)
	}
	slices.Sort(out)
	return out
}

const recoverUUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"

// Recover reports exactly the entries of transactions after the
// checkpoint, over every stream key the template routes to, page after
// page (pages cut by their count of entries, or by their bytes); keys
// outside the template's shape, and keys of other types, are not read.
func TestRecoverFindsExactlyTheEntriesAfterTheCheckpoint(t *testing.T) {
	defer func(p int64, b int) { recoverPage, readback.PageBytes = p, b }(recoverPage, readback.PageBytes)
	for _, c := range []struct {
		flavor    string
		gtidOf    func(i int) string
		after     string
		page      int64
		pageBytes int
	}{
		{"mariadb", func(i int) string { return fmt.Sprintf("0-1-%d", 100+i) }, "0-1-250,5-1-3", 7, readback.PageBytes},
		{"mysql", func(i int) string { return fmt.Sprintf("%s:%d", recoverUUID, 100+i) }, recoverUUID + ":1-250", 7, readback.PageBytes},
		{"mariadb, pages of about 3 entries' bytes", func(i int) string { return fmt.Sprintf("0-1-%d", 100+i) }, "0-1-250,5-1-3", 500, 4000},
	} {
		t.Run(c.flavor, func(t *testing.T) {
			recoverPage, readback.PageBytes = c.page, c.pageBytes
			prefix := "t" + sinktest.Unique()
			s := recoverSink(t, prefix, prefix+":outbox:{{.AggregateType}}", "orders-sink")
			evs := sinktest.Events(prefix, 300, 13)
			for i, e := range evs {
				e.Source.GTID = c.gtidOf(i)
				if i%3 == 0 {
					e.AggregateType = "invoice"
				}
			}
			writeAll(t, s, evs, 25)
			other := recoverSink(t, prefix, prefix+":billing", "")
			writeAll(t, other, sinktest.Events(prefix+"b", 5, 2), 5)
			if err := s.client.Set(context.Background(), prefix+":outbox:notastream", "x", time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			got, err := recovered(t, s, c.after, evs)
			if err != nil {
				t.Fatalf("Recover: %v", err)
			}
			if want := sortedIDs(evs[151:]); !slices.Equal(got, want) {
				t.Fatalf("Recover reported %d ids, want the %d after the checkpoint", len(got), len(want))
			}
		})
	}
}

// Nothing is reported when nothing is after the checkpoint: no stream yet,
// or a checkpoint past every entry.
func TestRecoverReportsNothingWhenNothingIsAfterTheCheckpoint(t *testing.T) {
	prefix := "t" + sinktest.Unique()
	fixed := recoverSink(t, prefix, prefix+":orders", "a")
	templated := recoverSink(t, prefix, prefix+":outbox:{{.AggregateType}}", "b")
	for name, s := range map[string]*Sink{"a fixed stream that does not exist": fixed, "no stream of the template's shape": templated} {
		if got, err := recovered(t, s, "0-1-1000", nil); err != nil || len(got) != 0 {
			t.Errorf("%s: Recover = %v, %v; want nothing", name, got, err)
		}
	}
	evs := sinktest.Events(prefix, 20, 3) // GTIDs 0-1-100 .. 0-1-119
	writeAll(t, fixed, evs, 20)
	if got, err := recovered(t, fixed, "0-1-1000", evs); err != nil || len(got) != 0 {
		t.Errorf("a checkpoint past every entry: Recover = %v, %v; want nothing", got, err)
	}
	if got, err := recovered(t, fixed, "0-1-118", evs); err != nil || !slices.Equal(got, sortedIDs(evs[19:])) {
		t.Errorf("a checkpoint before the last transaction: Recover = %v, %v; want %v", got, err, sortedIDs(evs[19:]))
	}
}

// later is an event of a transaction after the tests' checkpoints.
func later(prefix string) []*event.Event {
	evs := sinktest.Events(prefix+"x", 1, 1)
	evs[0].Source.GTID = "0-1-200"
	return evs
}

// Recover cannot tell, and says so with ErrCannotRecover, when another
// writer appended to a stream after the checkpoint, when GTIDs are off,
// when the key no longer holds a stream, when it would read past its
// bound, and when the sink has no writer name.
func TestRecoverFallsBackWhenItCannotTell(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, prefix string)
		want  string
	}{
		{"a writer without the relay_sink field appended", func(t *testing.T, prefix string) {
			writeAll(t, recoverSink(t, prefix, prefix+":orders", ""), later(prefix), 1)
		}, "does not name the sink"},
		{"another relay sink appended", func(t *testing.T, prefix string) {
			writeAll(t, recoverSink(t, prefix, prefix+":orders", "other"), later(prefix), 1)
		}, `sink "other"`},
		{"an application appended an entry of its own", func(t *testing.T, prefix string) {
			c := goredis.NewClient(&goredis.Options{Addr: sharedServer})
			defer c.Close()
			if err := c.XAdd(context.Background(), &goredis.XAddArgs{Stream: prefix + ":orders", Values: []any{"hello", "world"}}).Err(); err != nil {
				t.Fatal(err)
			}
		}, "does not name the sink"},
		{"GTIDs are off", func(t *testing.T, prefix string) {
			evs := sinktest.Events(prefix+"x", 1, 1)
			evs[0].Source.GTID = ""
			writeAll(t, recoverSink(t, prefix, prefix+":orders", "orders-sink"), evs, 1)
		}, "GTIDs off"},
		{"the stream key now holds a string (the server answers WRONGTYPE: not retried for ever)", func(t *testing.T, prefix string) {
			c := goredis.NewClient(&goredis.Options{Addr: sharedServer})
			defer c.Close()
			ctx := context.Background()
			if err := c.Del(ctx, prefix+":orders").Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.Set(ctx, prefix+":orders", "not a stream", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}, "WRONGTYPE"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prefix := "t" + sinktest.Unique()
			s := recoverSink(t, prefix, prefix+":orders", "orders-sink")
			writeAll(t, s, sinktest.Events(prefix, 10, 2), 10)
			c.setup(t, prefix)
			_, err := recovered(t, s, "0-1-102", nil)
			if !errors.Is(err, sink.ErrCannotRecover) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Recover = %v; want ErrCannotRecover saying %q", err, c.want)
			}
		})
	}
	t.Run("more entries after the checkpoint than the bound", func(t *testing.T) {
		defer func(m int) { readback.MaxHeld = m }(readback.MaxHeld)
		readback.MaxHeld = 5
		prefix := "t" + sinktest.Unique()
		s := recoverSink(t, prefix, prefix+":orders", "orders-sink")
		writeAll(t, s, sinktest.Events(prefix, 10, 2), 10)
		if _, err := recovered(t, s, "0-1-104", nil); err != nil {
			t.Fatalf("within the bound: %v", err)
		}
		if _, err := recovered(t, s, "0-1-103", nil); !errors.Is(err, sink.ErrCannotRecover) {
			t.Fatalf("past the bound: Recover = %v; want ErrCannotRecover", err)
		}
	})
	t.Run("the sink has no writer name", func(t *testing.T) {
		prefix := "t" + sinktest.Unique()
		s := recoverSink(t, prefix, prefix+":orders", "")
		if _, err := recovered(t, s, "0-1-102", nil); !errors.Is(err, sink.ErrCannotRecover) {
			t.Fatalf("Recover = %v; want ErrCannotRecover", err)
		}
	})
}

// A replay job's copies of older events (relay_replay field), appended to
// the streams after the live entries, are passed over: the read goes on
// past them to the live entries after the checkpoint, and reports only
// those.
func TestRecoverPassesOverReplayedEntries(t *testing.T) {
	prefix := "t" + sinktest.Unique()
	s := recoverSink(t, prefix, prefix+":outbox", "orders-sink")
	evs := sinktest.Events(prefix, 60, 5)
	for i, e := range evs {
		e.Source.GTID = fmt.Sprintf("0-1-%d", 100+i)
	}
	writeAll(t, s, evs, 10)
	var replayed []*event.Event
	for _, e := range evs[:30] {
		c := *e
		c.Headers = append(append([]event.Header(nil), e.Headers...), event.Header{Key: event.HeaderReplay, Value: "job-1"})
		replayed = append(replayed, &c)
	}
	writeAll(t, s, replayed, 10)
	got, err := recovered(t, s, "0-1-139", evs)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if want := sortedIDs(evs[40:]); !slices.Equal(got, want) {
		t.Fatalf("Recover reported %d ids, want the %d live entries after the checkpoint", len(got), len(want))
	}
}
