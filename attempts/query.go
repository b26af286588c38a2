package attempts

import (
	"bytes"
)

// DefaultLimit is the number of records a Query with no Limit returns;
// MaxLimit caps any Limit.
const (
	DefaultLimit = 100
	MaxLimit     = 10000
)

// Size is the number of records q returns at most: its Limit, DefaultLimit
// for 0, and never more than MaxLimit.
func (q Query) Size() int {
	switch {
	case q.Limit <= 0:
		return DefaultLimit
	case q.Limit > MaxLimit:
		return MaxLimit
	}
	return q.Limit
}

// stored returns q with its keys as a store keeps them (Key): a key too
// long for its column selects the records stored under it.
func (q Query) stored() Query {
	q.Sink, q.Endpoint, q.Tenant, q.EventID = Key(q.Sink), Key(q.Endpoint), Key(q.Tenant), Key(q.EventID)
	return q
}

// Matches reports whether q selects r (every field but Limit). Times
// compare to the microsecond, as stores keep them; keys as stores keep
// them (Key).
func (q Query) Matches(r Record) bool {
	a := &r.Attempt
	q = q.stored()
	switch {
	case q.Before > 0 && r.ID >= q.Before,
		q.Sink != "" && a.Sink != q.Sink,
		q.Endpoint != "" && a.Endpoint != q.Endpoint,
		q.Tenant != "" && a.Tenant != q.Tenant,
		q.EventID != "" && a.EventID != q.EventID,
		q.Status != 0 && a.Status != q.Status,
		q.Failed && a.Outcome == OutcomeDelivered,
		!q.Since.IsZero() && a.Time.Before(micro(q.Since)),
		!q.Until.IsZero() && !a.Time.Before(micro(q.Until)):
		return false
	}
	return true
}

// Failed reports whether a did not deliver its event (its outcome is retry
// or failed).
func (a *Attempt) Failed() bool { return a.Outcome != OutcomeDelivered }

// Clip returns the first AnswerLimit bytes of an answer (a copy: the
// caller may reuse b).
func Clip(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return bytes.Clone(b[:min(len(b), AnswerLimit)])
}
