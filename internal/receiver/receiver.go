// Package receiver is the webhook endpoint of the tests: an HTTP server on
// 127.0.0.1 that answers each request as the test says and records it,
// decoding the JSON envelope the relay sends (body: envelope). It is safe
// for concurrent use.
package receiver

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Reply is how the receiver answers a request: Status (0: 200 OK) after
// Hang (the request's context ending cuts the hang short, and the request
// is then not recorded), with Header and Body.
type Reply struct {
	Status int
	Header http.Header
	Hang   time.Duration
	Body   string
}

// Request is one request the receiver answered.
type Request struct {
	// Gen is the receiver's generation when the request arrived (NextGen).
	Gen    int64
	Path   string
	Status int
	// WebhookID is its webhook-id header, TraceParent its W3C traceparent,
	// Replay its webhook-replay header (a replayed event's job).
	WebhookID, TraceParent, Replay string
	// The envelope's id, aggregate id and data (empty when the body is not
	// an envelope). Only these are kept: a fault test counts the heap of
	// the process the receiver runs in.
	EventID, AggregateID string
	Data                 json.RawMessage
	At                   time.Time
}

// Receiver is a running endpoint. URL is its base ("http://127.0.0.1:port"),
// Addr its host:port.
type Receiver struct {
	URL, Addr string

	gen      atomic.Int64
	Started  time.Time // when Start was called
	mu       sync.Mutex
	reqs     []Request
	onAccept func(Request)
}

// Start runs a receiver until t ends. answer says how to answer each
// request (with its body and the time since Start); nil answers 200 to
// every request. A 2xx request whose body is not the JSON envelope fails t.
func Start(t testing.TB, answer func(r *http.Request, body []byte, since time.Duration) Reply) *Receiver {
	rc := &Receiver{Started: time.Now()}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gen := rc.gen.Load()
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return // the relay went away mid-request
		}
		var rep Reply
		if answer != nil {
			rep = answer(r, body, time.Since(rc.Started))
		}
		if rep.Status == 0 {
			rep.Status = http.StatusOK
		}
		if rep.Hang > 0 {
			select {
			case <-time.After(rep.Hang):
			case <-r.Context().Done():
				return
			}
		}
		var env struct {
			ID          string          `json:"id"`
			AggregateID string          `json:"aggregate_id"`
			Data        json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(body, &env); err != nil && rep.Status/100 == 2 {
			t.Errorf("endpoint got a body that is not the JSON envelope: %q", body)
		}
		req := Request{Gen: gen, Path: r.URL.Path, Status: rep.Status, WebhookID: r.Header.Get("webhook-id"),
			TraceParent: r.Header.Get("traceparent"), Replay: r.Header.Get("webhook-replay"), EventID: env.ID, AggregateID: env.AggregateID, Data: env.Data, At: time.Now()}
		rc.mu.Lock()
		rc.reqs = append(rc.reqs, req)
		onAccept := rc.onAccept
		rc.mu.Unlock()
		if onAccept != nil && rep.Status/100 == 2 {
			onAccept(req)
		}
		for k, v := range rep.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(rep.Status)
		if rep.Body != "" {
			io.WriteString(w, rep.Body)
		}
	}))
	t.Cleanup(srv.Close)
	rc.URL, rc.Addr = srv.URL, srv.Listener.Addr().String()
	return rc
}

// OnAccept has f told each request answered with a 2xx from now on, on
// the request's goroutine.
func (rc *Receiver) OnAccept(f func(Request)) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.onAccept = f
}

// NextGen makes the requests that arrive from now on carry the next
// generation (a test restarting the relay tells its processes apart).
func (rc *Receiver) NextGen() { rc.gen.Add(1) }

// Requests returns every request answered so far, in arrival order.
func (rc *Receiver) Requests() []Request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.reqs)
}

// Accepted returns the requests answered with a 2xx (to path, or to any
// path when path is ""), in arrival order.
func (rc *Receiver) Accepted(path string) []Request {
	var out []Request
	for _, r := range rc.Requests() {
		if r.Status/100 == 2 && (path == "" || r.Path == path) {
			out = append(out, r)
		}
	}
	return out
}

// Unique counts the distinct events accepted.
func (rc *Receiver) Unique() int { return Unique(rc.Accepted("")) }

// Unique counts the distinct event ids of reqs.
func Unique(reqs []Request) int {
	seen := map[string]bool{}
	for _, r := range reqs {
		seen[r.EventID] = true
	}
	return len(seen)
}
