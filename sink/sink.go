// Package sink defines the contract between the pipeline and the systems
// outbox-relay delivers to (Kafka, webhooks, stdout), and the typed errors a
// sink uses to say what kind of failure it saw.
//
// The contract, in the order the pipeline calls it:
//
//   - Connect is called once before the first Write. An error from it is
//     retried by the pipeline with capped backoff, forever.
//   - Write delivers a batch of events in the order given. It returns only
//     when every event of the batch is acknowledged or has failed: nil means
//     every event is acknowledged (durably accepted by the destination: a
//     Kafka broker with acks=all, a 2xx from a webhook, a flushed write). A
//     *BatchError reports each failed event by index; any other error applies
//     to every event of the batch. The class of a failure is read with
//     IsPermanent and RetryAfter: permanent failures go to the dead-letter
//     store (package deadletter, which knows no sink), every other failure
//     is retried by the pipeline.
//   - Close is called once, after the last Write has returned.
//
// Write is never called concurrently on one sink. A sink that delivers several
// batches at once implements Submitter instead, and then keeps per-aggregate
// order and runs its own retries. For every other sink, retry, backoff and
// checkpointing live in the pipeline: a sink reports and the pipeline decides.
package sink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

// Sink delivers outbox events to one destination.
type Sink interface {
	// Connect prepares the sink (dial, authenticate, check the topic).
	Connect(ctx context.Context) error
	// Write delivers batch and returns when every event is acknowledged or
	// failed; see the package doc for how errors are reported.
	Write(ctx context.Context, batch []*event.Event) error
	// Close releases the sink's resources. It is called once.
	Close(ctx context.Context) error
}

// Submitter is implemented by sinks that deliver several batches at once (a
// webhook endpoint retrying one aggregate for hours while the others go on).
//
// The pipeline calls Submit from one goroutine, in binlog order, instead of
// Write. Submit must take the batch's place in the sink's per-aggregate order
// before it returns (so later events of an aggregate queue behind earlier
// ones) and may block while the sink has no room. ack is called exactly once
// per event of the batch, with its index, as soon as that event is done:
// nil when acknowledged, a Permanent error when it failed for good, or ctx's
// error when ctx ended first. Calls come from any goroutine, possibly at the
// same time, in any order; an ack with nil may come from the goroutine that
// delivered the event, and returns promptly (it only releases the event). A
// Submitter owns its retries: it reports no other failure.
//
// After a permanent failure the sink sends no later event of that aggregate
// until the failure's ack has returned: the pipeline decides in it whether the
// stream goes on (the event was stored as a dead letter) or stops (no
// dead-letter store: it ends ctx before returning, and the sink then abandons
// the aggregate's later events, as for any ended ctx).
type Submitter interface {
	Submit(ctx context.Context, batch []*event.Event, ack func(i int, err error))
}

// Queuer is implemented by a Submitter whose Submit only queues: it never
// blocks and does no I/O. The pipeline may then call Submit on its source's
// goroutine, when nothing else is delivering, instead of waking a goroutine
// of its own for each transaction of a trickle.
type Queuer interface {
	Submitter
	// SubmitOnlyQueues marks the promise; it is never called.
	SubmitOnlyQueues()
}

// Local is implemented by a sink whose Write only writes to a local pipe or
// file (stdout): no network, no broker, no round trip to wait for. The
// pipeline may then call Write on its source's goroutine for a transaction
// that came after the source had waited for the binlog (a trickle) when
// nothing else is delivering, rather than wake a goroutine of its own for
// it; on a backlog it still writes from a goroutine of its own, beside the
// reading, a batch at a time.
type Local interface {
	Sink
	// WritesLocally marks the promise; it is never called.
	WritesLocally()
}

// Prober is implemented by sinks that can check their destination before
// any event: that it is reachable, accepts the sink's credentials, and has
// what the sink delivers to (a stream, an exchange), or that Connect will
// create it. `outbox-relay check` calls it. Probe sends no event, creates
// nothing and leaves no connection open; it may be called on a sink that was
// never connected, and Close is called after it. It returns what it found,
// or an error saying what is wrong; a *Problem among the wrapped errors also
// says how to fix it.
type Prober interface {
	Probe(ctx context.Context) (found string, err error)
}

