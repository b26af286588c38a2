package relay

import (
	"context"

	"github.com/outbox-relay/outbox-relay/deadletter"
)

func (r *Relay) openDeadLetters(ctx context.Context) (deadletter.Putter, func(), error) {
	st, closeFn, err := deadletter.Open(ctx, r.cfg)
	if err != nil || st == nil {
		return nil, closeFn, err
	}
	return st, closeFn, nil
}
