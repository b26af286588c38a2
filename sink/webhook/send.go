package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/event/cloudevent"
	"github.com/outbox-relay/outbox-relay/internal/printable"
	"github.com/outbox-relay/outbox-relay/internal/redact"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/sink"
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
	retryable
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
	conn          bool // the endpoint could not be reached, or dropped the connection
	// err says why: for permanent, and for retryable (Observer.Retry)
	err    error
	reason string // for permanent
	// For the attempts record (EndpointConfig.Attempts): why no answer
	// came (an attempts.Class*), the start of the answer (secrets
	// hidden; only read when there is a record), and the attempt's start
	// and duration. attempted: a request was made or refused (not a
	// delivery dropped before its attempt).
	class     string
	answer    []byte
	start     time.Time
	dur       time.Duration
	attempted bool
}

// send makes one signed POST of d and classifies the result. It hands the
// request to the endpoint's transport itself: an http.Client would add, per
// request, a copy of the headers for redirects (which are not followed) and
// a timer of its own (ctx carries the attempt's deadline), and
// go-retryablehttp's Client a request wrapper (the endpoint schedules its
// own retries). What they did that matters is done here: the url's userinfo
// is sent as basic auth (fixedHeader), errors are *url.Error for
// go-retryablehttp's policy, a response body is drained and closed.
func (e *Endpoint) send(ctx context.Context, d *delivery, now time.Time) outcome {
	if err := checkLimits(d.ev.ID); err != nil {
		return outcome{kind: permanent, desc: "error: " + err.Error(), reason: ReasonRequest, err: err, class: attempts.ClassRequest}
	}
	parts := &requestParts{data: d.body}
	parts.body.Reset(d.body)
	req := (&http.Request{
		Method:     http.MethodPost,
		URL:        e.url,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     e.header(d, now.Unix(), parts.vals[:0]),
		// An io.NopCloser of a *bytes.Reader, which net/http knows is in
		// memory: it writes the headers and the body in one write (any
		// other reader has the headers flushed on their own first).
		Body:          io.NopCloser(&parts.body),
		ContentLength: int64(len(d.body)),
		// Lets the transport send the request again on a fresh connection
		// when a kept-alive one turns out closed before it was written.
		GetBody: parts.again,
		Host:    e.url.Host,
	}).WithContext(ctx)

	resp, err := e.transport.RoundTrip(req)
	if err != nil {
		switch ctx.Err() {
		case context.DeadlineExceeded:
			err := fmt.Errorf("attempt timed out after %s: %w", e.cfg.Timeout, context.DeadlineExceeded)
			return outcome{kind: retryable, desc: "error: " + err.Error(), err: err, class: attempts.ClassTimeout}
		case context.Canceled:
			return outcome{kind: cancelled, desc: "error: cancelled"}
		}
		// go-retryablehttp's policy tells the errors no retry can fix: an
		// untrusted certificate, an invalid header, an unsupported scheme.
		// It reads them from a *url.Error, as an http.Client returns them
		// (without the URL here, which may hold a token).
		again, _ := retryablehttp.DefaultRetryPolicy(ctx, nil, &url.Error{Op: "Post", Err: err})
		var ee *EgressError
		if errors.As(err, &ee) {
			return outcome{kind: permanent, desc: "error: " + ee.Error(), reason: ReasonRequest, err: ee, class: attempts.ClassEgress}
		}
		class := errorClass(err)
		err = scrubbed{err, e.scrub}
		if !again {
			if class != attempts.ClassTLS {
				class = attempts.ClassRequest
			}
			return outcome{kind: permanent, desc: "error: " + err.Error(), reason: ReasonRequest, class: class,
				err: fmt.Errorf("the request cannot succeed as configured: %w", err)}
		}
		return outcome{kind: retryable, desc: "error: " + err.Error(), conn: retry.IsConnectionError(err), err: err, class: class}
	}
	var rbody []byte
	record := e.cfg.Attempts != nil
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode <= 299 && !record:
		// Read (up to drainLimit) only so that the connection is reused.
		if resp.ContentLength != 0 {
			_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
		}
	case resp.ContentLength != 0:
		rbody, _ = io.ReadAll(io.LimitReader(resp.Body, drainLimit))
	}
	resp.Body.Close()
	o := classify(resp, rbody, now, e.cfg.Retry.MaxBackoff, e.scrub)
	if record && len(rbody) > 0 {
		// Secrets hidden in the whole of what was read, then cut: a cut
		// cannot leave the start of one.
		o.answer = attempts.Clip([]byte(e.scrub.Replace(string(rbody))))
	}
	return o
}

