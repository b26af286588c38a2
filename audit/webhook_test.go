package audit

import (
	"context"
	"slices"
	"testing"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
)

func TestWebhookAuditUsesTheCheckpointTheDeadLettersAndTheReceiversList(t *testing.T) {
	ids := []string{"a", "b", "c", "d"}
	cp := checkpoint.Checkpoint{Position: event.Position{GTIDSet: "0-1-3"}} // a, b, c acknowledged
	dead := map[string]string{"b": "410 Gone"}
	missing := func(r Report) []string {
		var out []string
		for _, m := range r.Missing {
			out = append(out, m.ID+": "+m.Why)
		}
		return out
	}
	tests := []struct {
		name     string
		found    bool
		received map[string]int
		selects  func(*event.Event) bool
		want     []string
	}{
		{"acknowledged events count as received, dead letters and events past the checkpoint do not", true, nil, nil,
			[]string{"b: dead-lettered: 410 Gone", "d: not acknowledged yet: after the endpoint's checkpoint"}},
		{"without a checkpoint nothing was acknowledged", false, nil, nil,
			[]string{"a: not acknowledged yet: after the endpoint's checkpoint", "b: dead-lettered: 410 Gone", "c: not acknowledged yet: after the endpoint's checkpoint", "d: not acknowledged yet: after the endpoint's checkpoint"}},
		{"with the receiver's list, an acknowledged event it lacks is missing", true, map[string]int{"a": 2, "d": 1},
			nil, []string{"b: dead-lettered: 410 Gone", "c: acknowledged by the endpoint, but not in the receiver's list"}},
		{"with the receiver's list, events the endpoint's filter does not select are not expected", true, map[string]int{"a": 2, "d": 1},
			func(e *event.Event) bool { return e.Type != "skipped" }, []string{"b: dead-lettered: 410 Gone"}},
		{"without the list, events the filter does not select are not missing", false, nil,
			func(e *event.Event) bool { return e.Type != "skipped" }, []string{"a: not acknowledged yet: after the endpoint's checkpoint", "b: dead-lettered: 410 Gone", "d: not acknowledged yet: after the endpoint's checkpoint"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewComparison(Options{TempDir: t.TempDir()})
			defer c.Close()
			w := &Webhook{Flavor: "mariadb", Checkpoint: cp, Found: tc.found, Dead: dead, Listed: tc.received != nil, Selects: tc.selects, C: c}
			for i, id := range ids {
				pos := event.Position{GTIDSet: "0-1-" + string(rune('1'+i))}
				ev := &event.Event{ID: id, Type: "order.created"}
				if id == "c" {
					ev.Type = "skipped" // a type the filter leaves out
				}
				if err := w.Event(Event{ID: id, Seq: int64(i + 1)}, ev, pos); err != nil {
					t.Fatal(err)
				}
			}
			n := int64(0)
			for id, k := range tc.received {
				for range k {
					n++
					if err := w.Received(id, n); err != nil {
						t.Fatal(err)
					}
				}
			}
			r, err := c.Report(context.Background(), "hooks/ep", &Span{Flavor: "mariadb", Events: len(ids)})
			if err != nil {
				t.Fatal(err)
			}
			if got := missing(r); !slices.Equal(got, tc.want) {
				t.Fatalf("missing %q, want %q", got, tc.want)
			}
			if tc.selects != nil && w.Note() == "" {
				t.Fatal("no note of the events the filter did not select")
			}
			if tc.received != nil && r.Duplicates["a"] != 2 {
				t.Fatalf("duplicates %v", r.Duplicates)
			}
		})
	}
}

func TestParseBound(t *testing.T) {
	for in, want := range map[string]Bound{
		"0-1-100": {GTID: "0-1-100"},
		"3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5": {GTID: "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5"},
	} {
		if got, err := ParseBound(in); err != nil || got != want {
			t.Errorf("ParseBound(%q) = %+v, %v", in, got, err)
		}
	}
	if b, err := ParseBound("2024-05-01 12:00:00"); err != nil || b.Time.Unix() != 1714564800 {
		t.Errorf("a time: %+v, %v", b, err)
	}
}