// Owned is implemented by a sink that belongs to one tenant (a webhook
// endpoint of a tenant's endpoints-table row). The pipeline keeps Tenant in
// the dead letters of its events, and a replay of a dead letter sends it
// only to a sink of the same tenant. Tenant does not change during the
// sink's life: a sink given to another tenant is another sink.
type Owned interface {
	Tenant() string
}

// TenantOf returns s's tenant: Owned's, "" when s belongs to none.
func TenantOf(s Sink) string {
	if o, ok := s.(Owned); ok {
		return o.Tenant()
	}
	return ""
}

// Recoverer is implemented by sinks whose destination can be read back: on a
// restart the pipeline asks it which events after the checkpoint the
// destination already holds, and does not send them again.
//
// Anyone who can write to the destination can write a message that looks
// like the sink's, so a message read back proves nothing by what it says
// it is: the pipeline skips an event only when a message read back under
// its (gtid, id) has the Digest of exactly what the sink writes for that
// event. Any other message that claims to be the sink's costs a duplicate
// at most, never a lost event.
type Recoverer interface {
	// Recover calls seen for every message this sink's destination holds
	// that belongs to a transaction whose GTID is not contained in
	// after.GTIDSet (so: committed after the checkpoint); a message too
	// large for the read-back to hold or prove is reported as dropped
	// (Held.Dropped), never with its bytes. It returns an
	// error wrapping ErrCannotRecover, saying why, when it cannot tell which
	// events it holds (another writer, a changed partition count, records
	// without this sink's headers); the pipeline then logs a warning,
	// counts it, and falls back to at-least-once for this restart. Any
	// other error is retried like a Connect error.
	Recover(ctx context.Context, after event.Position, seen func(Held)) error
	// Digest is the digest of the message the sink writes for e, as Recover
	// computes it of a message read back; ok is false when the sink cannot
	// build e's message (it would fail it). It is called from one
	// goroutine, after Recover.
	Digest(e *event.Event) (d Digest, ok bool)
}

// Digest is a SHA-256 over what a message is: where it is (topic and key, or
// stream key) and its bytes (key, value, headers or fields, in order),
// leaving out only what may differ between two writes of one event.
type Digest [32]byte

// Held is a message a Recoverer read back after the checkpoint.
type Held struct {
	// GTID and ID are its gtid and id headers (or fields).
	GTID, ID string
	// At says where it is, for a log line: "orders[2] offset 41", "stream
	// \"orders\" entry 1700000000000-0".
	At string
	// Digest is the digest of the message as stored.
	Digest Digest
	// Dropped, when not "", says that the message is no claim: the
	// read-back dropped it at once, for the reason it names ("oversized":
	// larger than the sink writes, or than the read-back reads whole). Its
	// event, if it is one, is sent again; GTID and ID are then cut short,
	// for the log line, and Digest is zero.
	Dropped string
}

// ErrCannotRecover is wrapped by Recover's errors when the destination cannot tell what it holds.
var ErrCannotRecover = errors.New("read-back cannot tell what the destination holds")

// Problem is a Probe failure that an operator fixes: Fix says how
// ("create the stream, or set create_stream.enabled: true").
type Problem struct {
	Err error
	Fix string
}

func (p *Problem) Error() string { return p.Err.Error() }
func (p *Problem) Unwrap() error { return p.Err }

// Collect returns an ack function for Submit that gathers n events' results
// and then calls done once with what Write would return: nil, or a
// *BatchError of the failed events.
func Collect(n int, done func(error)) func(i int, err error) {
	if n == 0 {
		done(nil)
		return func(int, error) {}
	}
	var (
		mu   sync.Mutex
		left = n
		errs map[int]error
	)
	return func(i int, err error) {
		mu.Lock()
		if err != nil {
			if errs == nil {
				errs = map[int]error{}
			}
			errs[i] = err
		}
		left--
		last := left == 0
		mu.Unlock()
		if !last {
			return
		}
		if len(errs) > 0 {
			done(&BatchError{Errs: errs})
		} else {
			done(nil)
		}
	}
}

