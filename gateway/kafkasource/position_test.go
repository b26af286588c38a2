package kafkasource

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/event"
)

func TestCoversOrdersOffsetsOfOnePartition(t *testing.T) {
	for _, tc := range []struct {
		name       string
		have, want event.Position
		covers     bool
	}{
		{"a later offset covers an earlier one", Position("orders", 1, 10), Position("orders", 1, 9), true},
		{"an offset covers itself", Position("orders", 1, 10), Position("orders", 1, 10), true},
		{"an earlier offset does not cover a later one", Position("orders", 1, 9), Position("orders", 1, 10), false},
		{"offsets past 2^32 compare as numbers", Position("orders", 1, 1<<33), Position("orders", 1, 1<<32+7), true},
		{"another partition is not covered", Position("orders", 2, 100), Position("orders", 1, 1), false},
		{"a topic with dots and brackets keeps its name", Position("a.b[3]", 0, 5), Position("a.b[3]", 0, 4), true},
		{"everything covers the zero position", Position("orders", 0, 0), event.Position{}, true},
		{"the zero position covers nothing", event.Position{}, Position("orders", 0, 0), false},
		{"a binlog position is not a partition's", event.Position{File: "bin.000001", Pos: 4}, Position("orders", 0, 0), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Covers(tc.have, tc.want); got != tc.covers {
				t.Fatalf("Covers(%v, %v) = %v, want %v", tc.have, tc.want, got, tc.covers)
			}
		})
	}
	name, next, ok := Offset(Position("a.b[3]", 7, 42))
	if !ok || name != "a.b[3][7]" || next != 42 {
		t.Fatalf("Offset = %q %d %v", name, next, ok)
	}
}

func TestOffsetsPositionsReadBackAndCompareAsText(t *testing.T) {
	o := Offsets{{"orders", 10}: 7, {"orders", 2}: 1 << 33, {"a.b[3]", 0}: 0, {"audit", 1}: 5}
	pos := o.Position()
	if want := "kafka:a.b[3][0]=0,audit[1]=5,orders[2]=8589934592,orders[10]=7"; pos.File != want {
		t.Fatalf("Position = %q, want %q (partitions in order)", pos.File, want)
	}
	back, err := ParseOffsets(pos)
	if err != nil {
		t.Fatal(err)
	}
	if back.Position() != pos || len(back) != len(o) {
		t.Fatalf("read back %v, want %v", back, o)
	}
	for _, tc := range []struct {
		name string
		pos  event.Position
	}{
		{"a partition's position is not a set", Position("orders", 1, 5)},
		{"a binlog position is not a set", event.Position{File: "bin.000001", Pos: 4}},
		{"a negative offset", event.Position{File: "kafka:orders[0]=-1"}},
		{"no partition", event.Position{File: "kafka:orders=1"}},
		{"no offset", event.Position{File: "kafka:orders[0]"}},
		{"a GTID set beside it", event.Position{File: "kafka:orders[0]=1", GTIDSet: "0-1-5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseOffsets(tc.pos); err == nil {
				t.Fatalf("ParseOffsets(%v) read it", tc.pos)
			}
		})
	}
}
