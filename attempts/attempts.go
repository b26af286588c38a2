// Package attempts keeps a record of every delivery attempt a webhook
// endpoint makes: when, which event, which attempt, what came back (a status
// code or an error class), how long it took and the first bytes of the
// answer. It answers the gateway's most common support question, "why did my
// endpoint not get event X?", from the relay's own data.
//
// The record is written off the delivery path: a Recorder never blocks the
// endpoint that reports to it; it batches attempts into a Store, and when the
// store falls behind it drops the overflow and counts it rather than slow a
// delivery; an attempt the store refuses on its own is left out alone, the
// rest of its batch stored (RefusedError), counted and named on /readyz. The store is bounded: a retention (an age and a row count) is
// applied as it is written.
//
// Two stores: a MySQL table beside the checkpoint store (MySQL), and a
// local directory (File: an append-only log in segments, indexed in
// memory) when the checkpoint store is a file.
// Both are safe for concurrent use, keep the same fields to the same
// precision (times to the microsecond, the first AnswerLimit bytes of an
// answer, a key field longer than 255 bytes kept as Key of it, the type
// cut at 255 bytes and an error's text at 1024, both valid UTF-8) and pass
// one conformance suite (store_test.go). A File is opened by one process at
// a time; a reader waits for the writer to let go, and is told to ask the
// running relay instead (ErrLocked).
package attempts

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"
)

// AnswerLimit is how many bytes of an endpoint's answer are kept.
const AnswerLimit = 512

// Outcomes of an attempt.
const (
	// OutcomeDelivered: a 2xx; the event is acknowledged.
	OutcomeDelivered = "delivered"
	// OutcomeRetry: it failed and will be tried again.
	OutcomeRetry = "retry"
	// OutcomeFailed: it failed for good (dead-lettered or dropped).
	OutcomeFailed = "failed"
)

// Error classes, for an attempt that got no HTTP answer or was not sent.
const (
	ClassConnection = "connection" // refused, reset, DNS, unreachable
	ClassTimeout    = "timeout"    // no answer within the endpoint's timeout
	ClassTLS        = "tls"        // the endpoint's certificate or handshake
	ClassEgress     = "egress"     // refused by the egress policy
	ClassRequest    = "request"    // the request cannot be made as configured
)

// Attempt is one HTTP attempt of one event at one endpoint.
type Attempt struct {
	Time     time.Time `json:"time"`     // when the attempt started
	Sink     string    `json:"sink"`     // the webhook sink
	Endpoint string    `json:"endpoint"` // the endpoint's name in the sink
	// Tenant is the endpoint's tenant when it made the attempt (a store
	// keeps TenantKey of it).
	Tenant    string `json:"tenant,omitempty"`
	EventID   string `json:"event_id"`
	EventType string `json:"event_type"`
	// Number is 1 for the first attempt of this event at this endpoint.
	Number int `json:"attempt"`
	// Status is the HTTP status code, 0 when no answer came (Class says why).
	Status   int           `json:"status,omitempty"`
	Class    string        `json:"error_class,omitempty"`
	Error    string        `json:"error,omitempty"` // secrets hidden
	Outcome  string        `json:"outcome"`
	Duration time.Duration `json:"duration_ns"`
	// Answer is the first AnswerLimit bytes of the response body.
	Answer []byte `json:"answer,omitempty"`
	// Replay names the replay job that sent it; empty for the live stream.
	Replay string `json:"replay,omitempty"`
	// Committed, GTID, File and Pos are the event's transaction
	// (event.CommitTime, event.Source): where a resend reads it back from.
	Committed time.Time `json:"committed,omitzero"`
	GTID      string    `json:"gtid,omitempty"`
	File      string    `json:"file,omitempty"`
	Pos       uint32    `json:"pos,omitempty"`
}

// Record is a stored Attempt. IDs grow with the order attempts were stored.
type Record struct {
	ID int64 `json:"id"`
	Attempt
}

// Query selects records, newest first; zero fields select everything.
type Query struct {
	Sink     string
	Endpoint string
	// Tenant, when set, selects only the attempts of that tenant's
	// endpoints: of the tenant the endpoint had when it made the attempt,
	// whoever has it now (a tenant's view is always scoped by it).
	// Attempts of no tenant never match it.
	Tenant  string
	EventID string
	Status  int  // exact HTTP status
	Failed  bool // only attempts whose outcome is not delivered
	Since   time.Time
	Until   time.Time
	// Before is a cursor: only records with an ID below it (0: none).
	Before int64
	// Limit caps the records returned (0: 100).
	Limit int
}

// RefusedError is Append's error when the store refused some attempts of
// a batch, each for a value it cannot keep (the MySQL store: a row a
// trigger or a constraint refuses), and stored the others.
type RefusedError struct {
	// Batch is the batch Append was given; Errs, by index in it, says
	// why each attempt refused was.
	Batch []Attempt
	Errs  map[int]error
}

func (e *RefusedError) Error() string {
	first := slices.Min(slices.Collect(maps.Keys(e.Errs)))
	a := e.Batch[first]
	return fmt.Sprintf("the store refused %d of %d attempts; the first: attempt %d of event %q at %s/%s: %v",
		len(e.Errs), len(e.Batch), a.Number, a.EventID, a.Sink, a.Endpoint, e.Errs[first])
}

// Store keeps attempts. Implementations are safe for concurrent use.
type Store interface {
	// Append stores a batch. An error but a *RefusedError means none of
	// it was stored; a *RefusedError names the attempts left out, and the
	// others were stored.
	Append(ctx context.Context, batch []Attempt) error
	// Search returns the records q selects, newest first.
	Search(ctx context.Context, q Query) ([]Record, error)
	// Prune removes records older than before, and the oldest beyond keep
	// rows (keep 0: no count limit), and says how many it removed.
	Prune(ctx context.Context, before time.Time, keep int64) (int64, error)
	Close() error
}

// Recorder takes attempts from the delivery path. Record must not block.
type Recorder interface {
	Record(a Attempt)
}
