package replay

import (
	"context"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Marked returns s sending every event with the header event.HeaderReplay
// set to job (each event copied: events are shared and never modified).
// It keeps s's Submit when s has one; it does not read back (no Recover):
// the destination holds the live stream's copies of the window's events,
// which a replay must not take for its own, so a replay's restart sends
// again what its progress does not list (within delivery.max_in_flight).
func Marked(s sink.Sink, job string) sink.Sink {
	m := &marked{inner: s, job: job}
	if sub, ok := s.(sink.Submitter); ok {
		return &markedSubmitter{marked: m, sub: sub}
	}
	return m
}

type marked struct {
	inner sink.Sink
	job   string
}

func (m *marked) mark(batch []*event.Event) []*event.Event {
	out := make([]*event.Event, len(batch))
	for i, e := range batch {
		c := *e
		c.Headers = append(make([]event.Header, 0, len(e.Headers)+1), e.Headers...)
		c.Headers = append(c.Headers, event.Header{Key: event.HeaderReplay, Value: m.job})
		out[i] = &c
	}
	return out
}

func (m *marked) Connect(ctx context.Context) error { return m.inner.Connect(ctx) }
func (m *marked) Close(ctx context.Context) error   { return m.inner.Close(ctx) }
func (m *marked) Write(ctx context.Context, batch []*event.Event) error {
	return m.inner.Write(ctx, m.mark(batch))
}

// Tenant implements sink.Owned: the wrapped sink's tenant, which the
// job's dead letters keep.
func (m *marked) Tenant() string { return sink.TenantOf(m.inner) }

type markedSubmitter struct {
	*marked
	sub sink.Submitter
}

func (m *markedSubmitter) Submit(ctx context.Context, batch []*event.Event, ack func(i int, err error)) {
	m.sub.Submit(ctx, m.mark(batch), ack)
}
