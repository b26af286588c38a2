package main

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

func TestAuditExpectsAtAWebhookEndpointOnlyTheEventsItsFilterSelects(t *testing.T) {
	cfg := &config.Config{Sinks: []config.Sink{{Name: "hooks", Type: "webhook", Config: &webhook.SinkConfig{
		Endpoints: []webhook.EndpointConfig{
			{Name: "all"},
			{Name: "orders", Filter: webhook.Filter{EventTypes: []string{"order.*"}}},
		}}}}}
	order, user := &event.Event{Type: "order.created"}, &event.Event{Type: "user.created"}
	if f := endpointFilter(cfg, "hooks/orders"); f == nil || !f(order) || f(user) {
		t.Fatal("hooks/orders: the filter does not select order.* alone")
	}
	if f := endpointFilter(cfg, "hooks/all"); f != nil && (!f(order) || !f(user)) {
		t.Fatal("hooks/all: an endpoint without a filter must expect every event")
	}
}
