package audit

import (
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/position"
)

// NoteWebhook is the note of a webhook audit without a receiver's list.
const NoteWebhook = "the receiver cannot be read back: an event counts as received when the endpoint acknowledged it (a 2xx, so the checkpoint is past it) and it is not in the dead-letter store; pass --received FILE (the receiver's ids, one a line) to check the receiver itself"

// Webhook judges one webhook endpoint's events as the range is read. A
// receiver cannot be queried, so an event counts as received when the
// endpoint's checkpoint is past it and it is not among the dead-lettered;
// with a receiver-provided list of ids (delivered to the Comparison with
// Received) an event counts as received only when listed.
type Webhook struct {
	Flavor     string
	Checkpoint checkpoint.Checkpoint
	Found      bool              // a checkpoint was found
	Dead       map[string]string // event id → reason, from the dead-letter store
	Listed     bool              // the receiver's list is delivered to C
	C          *Comparison
}

// Event judges one event of the range; pos is the position after its
// transaction.
func (w *Webhook) Event(e Event, pos event.Position) error {
	reason, dead := w.Dead[e.ID]
	acked := w.Found && position.Covers(w.Flavor, w.Checkpoint.Position, pos)
	var why string
	switch {
	case dead:
		why = "dead-lettered: " + reason
	case !acked:
		why = "not acknowledged yet: after the endpoint's checkpoint"
	case w.Listed:
		why = "acknowledged by the endpoint, but not in the receiver's list"
	}
	switch {
	case w.Listed:
		return w.C.Expect(e, why)
	case why != "":
		w.C.Miss(e, why)
	}
	return nil
}

// Received delivers one id of the receiver's list, its n-th line. The list
// may span more than the range: ids outside it are not unexpected, and its
// order is not checked.
func (w *Webhook) Received(id string, n int64) error {
	return w.C.Deliver(Delivery{ID: id, Offset: n})
}
