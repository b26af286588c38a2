package sink_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
)

func TestSendOrdered(t *testing.T) {
	// Events a1 b1 a2 b2 a3: rounds [a1 b1] [a2 b2] [a3].
	aggs := []string{"a", "b", "a", "b", "a"}
	cases := []struct {
		name       string
		fail       map[int]error // by batch index, on its first send
		wantRounds [][]int
		wantFailed []int
		wantPerm   []int
	}{
		{"a healthy batch goes in rounds of one event per aggregate", nil,
			[][]int{{0, 1}, {2, 3}, {4}}, nil, nil},
		{"a retriable failure holds back the later events of its aggregate only", map[int]error{0: errors.New("down")},
			[][]int{{0, 1}, {3}}, []int{0, 2, 4}, nil},
		{"a permanent failure holds back nothing", map[int]error{2: sink.Permanent(errors.New("too large"))},
			[][]int{{0, 1}, {2, 3}, {4}}, []int{2}, []int{2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			batch := make([]*event.Event, len(aggs))
			for i, a := range aggs {
				batch[i] = &event.Event{ID: fmt.Sprint(i), AggregateID: a}
			}
			var rounds [][]int
			err := sink.SendOrdered(batch, func(round []int) map[int]error {
				rounds = append(rounds, slices.Clone(round))
				res := map[int]error{}
				for _, i := range round {
					res[i] = c.fail[i]
				}
				return res
			})
			if fmt.Sprint(rounds) != fmt.Sprint(c.wantRounds) {
				t.Fatalf("rounds %v, want %v", rounds, c.wantRounds)
			}
			var failed, perm []int
			for i := range batch {
				if e := sink.ErrorFor(err, i); e != nil {
					failed = append(failed, i)
					if sink.IsPermanent(e) {
						perm = append(perm, i)
					}
				}
			}
			if fmt.Sprint(failed) != fmt.Sprint(c.wantFailed) || fmt.Sprint(perm) != fmt.Sprint(c.wantPerm) {
				t.Fatalf("failed %v (permanent %v), want %v (%v)", failed, perm, c.wantFailed, c.wantPerm)
			}
			if err == nil && len(c.wantFailed) > 0 {
				t.Fatal("nil error with failures")
			}
		})
	}
}
