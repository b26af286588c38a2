package webhook

import "github.com/outbox-relay/outbox-relay/event"

// Match reports whether f selects e.
func (f Filter) Match(e *event.Event) bool { return f.matches(e.Type, e.AggregateType) }
