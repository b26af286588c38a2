package readback

import (
	"errors"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
)

func TestWeigh(t *testing.T) {
	j, err := New("orders-sink", event.Position{GTIDSet: "0-1-100"})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("9", MaxID+1)
	for _, c := range []struct {
		name      string
		m         Message
		id        string
		oversized bool
		want      Verdict
		err       bool
	}{
		{"the sink's message after the checkpoint is a claim", Message{true, "orders-sink", "0-1-101"}, "e1", false, Hold, false},
		{"the sink's message the checkpoint holds stops the read", Message{true, "orders-sink", "0-1-99"}, "e1", false, Stop, false},
		{"an oversized message after the checkpoint is dropped", Message{true, "orders-sink", "0-1-101"}, "e1", true, Drop, false},
		{"an oversized message the checkpoint holds stops the read", Message{true, "orders-sink", "0-1-99"}, "e1", true, Stop, false},
		{"an id longer than a claim keeps is dropped", Message{true, "orders-sink", "0-1-101"}, long, false, Drop, false},
		{"a gtid longer than any source writes is dropped", Message{true, "orders-sink", "0-1-" + strings.Repeat("0", MaxGTID) + "5"}, "e1", false, Drop, false},
		{"an oversized message of the sink without a gtid is dropped", Message{true, "orders-sink", ""}, "e1", true, Drop, false},
		{"a message of the sink without a gtid cannot be placed", Message{true, "orders-sink", ""}, "e1", false, Stop, true},
		{"an oversized message of another sink cannot be told apart", Message{true, "other", "0-1-101"}, "e1", true, Stop, true},
		{"an oversized message of another writer after the checkpoint cannot be told apart", Message{false, "", "0-1-101"}, "e1", true, Stop, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := j.Weigh(c.m, c.id, c.oversized)
			if v != c.want || (err != nil) != c.err || err != nil && !errors.Is(err, sink.ErrCannotRecover) {
				t.Fatalf("Weigh = %v, %v; want %v, error %v", v, err, c.want, c.err)
			}
		})
	}
}

// Claims gives up past MaxHeldBytes as past MaxHeld, and keeps of a
// dropped message only a short form of its gtid and id.
func TestClaimsAreBoundedInBytes(t *testing.T) {
	defer func(n, b int) { MaxHeld, MaxHeldBytes = n, b }(MaxHeld, MaxHeldBytes)
	MaxHeld, MaxHeldBytes = 1000, 10_000
	var c Claims
	h := sink.Held{GTID: "0-1-101", ID: strings.Repeat("i", 100), At: "orders[0] offset 7"}
	n := 0
	for ; c.Hold(h) == nil; n++ {
	}
	if want := 10_000 / Cost(h); n != want || c.Bytes() > MaxHeldBytes {
		t.Fatalf("held %d claims of %d bytes (%d in all) within 10,000 bytes; want %d", n, Cost(h), c.Bytes(), want)
	}
	if err := c.Hold(h); !errors.Is(err, sink.ErrCannotRecover) {
		t.Fatalf("past the bound: %v; want ErrCannotRecover", err)
	}
	var d Claims
	big := strings.Repeat("x", 4<<20)
	if err := d.Drop(Oversized, "stream \"s\" entry 1-1", big, big); err != nil {
		t.Fatal(err)
	}
	d.Report(func(h sink.Held) {
		if len(h.GTID) > MaxGTID+3 || len(h.ID) > 64+3 || h.Dropped != Oversized {
			t.Fatalf("dropped: gtid of %d bytes, id of %d, why %q; want them cut short, oversized", len(h.GTID), len(h.ID), h.Dropped)
		}
	})
	if d.Len() != 1 || d.Dropped() != 1 {
		t.Fatalf("Len %d, Dropped %d; want 1, 1", d.Len(), d.Dropped())
	}
}
