package cetest

import (
	"context"
	"testing"

	"github.com/outbox-relay/outbox-relay/event/cloudevent"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
)

// Source is the source of an event of shop.outbox by default.
const Source = "/outbox-relay/shop.outbox"

// Events is how many events EachMode writes (of 3 aggregates).
const Events = 40

// EachMode checks a sink's CloudEvents in binary and in structured mode.
// For each, open returns the sink configured with ce (not connected) and a
// function that reads back the i-th message the sink wrote; EachMode
// connects the sink, writes Events events of 3 aggregates, and checks that the
// SDK reads each message as its event's CloudEvent.
func EachMode(t *testing.T, open func(t *testing.T, ce cloudevent.Config) (s sink.Sink, read func(i int) Message)) {
	t.Helper()
	for _, mode := range []string{cloudevent.Binary, cloudevent.Structured} {
		t.Run(mode, func(t *testing.T) {
			s, read := open(t, cloudevent.Config{Mode: mode})
			ctx := context.Background()
			if err := s.Connect(ctx); err != nil {
				t.Fatal(err)
			}
			defer s.Close(ctx)
			evs := sinktest.Events("ce", Events, 3)
			if err := s.Write(ctx, evs); err != nil {
				t.Fatal(err)
			}
			for i, e := range evs {
				Check(t, e, Read(t, read(i)), Source)
			}
		})
	}
}
