package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/readback"
)

const recoverUUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"

// gtidEvents returns events [from, to), two per transaction: event i is in
// transaction i/2+1, whose GTID is gtidOf(i/2+1).
func gtidEvents(from, to, aggregates int, gtidOf func(seq int) string) []*event.Event {
	evs := makeEvents(to, aggregates)[from:]
	for i, e := range evs {
		e.Source.GTID = gtidOf((from+i)/2 + 1)
	}
	return evs
}

func mysqlGTID(seq int) string   { return fmt.Sprintf("%s:%d", recoverUUID, seq) }
func mariadbGTID(seq int) string { return fmt.Sprintf("0-1-%d", seq) }

func write(t *testing.T, s *Sink, evs []*event.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Write(ctx, evs); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

// recoverIDs runs Recover and returns the ids it reported, sorted, failing
// the test if one is reported twice or with another transaction's GTID.
func recoverIDs(t *testing.T, s *Sink, after string, evs []*event.Event) ([]string, error) {
	t.Helper()
	gtids := map[string]string{}
	byID := map[string]*event.Event{}
	for _, e := range evs {
		gtids[e.ID] = e.Source.GTID
		byID[e.ID] = e
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ids []string
	err := s.Recover(ctx, event.Position{GTIDSet: after}, func(h sink.Held) {
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

func idsOf(evs []*event.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.ID)
	}
	slices.Sort(out)
	return out
}

// Recover reports exactly the messages of transactions after the
// checkpoint, over every partition of every topic the template routes to,
// reading several chunks back; a topic the template cannot render is not
// read, however it was written.
func TestRecoverFindsExactlyTheMessagesAfterTheCheckpoint(t *testing.T) {
	defer func(c int64) { recoverChunk = c }(recoverChunk)
	recoverChunk = 7
	for _, c := range []struct {
		flavor string
		gtidOf func(int) string
		after  string
	}{
		{"mysql", mysqlGTID, recoverUUID + ":1-60"},
		{"mariadb", mariadbGTID, "0-1-60,1-7-900"},
	} {
		t.Run(c.flavor, func(t *testing.T) {
			cl := startCluster(t)
			cfg := Config{Brokers: cl.ListenAddrs(), Writer: "orders-sink", BatchSize: 16,
				CreateTopics: CreateTopicsConfig{Enabled: true, Partitions: 3}}
			s := newSink(t, cfg)
			evs := gtidEvents(0, 200, 11, c.gtidOf) // transactions 1..100
			for i := 0; i < len(evs); i += 16 {
				write(t, s, evs[i:min(i+16, len(evs))])
			}
			// Another application's topic, outside the template's shape.
			other := newSink(t, Config{Brokers: cl.ListenAddrs(), Topic: "billing", CreateTopics: cfg.CreateTopics})
			write(t, other, gtidEvents(0, 10, 3, c.gtidOf))

			got, err := recoverIDs(t, s, c.after, evs)
			if err != nil {
				t.Fatalf("Recover: %v", err)
			}
			if want := idsOf(evs[120:]); !slices.Equal(got, want) {
				t.Fatalf("Recover reported %d ids %v…, want the %d of transactions 61-100 %v…", len(got), head(got), len(want), head(want))
			}
		})
	}
}

func head(s []string) []string { return s[:min(5, len(s))] }

// Nothing is reported when nothing is after the checkpoint: an empty
// topic, no topic of the template's shape, or a checkpoint past every
// message.
func TestRecoverReportsNothingWhenNothingIsAfterTheCheckpoint(t *testing.T) {
	cl := startCluster(t)
	fixed := newSink(t, Config{Brokers: cl.ListenAddrs(), Topic: "orders", Writer: "a",
		CreateTopics: CreateTopicsConfig{Enabled: true, Partitions: 2}})
	templated := newSink(t, Config{Brokers: cl.ListenAddrs(), Writer: "b"})
	after := recoverUUID + ":1-100"
	for name, s := range map[string]*Sink{"an empty topic": fixed, "no topic of the template's shape": templated} {
		got, err := recoverIDs(t, s, after, nil)
		if err != nil || len(got) != 0 {
			t.Errorf("%s: Recover = %v, %v; want nothing", name, got, err)
		}
	}
	evs := gtidEvents(0, 40, 5, mysqlGTID) // transactions 1..20
	write(t, fixed, evs)
	if got, err := recoverIDs(t, fixed, after, evs); err != nil || len(got) != 0 {
		t.Errorf("a checkpoint past every message: Recover = %v, %v; want nothing", got, err)
	}
	if got, err := recoverIDs(t, fixed, recoverUUID+":1-19", evs); err != nil || !slices.Equal(got, idsOf(evs[38:])) {
		t.Errorf("a checkpoint before the last transaction: Recover = %v, %v; want %v", got, err, idsOf(evs[38:]))
	}
}

// Recover cannot tell, and says so with ErrCannotRecover, when another
// producer or another relay sink wrote to a partition after the
// checkpoint, when the topic has more partitions than when its messages
// were produced, when GTIDs are off, and when the sink has no writer name.
func TestRecoverFallsBackWhenItCannotTell(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, cl []string, s *Sink)
		want  string
		after string
	}{
		{"a producer without relay headers wrote to the partition", func(t *testing.T, cl []string, s *Sink) {
			write(t, newSink(t, Config{Brokers: cl, Topic: "orders"}), gtidEvents(40, 42, 1, mysqlGTID))
		}, "does not name the sink", recoverUUID + ":1-10"},
		{"another relay sink wrote to the partition", func(t *testing.T, cl []string, s *Sink) {
			write(t, newSink(t, Config{Brokers: cl, Topic: "orders", Writer: "other"}), gtidEvents(40, 42, 1, mysqlGTID))
		}, `sink "other"`, recoverUUID + ":1-10"},
		{"a foreign message without a gtid sits after the checkpoint", func(t *testing.T, cl []string, s *Sink) {
			w := &kafkago.Writer{Addr: kafkago.TCP(cl...), Topic: "orders", RequiredAcks: kafkago.RequireAll}
			defer w.Close()
			if err := w.WriteMessages(context.Background(), kafkago.Message{Value: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}, "does not name the sink", recoverUUID + ":1-10"},
		{"the topic has more partitions than when it was written", func(t *testing.T, cl []string, s *Sink) {
			addPartitions(t, cl, "orders", 3)
		}, "had 1 partitions; it has 3 now", recoverUUID + ":1-10"},
		{"the topic has more partitions, and the checkpoint is past every message", func(t *testing.T, cl []string, s *Sink) {
			addPartitions(t, cl, "orders", 2)
		}, "had 1 partitions; it has 2 now", recoverUUID + ":1-100"},
		{"GTIDs are off", func(t *testing.T, cl []string, s *Sink) {
			evs := gtidEvents(40, 42, 1, func(int) string { return "" })
			write(t, s, evs)
		}, "GTIDs off", recoverUUID + ":1-10"},
		{"the checkpoint has no GTID set", func(*testing.T, []string, *Sink) {}, "no GTID set", ""},
		{"the checkpoint is of another flavor", func(*testing.T, []string, *Sink) {}, "not a MariaDB GTID", "0-1-10"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := startCluster(t, kfake.SeedTopics(1, "orders"))
			s := newSink(t, Config{Brokers: cl.ListenAddrs(), Topic: "orders", Writer: "orders-sink"})
			write(t, s, gtidEvents(0, 40, 4, mysqlGTID))
			c.setup(t, cl.ListenAddrs(), s)
			// The restarted relay's sink reads back (its metadata is fresh).
			restarted := newSink(t, Config{Brokers: cl.ListenAddrs(), Topic: "orders", Writer: "orders-sink"})
			_, err := recoverIDs(t, restarted, c.after, nil)
			if !errors.Is(err, sink.ErrCannotRecover) || !containsText(err, c.want) {
				t.Fatalf("Recover = %v; want ErrCannotRecover saying %q", err, c.want)
			}
		})
	}
	t.Run("the sink has no writer name", func(t *testing.T) {
		cl := startCluster(t, kfake.SeedTopics(1, "orders"))
		s := newSink(t, Config{Brokers: cl.ListenAddrs(), Topic: "orders"})
		if _, err := recoverIDs(t, s, recoverUUID+":1-10", nil); !errors.Is(err, sink.ErrCannotRecover) {
			t.Fatalf("Recover = %v; want ErrCannotRecover", err)
		}
	})
}

// Recover reads back no further than readback.MaxHeld in a partition.
func TestRecoverGivesUpPastItsBound(t *testing.T) {
	defer func(c int64) { recoverChunk = c }(recoverChunk)
	recoverChunk = 5
	cl := startCluster(t, kfake.SeedTopics(1, "orders"))
	s := newSink(t, Config{Brokers: cl.ListenAddrs(), Topic: "orders", Writer: "w"})
	evs := gtidEvents(0, 30, 3, mysqlGTID)
	write(t, s, evs)
	_, err := recoverIDs(t, s, recoverUUID+":1", evs)
	if err != nil {
		t.Fatalf("within the bound: %v", err)
	}
	defer func(m int) { readback.MaxHeld = m }(readback.MaxHeld)
	readback.MaxHeld = 10
	if _, err := recoverIDs(t, s, recoverUUID+":1", evs); !errors.Is(err, sink.ErrCannotRecover) {
		t.Fatalf("past the bound: Recover = %v; want ErrCannotRecover", err)
	}
}

func addPartitions(t *testing.T, brokers []string, topic string, count int) {
	t.Helper()
	c := &kafkago.Client{Addr: kafkago.TCP(brokers...)}
	res, err := c.CreatePartitions(context.Background(), &kafkago.CreatePartitionsRequest{
		Topics: []kafkago.TopicPartitionsConfig{{Name: topic, Count: int32(count)}}})
	if err == nil {
		err = res.Errors[topic]
	}
	if err != nil {
		t.Fatalf("add partitions to %s: %v", topic, err)
	}
}

func containsText(err error, s string) bool {
	return err != nil && strings.Contains(err.Error(), s)
}

// BenchmarkRecover reads back 10,000 messages after the checkpoint over 6
// partitions (and stops at the checkpoint in each), as a restart after a
// full in-flight window would.
func BenchmarkRecover(b *testing.B) {
	cl := startCluster(b, kfake.SeedTopics(6, "orders"))
	s := newSink(b, Config{Brokers: cl.ListenAddrs(), Topic: "orders", Writer: "w"})
	evs := gtidEvents(0, 20_000, 500, mysqlGTID) // transactions 1..10,000
	for i := 0; i < len(evs); i += 1000 {
		if err := s.Write(context.Background(), evs[i:i+1000]); err != nil {
			b.Fatal(err)
		}
	}
	after := event.Position{GTIDSet: recoverUUID + ":1-5000"}
	b.ResetTimer()
	for range b.N {
		n := 0
		if err := s.Recover(context.Background(), after, func(sink.Held) { n++ }); err != nil || n != 10_000 {
			b.Fatalf("Recover: %d messages, %v; want 10000", n, err)
		}
	}
}

// A replay job's copies of older events (relay_replay header), appended to
// the partitions after the live messages, are passed over: the read goes
// on past them to the live messages after the checkpoint, and reports
// only those.
func TestRecoverPassesOverReplayedMessages(t *testing.T) {
	cl := startCluster(t)
	cfg := Config{Brokers: cl.ListenAddrs(), Writer: "orders-sink", BatchSize: 16,
		CreateTopics: CreateTopicsConfig{Enabled: true, Partitions: 3}}
	s := newSink(t, cfg)
	evs := gtidEvents(0, 100, 7, mariadbGTID) // transactions 1..50
	write(t, s, evs)
	// The replay of transactions 1..20, marked, after them.
	var replayed []*event.Event
	for _, e := range evs[:40] {
		c := *e
		c.Headers = append(append([]event.Header(nil), e.Headers...), event.Header{Key: event.HeaderReplay, Value: "job-1"})
		replayed = append(replayed, &c)
	}
	write(t, s, replayed)
	got, err := recoverIDs(t, s, "0-1-40", evs)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if want := idsOf(evs[80:]); !slices.Equal(got, want) {
		t.Fatalf("Recover reported %d ids %v…, want the %d live messages of transactions 41-50 %v…", len(got), head(got), len(want), head(want))
	}
}