// requestParts are what an attempt's request is made of, allocated
// together: the reader of its body and the backing array of its header
// values. Every attempt has its own: the transport may still read an
// earlier attempt's request after its RoundTrip returned.
type requestParts struct {
	data []byte // the body
	body bytes.Reader
	vals [headerValues]string
}

// again is the request's GetBody: a fresh reader of the body.
func (p *requestParts) again() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(p.data)), nil
}

// headerValues is the number of header values a request usually sets
// (header): webhook-id, webhook-timestamp, 7 of metadata, the signature.
const headerValues = 10

// errorClass says, for the attempts record, why a request got no answer:
// a timeout, the endpoint's TLS (its certificate, the handshake), or
// else the connection (refused, reset, DNS, unreachable).
func errorClass(err error) string {
	var (
		ne    net.Error
		cv    *tls.CertificateVerificationError
		rh    tls.RecordHeaderError
		alert tls.AlertError
		ua    x509.UnknownAuthorityError
		hn    x509.HostnameError
		ci    x509.CertificateInvalidError
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return attempts.ClassTimeout
	case errors.As(err, &cv), errors.As(err, &rh), errors.As(err, &alert), errors.As(err, &ua), errors.As(err, &hn), errors.As(err, &ci),
		strings.HasPrefix(err.Error(), "tls: "):
		return attempts.ClassTLS
	}
	return attempts.ClassConnection
}

// checkLimits checks, before a request is made, what HTTP cannot carry of
// an event: its id is the webhook-id header as it is (it is signed), so a
// control character in it (a line break) can never be sent. The other
// headers are percent-encoded, and the trace context was validated when
// the row was read. An error wraps sink.ErrOverLimit.
func checkLimits(id string) error {
	if i := strings.IndexFunc(id, func(r rune) bool { return (r < ' ' && r != '\t') || r == 0x7f }); i >= 0 {
		return sink.Unsendable(id, fmt.Sprintf("the id is the webhook-id header, and an HTTP header cannot carry its control character %q (byte %d)", id[i], i))
	}
	return nil
}

// Headers of the event's metadata, which the Kafka and NATS sinks carry as
// type, aggregate_type, aggregate_id, gtid, binlog_file, binlog_pos and
// table. Their values are percent-encoded (url.PathEscape: letters, digits,
// "-._~" and most punctuation as they are), so any bytes arrive intact.
// They are not signed: the signature covers webhook-id, webhook-timestamp
// and the body. Nor are the W3C trace context headers traceparent and
// tracestate, sent when the row has a trace context (columns.traceparent).
const (
	HeaderEventType     = "webhook-event-type"
	HeaderAggregateType = "webhook-aggregate-type"
	HeaderAggregateID   = "webhook-aggregate-id"
	HeaderGTID          = "webhook-gtid"
	HeaderBinlogFile    = "webhook-binlog-file"
	HeaderBinlogPos     = "webhook-binlog-pos"
	HeaderTable         = "webhook-table"
	// HeaderReplay is sent with a replayed event only (outbox-relay
	// replay): the replay job's id. Live events never carry it.
	HeaderReplay = "webhook-replay"
)

// Canonical forms of the header names set per request: the header map is
// filled directly, without canonicalising a key per request.
var (
	keyContentType   = http.CanonicalHeaderKey("Content-Type")
	keyUserAgent     = http.CanonicalHeaderKey("User-Agent")
	keyID            = http.CanonicalHeaderKey("webhook-id")
	keyTimestamp     = http.CanonicalHeaderKey("webhook-timestamp")
	keySignature     = http.CanonicalHeaderKey("webhook-signature")
	keyEventType     = http.CanonicalHeaderKey(HeaderEventType)
	keyAggregateType = http.CanonicalHeaderKey(HeaderAggregateType)
	keyAggregateID   = http.CanonicalHeaderKey(HeaderAggregateID)
	keyGTID          = http.CanonicalHeaderKey(HeaderGTID)
	keyBinlogFile    = http.CanonicalHeaderKey(HeaderBinlogFile)
	keyBinlogPos     = http.CanonicalHeaderKey(HeaderBinlogPos)
	keyTable         = http.CanonicalHeaderKey(HeaderTable)
	keyReplay        = http.CanonicalHeaderKey(HeaderReplay)
	keyTraceParent   = http.CanonicalHeaderKey("traceparent")
	keyTraceState    = http.CanonicalHeaderKey("tracestate")
)

