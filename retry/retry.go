// Package retry is outbox-relay's one retry policy: capped exponential
// backoff with jitter, and a short wait while the other side cannot be
// reached at all, so that its recovery is noticed within about a second
// however long the outage was.
//
// The pipeline uses it for sink writes, sink connects and dead-letter writes;
// a webhook endpoint for the retries of each event; the binlog reader for its
// reconnects. Policy and Wait are pure and safe for concurrent use; a
// Backoff belongs to one retry loop and is not.
package retry

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/defaults"
)

// Defaults of Policy.
const (
	// DefaultInitial is the ceiling of the first wait (delivery.retry_backoff's default).
	DefaultInitial = config.DefaultRetryBackoff
	// DefaultMax caps every wait (delivery.max_retry_backoff's default).
	DefaultMax = config.DefaultMaxRetryBackoff
	// DefaultProbe caps the wait after a connection failure.
	DefaultProbe = time.Second
)

// Policy is capped exponential backoff with jitter: the wait before retry n
// (after n failed attempts) is drawn uniformly from [c/2, c], where
// c = min(Max, Initial × 2^(n−1)).
type Policy struct {
	// Initial is the ceiling of the first wait. Default 100ms.
	Initial time.Duration
	// Max caps every wait, a destination's Retry-After included. Default 30s.
	Max time.Duration
	// Probe caps the wait after a connection failure (see Backoff.Next):
	// how soon a destination that came back is noticed. Default 1s.
	Probe time.Duration
}

// FromConfig is the relay's retry policy: delivery.retry_backoff up to
// delivery.max_retry_backoff. The relay builds it once and passes it down
// to the pipelines, the sinks that retry themselves, the binlog readers
// (Within source.max_reconnect_backoff) and the webhook endpoints (Within
// their own bounds).
func FromConfig(d config.Delivery) Policy {
	return Policy{Initial: d.RetryBackoff, Max: d.MaxRetryBackoff}
}

// Within returns p with its bounds replaced by those of a loop with its own
// (a webhook endpoint's retry.initial_backoff and max_backoff, the reader's
// source.max_reconnect_backoff); a zero bound keeps p's.
func (p Policy) Within(initial, max time.Duration) Policy {
	if initial > 0 {
		p.Initial = initial
	}
	if max > 0 {
		p.Max = max
	}
	return p
}

// WithDefaults returns p with every zero field set to its default.
func (p Policy) WithDefaults() Policy {
	defaults.Positive(&p.Initial, DefaultInitial)
	defaults.Positive(&p.Max, DefaultMax)
	defaults.Positive(&p.Probe, DefaultProbe)
	return p
}

// Wait returns the wait before retry n, n ≥ 1 being the number of failed
// attempts so far: uniform in [c/2, c], c = Ceiling(n).
func (p Policy) Wait(n int) time.Duration { return jitter(p.Ceiling(n)) }

// Ceiling returns the largest wait before retry n: min(Max, Initial × 2^(n−1)).
func (p Policy) Ceiling(n int) time.Duration {
	p = p.WithDefaults()
	c := min(p.Initial, p.Max)
	for i := 1; i < n && c < p.Max; i++ {
		if c > p.Max/2 {
			return p.Max
		}
		c *= 2
	}
	return c
}

// jitter returns a duration in [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return max(d, 0)
	}
	return d/2 + rand.N(d/2+1)
}

// Backoff is the state of one retry loop: call Next after each failed
// attempt and Reset after a success. The zero value uses the defaults.
type Backoff struct {
	Policy Policy
	// failures the destination answered, and connection failures, since
	// the last success
	answered, unreachable int
}

// Next returns how long to wait after an attempt that failed with err.
//
// A connection failure (IsConnectionError: refused, reset, closed
// mid-request, unresolvable) waits at most Policy.Probe, growing from
// Initial: the destination is not there, a refused connection costs it
// nothing, and the next attempt is the probe that notices it is back. Any
// other failure (the destination answered, or timed out) grows the wait up
// to Policy.Max, for the destination's sake. The two grow separately, so a
// destination that comes back after a long outage is retried at once when it
// answers with a transient error (a leader election, a topic to create).
func (b *Backoff) Next(err error) time.Duration {
	p := b.Policy.WithDefaults()
	if IsConnectionError(err) {
		b.unreachable++
		return Policy{Initial: p.Initial, Max: min(p.Max, p.Probe)}.Wait(b.unreachable)
	}
	b.answered++
	return p.Wait(b.answered)
}

// Failures returns the failed attempts since the last Reset.
func (b *Backoff) Failures() int { return b.answered + b.unreachable }

// Reset starts afresh after a success.
func (b *Backoff) Reset() { b.answered, b.unreachable = 0, 0 }

// Sleep waits d, or until ctx ends (then it returns ctx.Err()).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ErrNotConnected is wrapped by a sink's error when its client library
// says in its own words that it has no connection to the destination (a
// NATS client reconnecting, an AMQP connection or channel lost): then
// IsConnectionError reports it too.
var ErrNotConnected = errors.New("not connected")

// IsConnectionError reports whether err says the destination could not be
// reached or dropped the connection: a failed dial (refused, unreachable,
// unresolvable, or timed out while connecting), a connection reset or
// closed mid-request (EOF), or ErrNotConnected. A timeout on an established
// connection is not one: the destination may be slow rather than gone.
func IsConnectionError(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrNotConnected) {
		return true
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return true
	}
	var de *net.DNSError
	switch {
	case errors.As(err, &de),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed):
		return true
	}
	return false
}
