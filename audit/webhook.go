package audit

import (
	"fmt"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// Webhook audits one webhook endpoint: a receiver cannot be queried, so an
// event counts as received when the endpoint's checkpoint (cp; found false:
// none) is past it and it is not among dead (event id → reason, from the
// dead-letter store). With received (the receiver's own list of ids; nil:
// none) an event counts as received only when listed.
func Webhook(idx *Index, name, flavor string, cp checkpoint.Checkpoint, found bool, dead map[string]string, received map[string]int) Report {
	r := idx.Report
	r.Sink = name
	r.Duplicates = map[string]int{}
	if received == nil {
		r.Notes = append(r.Notes, "the receiver cannot be read back: an event counts as received when the endpoint acknowledged it (a 2xx, so the checkpoint is past it) and it is not in the dead-letter store; pass --received FILE (the receiver's ids, one a line) to check the receiver itself")
	}
	for _, e := range idx.sorted() {
		reason, isDead := dead[e.ID]
		acked := found && canal.Covers(flavor, cp.Position, e.Position)
		switch {
		case received != nil && received[e.ID] > 0:
			if received[e.ID] > 1 {
				r.Duplicates[e.ID] = received[e.ID]
			}
			continue
		case isDead:
			r.Missing = append(r.Missing, Missing{*e, "dead-lettered: " + reason})
		case !acked:
			r.Missing = append(r.Missing, Missing{*e, "not acknowledged yet: after the endpoint's checkpoint"})
		case received != nil:
			r.Missing = append(r.Missing, Missing{*e, "acknowledged by the endpoint, but not in the receiver's list"})
		}
	}
	if received != nil {
		// The list may span more than the range: ids outside it are not
		// reported as unexpected.
		r.Notes = append(r.Notes, fmt.Sprintf("matched against the receiver's list of %d ids", len(received)))
	}
	return r
}
