package sink

import (
	"fmt"

	"github.com/outbox-relay/outbox-relay/event"
)

// SendOrdered delivers batch through send in rounds, for a sink that
// pipelines its sends (many messages in flight, acknowledged out of step) to
// a server that may fail one message and take the next: a NATS PubAck, a
// RabbitMQ confirm, a Redis reply.
//
// Round k holds the k-th event of each aggregate (by AggregateID) still to
// send, in batch order, so a round never holds two events of one aggregate.
// send gets the indexes of a round, sends them all at once and returns once
// each is acknowledged or failed, with each failure by index (nil or absent:
// acknowledged). After a retriable failure of an event, the later events of
// its aggregate are not sent and fail with an error wrapping it, so no event
// is acknowledged ahead of an earlier one of its aggregate that will be
// retried; after a permanent failure they go on (the failed event goes to
// the dead-letter store). The other aggregates are not held back.
//
// SendOrdered returns nil when every event was acknowledged, and a
// *BatchError otherwise. A batch of n events of one aggregate takes n
// rounds: its order costs one round trip per event.
func SendOrdered(batch []*event.Event, send func(round []int) map[int]error) error {
	var (
		errs    map[int]error
		blocked map[string]error // aggregate -> the retriable failure that holds it
		rounds  [][]int
		depth   = make(map[string]int, len(batch))
	)
	for i, e := range batch {
		k := depth[e.AggregateID]
		depth[e.AggregateID] = k + 1
		if k == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[k] = append(rounds[k], i)
	}
	fail := func(i int, err error) {
		if errs == nil {
			errs = map[int]error{}
		}
		errs[i] = err
	}
	for _, round := range rounds {
		send1 := round[:0:0]
		for _, i := range round {
			if cause, ok := blocked[batch[i].AggregateID]; ok {
				fail(i, NotSentError{Cause: cause})
				continue
			}
			send1 = append(send1, i)
		}
		if len(send1) == 0 {
			continue
		}
		res := send(send1)
		for _, i := range send1 {
			err := res[i]
			if err == nil {
				continue
			}
			fail(i, err)
			if !IsPermanent(err) {
				if blocked == nil {
					blocked = map[string]error{}
				}
				blocked[batch[i].AggregateID] = err
			}
		}
	}
	if len(errs) > 0 {
		return &BatchError{Errs: errs}
	}
	return nil
}

// NotSentError is the failure of an event a sink did not send because an
// earlier event of its aggregate failed retriably: sending it could have
// put it ahead of that one. It is retriable.
type NotSentError struct{ Cause error }

func (e NotSentError) Error() string {
	return fmt.Sprintf("not sent: an earlier event of its aggregate failed: %v", e.Cause)
}

// Unwrap returns the earlier event's failure (retriable, as this one).
func (e NotSentError) Unwrap() error { return e.Cause }
