package kafkasource

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/gateway"
)

// With cursors by exception, a partition's committed offset is the least
// of its shared cursor and the own cursors of the endpoints running on
// it: never past a cursor an endpoint resumes from, and not held back by
// cursors that are not that partition's running endpoints'.
func TestTheCommittedOffsetIsTheOldestCursorOfThePartition(t *testing.T) {
	p := Partition{Topic: "orders", Partition: 1, Suffix: Suffix("orders", 1), Start: Position("orders", 1, 5)}
	shared := gateway.SharedKey("hooks" + p.Suffix)
	at := func(partition int, next int64) checkpoint.Checkpoint {
		return checkpoint.Checkpoint{Position: Position("orders", partition, next)}
	}
	running := func(key string) bool { return key != "hooks/off@orders[1]" }
	for _, c := range []struct {
		name string
		all  map[string]checkpoint.Checkpoint
		want int64
	}{
		{name: "without a shared cursor saved, the partition's start", all: map[string]checkpoint.Checkpoint{}, want: 5},
		{name: "the shared cursor, when no endpoint is behind it", all: map[string]checkpoint.Checkpoint{shared: at(1, 40)}, want: 40},
		{name: "a running endpoint's own cursor behind it", all: map[string]checkpoint.Checkpoint{shared: at(1, 40), "hooks/a@orders[1]": at(1, 12)}, want: 12},
		{name: "an own cursor ahead of it does not count", all: map[string]checkpoint.Checkpoint{shared: at(1, 40), "hooks/a@orders[1]": at(1, 52)}, want: 40},
		{name: "an endpoint that does not run does not hold it back", all: map[string]checkpoint.Checkpoint{shared: at(1, 40), "hooks/off@orders[1]": at(1, 3)}, want: 40},
		{name: "another partition's cursors do not count", all: map[string]checkpoint.Checkpoint{shared: at(1, 40), "hooks/a@orders[11]": at(11, 2), gateway.SharedKey("hooks@orders[0]"): at(0, 1)}, want: 40},
		{name: "a replay job's record does not count", all: map[string]checkpoint.Checkpoint{shared: at(1, 40), "/replay/1@orders[1]": at(1, 2)}, want: 40},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := leastByException(p, shared, c.all, running); got != c.want {
				t.Fatalf("least = %d, want %d", got, c.want)
			}
		})
	}
}
