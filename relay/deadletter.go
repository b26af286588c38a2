package relay

import (
	"context"

	"github.com/outbox-relay/outbox-relay/sink"
)

// openDeadLetters opens the dead-letter store, if one is configured.
func (r *Relay) openDeadLetters(ctx context.Context) (sink.DeadLetterStore, func(), error) {
	_ = ctx
	return nil, func() {}, nil
}
