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