// ceKeys are the canonical ce-<attribute> header names of the attributes
// cloudevent.Config.Attributes gives: a request builds none of them.
var ceKeys = func() map[string]string {
	m := map[string]string{}
	for _, n := range []string{"specversion", "id", "source", "type", "subject", "time", "traceparent", "tracestate"} {
		m[n] = http.CanonicalHeaderKey("ce-" + n)
	}
	return m
}()

// ceKey returns the header name of CloudEvents attribute name (binary mode).
func ceKey(name string) string {
	if k, ok := ceKeys[name]; ok {
		return k
	}
	return http.CanonicalHeaderKey("ce-" + name)
}

// fixedHeader returns the headers every request of an endpoint carries:
// the configured ones, then Content-Type and User-Agent over them, and the
// url's userinfo as basic auth unless an Authorization header is
// configured (as an http.Client sends it). Requests share its value slices,
// which nothing writes to.
func fixedHeader(configured map[string]string, u *url.URL) http.Header {
	h := make(http.Header, len(configured)+3)
	for k, v := range configured {
		h.Set(k, v)
	}
	h.Set(keyContentType, "application/json")
	h.Set(keyUserAgent, userAgent)
	if u.User != nil && h.Get("Authorization") == "" {
		pass, _ := u.User.Password()
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pass)))
	}
	return h
}

// headerField is one header of a request, its key canonical.
type headerField struct {
	key    string
	values []string
}

// fieldsOf returns h's fields, for requests to copy without iterating
// over a map.
func fieldsOf(h http.Header) []headerField {
	fs := make([]headerField, 0, len(h))
	for k, v := range h {
		fs = append(fs, headerField{k, v})
	}
	return fs
}

// header returns d's request headers for an attempt at ts (Unix seconds):
// the fixed ones, webhook-id, webhook-timestamp, the event's metadata and
// the signature. Its values share one backing array, vals' (empty; it
// grows past its capacity if need be), which is the request's alone.
func (e *Endpoint) header(d *delivery, ts int64, vals []string) http.Header {
	h := make(http.Header, len(e.fixed)+headerValues)
	for _, f := range e.fixed {
		h[f.key] = f.values
	}
	set := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	ev := d.ev
	set(keyID, ev.ID)
	set(keyTimestamp, timestamp(ts))
	set(keyEventType, url.PathEscape(ev.Type))
	set(keyAggregateType, url.PathEscape(ev.AggregateType))
	set(keyAggregateID, url.PathEscape(ev.AggregateID))
	set(keyGTID, url.PathEscape(ev.Source.GTID))
	set(keyBinlogFile, url.PathEscape(ev.Source.File))
	set(keyTable, url.PathEscape(ev.Table))
	set(keyBinlogPos, strconv.FormatUint(uint64(ev.Source.Pos), 10))
	if job := ev.Replay(); job != "" {
		set(keyReplay, url.PathEscape(job))
	}
	switch ce := &e.cfg.CloudEvents; ce.Mode {
	case cloudevent.Binary:
		// HTTP protocol binding, binary mode: ce-<attribute> headers,
		// percent-encoded; datacontenttype is the Content-Type.
		ce.Attributes(ev, func(name, v string) {
			if name == "datacontenttype" {
				h[keyContentType] = []string{v}
				return
			}
			set(ceKey(name), cloudevent.HeaderValue(v))
		})
	case cloudevent.Structured:
		h[keyContentType] = []string{cloudevent.ContentTypeJSON}
	}
	if ev.TraceParent != "" {
		// W3C Trace Context over HTTP: unsigned, like the metadata headers.
		set(keyTraceParent, ev.TraceParent)
		if ev.TraceState != "" {
			set(keyTraceState, ev.TraceState)
		}
	}
	if e.signer != nil {
		set(keySignature, e.signer.sign(ev.ID, ts, d.body))
	}
	return h
}

// stamp is a webhook-timestamp value and its text.
type stamp struct {
	ts int64
	s  string
}

// lastStamp is the latest webhook-timestamp made (timestamp).
var lastStamp atomic.Pointer[stamp]

