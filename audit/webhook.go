package audit

import (
	"fmt"

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
// Received) an event counts as received only when listed. An event the
// endpoint's filter does not select is not expected there at all.
type Webhook struct {
	Flavor     string
	Checkpoint checkpoint.Checkpoint
	Found      bool              // a checkpoint was found
	Dead       map[string]string // event id → reason, from the dead-letter store
	Listed     bool              // the receiver's list is delivered to C
	// Selects reports whether the endpoint's filter selects an event (the
	// endpoint acknowledges the others without a request); nil selects
	// every event.
	Selects func(*event.Event) bool
	C       *Comparison
	// Unselected counts the events of the range the filter did not select.
	Unselected int
}

// Event judges one event of the range, ev (the event itself, for the
// endpoint's filter); pos is the position after its transaction.
func (w *Webhook) Event(e Event, ev *event.Event, pos event.Position) error {
	if w.Selects != nil && !w.Selects(ev) {
		w.Unselected++
		return nil
	}
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

// Note says how many events the endpoint's filter did not select, or ""
// when it selected every one.
func (w *Webhook) Note() string {
	if w.Unselected == 0 {
		return ""
	}
	return fmt.Sprintf("%d events not selected by the endpoint's filter are not expected there", w.Unselected)
}

// Received delivers one id of the receiver's list, its n-th line. The list
// may span more than the range: ids outside it are not unexpected, and its
// order is not checked.
func (w *Webhook) Received(id string, n int64) error {
	return w.C.Deliver(Delivery{ID: id, Offset: n})
}