// BatchError reports the events of a batch that failed, by index into the
// batch. Events whose index is absent were acknowledged.
type BatchError struct {
	Errs map[int]error
}

func (e *BatchError) Error() string {
	for i, err := range e.Errs {
		return fmt.Sprintf("%d of the batch's events failed (event %d: %v)", len(e.Errs), i, err)
	}
	return "batch failed"
}

// Failed returns the error of event i, or nil when it was acknowledged.
func (e *BatchError) Failed(i int) error { return e.Errs[i] }

// Unwrap returns every event's error, so errors.Is(err, context.Canceled)
// reports whether any event failed that way.
func (e *BatchError) Unwrap() []error {
	out := make([]error, 0, len(e.Errs))
	for _, err := range e.Errs {
		out = append(out, err)
	}
	return out
}

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as a failure that retrying cannot fix (message too
// large, rejected by the destination): the event goes to the dead-letter store.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err, or an error it wraps, was marked Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

type retryAfterError struct {
	err   error
	after time.Duration
}

func (e retryAfterError) Error() string { return e.err.Error() }
func (e retryAfterError) Unwrap() error { return e.err }

// BackOff marks err as retriable no sooner than after d (a destination's
// Retry-After, a broker's throttle time).
func BackOff(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return retryAfterError{err, d}
}

// RetryAfter returns the wait a failure asked for, if any.
func RetryAfter(err error) (time.Duration, bool) {
	var r retryAfterError
	if errors.As(err, &r) {
		return r.after, true
	}
	return 0, false
}

// ErrorFor returns the error of event i of a batch given the error Write returned.
func ErrorFor(err error, i int) error {
	var be *BatchError
	if errors.As(err, &be) {
		return be.Failed(i)
	}
	return err
}

// AttemptReporter is implemented by errors that know how often, and over what
// time, an event was tried (a Submitter that ran its own retries). The
// pipeline copies it into the dead letter.
type AttemptReporter interface {
	AttemptReport() (attempts int, first, last time.Time)
}

// Deliver sends batch through s once, by Submit when s is a Submitter and by
// Write otherwise, and returns what Write would have returned.
func Deliver(ctx context.Context, s Sink, batch []*event.Event) error {
	sub, ok := s.(Submitter)
	if !ok {
		return s.Write(ctx, batch)
	}
	done := make(chan error, 1)
	sub.Submit(ctx, batch, Collect(len(batch), func(err error) { done <- err }))
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ErrOverLimit is wrapped by the permanent failure of an event that is over
// one of its destination's hard limits (AMQP's 255-byte short strings,
// JetStream's 64 KiB of headers, Redis's proto-max-bulk-len), or holds what
// the protocol cannot carry (a line break in an HTTP header). A sink checks
// its limits before it sends an event, so such an event never reaches the
// wire: it goes to the dead-letter store, and the connection and the
// events behind it are unaffected.
var ErrOverLimit = errors.New("over the destination's hard limit")

// OverLimit returns the permanent failure of event id whose part what
// ("the message id", "header \"x\"") is size bytes, over limit: the
// destination's hard limit named by name ("AMQP's short-string limit").
func OverLimit(id, what string, size, limit int, name string) error {
	return Unsendable(id, fmt.Sprintf("%s: %d bytes, over %s of %d bytes", what, size, name, limit))
}

// Unsendable returns the permanent failure of event id, which the
// destination's protocol cannot carry for the reason why. The id is quoted
// up to its first 64 bytes: it may be what is wrong.
func Unsendable(id, why string) error {
	if len(id) > 64 {
		id = id[:64] + "..."
	}
	return Permanent(fmt.Errorf("event %q: %s (%w): no retry can send it", id, why, ErrOverLimit))
}
