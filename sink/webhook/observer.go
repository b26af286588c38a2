package webhook

import "time"

// Observer is told about an endpoint's attempts and outcomes, for metrics.
// Its methods are called from several goroutines at once, some while the
// endpoint holds its lock: they must be fast, safe for concurrent use, and
// must not call the Endpoint.
type Observer interface {
	// Attempt is called after every HTTP attempt with the response status
	// (0 when no response arrived: network error or timeout) and the
	// attempt's duration.
	Attempt(status int, dur time.Duration)
	// Retry is called when a failed attempt is scheduled to be retried,
	// with why it failed: an error that errors.Is/As can classify (a
	// connection error the retry package recognises, a timeout, a
	// sink.BackOff for a Retry-After, or a plain error for a 5xx, 408 or
	// 429). Its text has the endpoint's secrets hidden.
	Retry(err error)
	// Delivered is called when an event is acknowledged by a 2xx, with the
	// time since Write was handed the event.
	Delivered(latency time.Duration)
	// Failed is called when an event fails permanently, with one of the
	// Reason constants (a small fixed set, usable as a metric label).
	Failed(reason string)
}

// Reasons passed to Observer.Failed.
const (
	// ReasonDisabled: the endpoint answered 410 Gone, to this event or an
	// earlier one.
	ReasonDisabled = "endpoint_disabled"
	// ReasonRejected: the endpoint answered a 4xx other than 408, 410, 429.
	ReasonRejected = "rejected"
	// ReasonRedirect: the endpoint answered a 3xx; redirects are not followed.
	ReasonRedirect = "redirect"
	// ReasonRequest: the request cannot succeed as configured (the
	// endpoint's TLS certificate is not trusted, a header value is invalid).
	ReasonRequest = "request_invalid"
	// ReasonRetryBudget: retry.max_attempts or retry.max_age ran out.
	ReasonRetryBudget = "retry_budget_exhausted"
)

type nopObserver struct{}

func (nopObserver) Attempt(int, time.Duration) {}
func (nopObserver) Retry(error)                {}
func (nopObserver) Delivered(time.Duration)    {}
func (nopObserver) Failed(string)              {}