// timestamp returns ts as the webhook-timestamp value: the requests of
// one second, of every endpoint (a gateway's thousand make about one
// each), share one string.
func timestamp(ts int64) string {
	if st := lastStamp.Load(); st != nil && st.ts == ts {
		return st.s
	}
	st := &stamp{ts: ts, s: strconv.FormatInt(ts, 10)}
	lastStamp.Store(st)
	return st.s
}

// scrubbed is an error whose text has the endpoint's secrets hidden; it
// unwraps to the original for errors.Is and errors.As.
type scrubbed struct {
	err   error
	scrub *redact.Replacer
}

func (s scrubbed) Error() string { return s.scrub.Replace(s.err.Error()) }
func (s scrubbed) Unwrap() error { return s.err }

// classify maps a response to an outcome. What it quotes of the response
// (the body's start, a Location) has the url's userinfo and query values
// and scrub's secrets hidden: a receiver may echo the request's headers.
func classify(resp *http.Response, body []byte, now time.Time, maxBackoff time.Duration, scrub *redact.Replacer) outcome {
	code := resp.StatusCode
	status, desc := statusText(code)
	o := outcome{status: code, desc: desc}
	switch {
	case code >= 200 && code <= 299:
		o.kind = delivered
	case code >= 300 && code <= 399:
		o.kind, o.reason = permanent, ReasonRedirect
		o.err = fmt.Errorf("redirects are not followed: point url at the final address (got %s, Location %q)",
			status, printable.String(scrub.Replace(redact.URL(resp.Header.Get("Location")))))
	case code == http.StatusGone:
		o.kind = gone
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests, code >= 500 && code <= 599:
		o.kind = retryable
		o.err = errors.New("endpoint answered " + status)
		if d, ok := retryAfter(resp); ok {
			o.retryAfter, o.hasRetryAfter = min(d, maxBackoff), true
			o.err = sink.BackOff(o.err, o.retryAfter)
		}
	default:
		o.kind, o.reason = permanent, ReasonRejected
		if s := snippet([]byte(scrub.Replace(string(body)))); s != "" {
			o.err = fmt.Errorf("endpoint rejected the event with %s: %s", status, s)
		} else {
			o.err = fmt.Errorf("endpoint rejected the event with %s", status)
		}
	}
	return o
}

// statusLines holds, for each status code net/http names, its "204 No
// Content" and "status 204 No Content": classify makes no string for a
// common answer.
var statusLines = func() map[int][2]string {
	m := make(map[int][2]string)
	for code := 100; code <= 599; code++ {
		if t := http.StatusText(code); t != "" {
			s := strconv.Itoa(code) + " " + t
			m[code] = [2]string{s, "status " + s}
		}
	}
	return m
}()

// statusText returns a status code's line ("204 No Content") and an
// outcome's description of it ("status 204 No Content").
func statusText(code int) (status, desc string) {
	if l, ok := statusLines[code]; ok {
		return l[0], l[1]
	}
	status = strconv.Itoa(code) + " " + http.StatusText(code)
	return status, "status " + status
}

// snippet returns the start of a response body as one line of valid UTF-8
// with its control characters (terminal escapes) written as Go escapes.
// The caller hides secrets first, in the whole body, so that a cut cannot
// leave the start of one.
func snippet(body []byte) string {
	if len(body) > snippetLimit {
		body = body[:snippetLimit]
		for len(body) > 0 && !utf8.Valid(body) {
			body = body[:len(body)-1] // cut inside a rune
		}
	}
	s := strings.ToValidUTF8(string(body), "?")
	return printable.String(strings.Join(strings.Fields(s), " "))
}

// retryAfter returns the wait a 429 or 503 asked for in its Retry-After
// (seconds or an HTTP date), not capped. It is go-retryablehttp's parsing:
// DefaultBackoff returns the header's wait when there is one, and otherwise
// its exponential wait clamped to max, here -1 to tell "none" from "0s".
func retryAfter(resp *http.Response) (time.Duration, bool) {
	d := retryablehttp.DefaultBackoff(0, -1, 0, resp)
	return d, d >= 0
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
	wait := e.cfg.Policy.Within(r.InitialBackoff, r.MaxBackoff).Wait(d.attempts)
	if o.hasRetryAfter {
		wait = o.retryAfter // already capped at MaxBackoff
	}
	// The last attempt is made when max_age runs out, not skipped.
	return min(wait, r.MaxAge-elapsed), true
}
