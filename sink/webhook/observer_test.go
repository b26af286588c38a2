package webhook

import (
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/metrics"
)

// The relay's observers of an endpoint's own retries: a plain webhook
// sink's, and a gateway endpoint's.
var (
	_ Observer = (*metrics.EndpointObserver)(nil)
	_ Observer = gateway.EndpointRetries{}
)
