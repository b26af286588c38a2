package gateway

import (
	"errors"
	"testing"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
)

// CursorOf reads an endpoint's own cursor, else its sink's shared one; in
// the scaled-out gateway's cursor table (keys ending in a partition's
// suffix), the shared cursor of the endpoint's partition.
func TestCursorOfReadsTheSharedCursorOfTheEndpointsPartition(t *testing.T) {
	at := func(s string) checkpoint.Checkpoint { return checkpoint.Checkpoint{Position: event.Position{File: s}} }
	store := &memStore{cps: map[string]checkpoint.Checkpoint{
		"hooks/own@orders[1]":         at("own"),
		SharedKey("hooks@orders[1]"):  at("shared of orders[1]"),
		SharedKey("hooks@orders[12]"): at("shared of orders[12]"),
		SharedKey("hooks"):            at("shared of the relay's"),
		"relay/plain":                 at("plain"),
	}}
	for _, c := range []struct {
		name, key, want string
		shared          bool
		err             error
	}{
		{name: "an endpoint with a cursor of its own has it", key: "hooks/own@orders[1]", want: "own"},
		{name: "one without has its partition's shared cursor", key: "hooks/quiet@orders[1]", want: "shared of orders[1]", shared: true},
		{name: "of a partition of two digits", key: "hooks/quiet@orders[12]", want: "shared of orders[12]", shared: true},
		{name: "an endpoint with an @ in its name (a topic has none)", key: "hooks/a@x@orders[1]", want: "shared of orders[1]", shared: true},
		{name: "a name that only looks like a suffix has its sink's shared cursor", key: "hooks/a@b[7]", want: "shared of the relay's", shared: true},
		{name: "a name with no partition has its sink's shared cursor", key: "hooks/quiet", want: "shared of the relay's", shared: true},
		{name: "brackets without a number are no suffix", key: "hooks/a@b[x]", want: "shared of the relay's", shared: true},
		{name: "a sink without a shared cursor has none", key: "other/quiet@orders[1]", err: checkpoint.ErrNotFound},
		{name: "a key of no webhook sink is read as is", key: "relay/plain", want: "plain"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cp, shared, err := CursorOf(t.Context(), store, c.key)
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("CursorOf(%q): %v, want %v", c.key, err, c.err)
				}
				return
			}
			if err != nil || cp.Position.File != c.want || shared != c.shared {
				t.Fatalf("CursorOf(%q) = %q (shared %v), %v; want %q (shared %v)", c.key, cp.Position.File, shared, err, c.want, c.shared)
			}
		})
	}
}
