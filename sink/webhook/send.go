package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-retryablehttp"
)

const (
	userAgent = "outbox-relay"
	// drainLimit is how much of a response body is read so that the
	// connection can be reused; snippetLimit how much of it is quoted in a
	// permanent failure.
	drainLimit   = 64 << 10
	snippetLimit = 256
)

type outcomeKind int

const (
	delivered outcomeKind = iota
	retry
	permanent
	gone
	cancelled
)

// outcome is what one attempt came to.
type outcome struct {
	kind   outcomeKind
	status int    // 0: no response
	desc   string // "status 503 Service Unavailable", "error: ..."
	// for retry
	retryAfter    time.Duration
	hasRetryAfter bool
	// for permanent
	err    error
	reason string
}

// send makes one signed POST of d and classifies the result.
func (e *Endpoint) send(ctx context.Context, d *delivery, now time.Time) outcome {
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodPost, e.cfg.URL, d.body)
	if err != nil {
		return outcome{kind: permanent, desc: "error: " + err.Error(), reason: ReasonRejected,
			err: fmt.Errorf("build request: %w", err)}
	}
	for k, v := range e.cfg.Headers {
		req.Header.Set(k, v)
	}
	ts := now.Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("webhook-id", d.ev.ID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	if len(e.keys) > 0 {
		req.Header.Set("webhook-signature", sign(e.keys, d.ev.ID, ts, d.body))
	}

	resp, err := e.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return outcome{kind: cancelled, desc: "error: cancelled"}
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			if ue.Timeout() {
				return outcome{kind: retry, desc: fmt.Sprintf("error: attempt timed out after %s", e.cfg.Timeout)}
			}
			err = ue.Err // without the URL, which may hold a token
		}
		return outcome{kind: retry, desc: "error: " + err.Error()}
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, drainLimit))
	resp.Body.Close()
	return classify(resp, body, now, e.cfg.Retry.MaxBackoff)
}

// classify maps a response to an outcome.
func classify(resp *http.Response, body []byte, now time.Time, maxBackoff time.Duration) outcome {
	code := resp.StatusCode
	status := fmt.Sprintf("%d %s", code, http.StatusText(code))
	o := outcome{status: code, desc: "status " + status}
	switch {
	case code >= 200 && code <= 299:
		o.kind = delivered
	case code >= 300 && code <= 399:
		o.kind, o.reason = permanent, ReasonRedirect
		o.err = fmt.Errorf("redirects are not followed: point url at the final address (got %s, Location %q)",
			status, resp.Header.Get("Location"))
	case code == http.StatusGone:
		o.kind = gone
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests, code >= 500 && code <= 599:
		o.kind = retry
		if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
			if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), now); ok {
				o.retryAfter, o.hasRetryAfter = min(d, maxBackoff), true
			}
		}
	default:
		o.kind, o.reason = permanent, ReasonRejected
		if s := snippet(body); s != "" {
			o.err = fmt.Errorf("endpoint rejected the event with %s: %s", status, s)
		} else {
			o.err = fmt.Errorf("endpoint rejected the event with %s", status)
		}
	}
	return o
}

// snippet returns the start of a response body as one line of valid UTF-8.
func snippet(body []byte) string {
	if len(body) > snippetLimit {
		body = body[:snippetLimit]
		for len(body) > 0 && !utf8.Valid(body) {
			body = body[:len(body)-1] // cut inside a rune
		}
	}
	s := strings.ToValidUTF8(string(body), "?")
	return strings.Join(strings.Fields(s), " ")
}

// parseRetryAfter reads a Retry-After value: delay seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		const maxSeconds = 1 << 32 // keeps the Duration from overflowing
		return time.Duration(min(n, maxSeconds)) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// retryWait returns how long d waits before its next attempt after the
// retriable outcome o, or false when its retry budget is spent.
func (e *Endpoint) retryWait(d *delivery, o outcome, now time.Time) (time.Duration, bool) {
	r := e.cfg.Retry
	if d.attempts >= r.MaxAttempts {
		return 0, false
	}
	elapsed := now.Sub(d.first)
	if elapsed >= r.MaxAge {
		return 0, false
	}
	wait := backoff(r, d.attempts)
	if o.hasRetryAfter {
		wait = o.retryAfter // already capped at MaxBackoff
	}
	// The last attempt is made when max_age runs out, not skipped.
	return min(wait, r.MaxAge-elapsed), true
}

// backoff is capped exponential backoff with full jitter: a uniform wait in
// [0, min(max_backoff, initial_backoff * 2^(attempts-1))].
func backoff(r RetryConfig, attempts int) time.Duration {
	ceiling := r.InitialBackoff
	for i := 1; i < attempts && ceiling < r.MaxBackoff; i++ {
		if ceiling > r.MaxBackoff/2 {
			ceiling = r.MaxBackoff
			break
		}
		ceiling *= 2
	}
	ceiling = min(ceiling, r.MaxBackoff)
	if ceiling <= 0 {
		return 0
	}
	return rand.N(ceiling + 1)
}
