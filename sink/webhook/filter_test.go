package webhook

import (
	"context"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/event"
)

func TestFilterMatch(t *testing.T) {
	acme := &event.Event{Type: "order.created", AggregateType: "order",
		Headers: []event.Header{{Key: "region", Value: "eu"}, {Key: "tenant", Value: "acme"}}}
	noTenant := &event.Event{Type: "order.created", AggregateType: "order", Headers: []event.Header{{Key: "region", Value: "eu"}}}
	for _, tc := range []struct {
		name   string
		filter Filter
		ev     *event.Event
		want   bool
	}{
		{"an empty filter selects every event", Filter{}, noTenant, true},
		{"a header of that value is selected", Filter{Headers: map[string]string{"tenant": "acme"}}, acme, true},
		{"a header of another value is not", Filter{Headers: map[string]string{"tenant": "globex"}}, acme, false},
		{"a missing header (a NULL column) is not", Filter{Headers: map[string]string{"tenant": "acme"}}, noTenant, false},
		{"the value is compared exactly, case included", Filter{Headers: map[string]string{"tenant": "ACME"}}, acme, false},
		{"the key is compared exactly, case included", Filter{Headers: map[string]string{"Tenant": "acme"}}, acme, false},
		{"a prefix of the value is not the value", Filter{Headers: map[string]string{"tenant": "acm"}}, acme, false},
		{"every header must match", Filter{Headers: map[string]string{"tenant": "acme", "region": "us"}}, acme, false},
		{"all headers matching are selected", Filter{Headers: map[string]string{"tenant": "acme", "region": "eu"}}, acme, true},
		{"headers and event types must both match", Filter{EventTypes: []string{"user.*"}, Headers: map[string]string{"tenant": "acme"}}, acme, false},
		{"headers and aggregate types both matching", Filter{AggregateTypes: []string{"ord*"}, Headers: map[string]string{"tenant": "acme"}}, acme, true},
		{"an aggregate type named exactly is selected", Filter{AggregateTypes: []string{"invoice", "order"}}, acme, true},
		{"a longer name is not the type", Filter{AggregateTypes: []string{"orders"}}, acme, false},
		{"a prefix of the type is not the type", Filter{AggregateTypes: []string{"orde"}}, acme, false},
		{"an escaped character matches itself", Filter{AggregateTypes: []string{`or\der`}}, acme, true},
		{"an event type named exactly is selected", Filter{EventTypes: []string{"order.created"}}, acme, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.filter.Match(tc.ev); got != tc.want {
				t.Fatalf("Match = %v, want %v", got, tc.want)
			}
			e, err := NewEndpoint(EndpointConfig{Name: "f", URL: "https://example.com/", Filter: tc.filter}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(context.Background())
			if got := e.Selects(tc.ev); got != tc.want {
				t.Fatalf("the endpoint's Selects = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestValidateRejectsAnEmptyFilterHeaderKey(t *testing.T) {
	c := EndpointConfig{Name: "f", URL: "https://example.com/", Filter: Filter{Headers: map[string]string{"": "x"}}}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "filter.headers: a key is empty") {
		t.Fatalf("Validate = %v, want it to name filter.headers", err)
	}
}
