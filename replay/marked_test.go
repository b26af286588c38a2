package replay_test

import (
	"context"
	"testing"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/replay"
	"github.com/outbox-relay/outbox-relay/sink"
)

// tenantSink is a sink of tenant acme.
type tenantSink struct{ nopSink }

func (tenantSink) Tenant() string { return "acme" }

// tenantSubmitter is a sink of tenant acme that submits.
type tenantSubmitter struct{ tenantSink }

func (tenantSubmitter) Submit(_ context.Context, batch []*event.Event, ack func(int, error)) {
	for i := range batch {
		ack(i, nil)
	}
}

// A replay's sink keeps the tenant of the sink it wraps, so the job's dead
// letters are that tenant's; a sink of no tenant stays of none.
func TestAMarkedSinkKeepsItsTenant(t *testing.T) {
	for name, c := range map[string]struct {
		s    sink.Sink
		want string
	}{"a sink": {tenantSink{}, "acme"}, "a submitter": {tenantSubmitter{}, "acme"}, "a sink of no tenant": {nopSink{}, ""}} {
		if got := sink.TenantOf(replay.Marked(c.s, "job-1")); got != c.want {
			t.Errorf("%s: the marked sink's tenant is %q, want %q", name, got, c.want)
		}
	}
}
