package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/sink"
)

// The Standard Webhooks specification's published example.
const (
	specSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specTimestamp = 1614265330
	specBody      = `{"test": 2432232314}`
	specSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

// A second secret, for rotation: 32 bytes.
var rotatedSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))

var (
	_ sink.Sink      = (*Endpoint)(nil)
	_ sink.Submitter = (*Endpoint)(nil)
)

func TestSignMatchesTheSpecVector(t *testing.T) {
	key, err := parseSecret(specSecret)
	if err != nil {
		t.Fatal(err)
	}
	got := sign([][]byte{key}, specID, specTimestamp, []byte(specBody))
	if got != specSignature {
		t.Fatalf("sign = %q, want %q", got, specSignature)
	}
	// And the independent verifier agrees, so it can be trusted below.
	h := http.Header{}
	h.Set("webhook-id", specID)
	h.Set("webhook-timestamp", strconv.Itoa(specTimestamp))
	h.Set("webhook-signature", specSignature)
	if err := specVerify(specSecret, h, []byte(specBody), time.Unix(specTimestamp, 0)); err != nil {
		t.Fatalf("independent verifier rejects the spec vector: %v", err)
	}
}

// specVerify checks a request as a Standard Webhooks receiver would, written
// from the specification without the package's signing code: some v1 entry
// must be the HMAC-SHA256 of id.timestamp.body under secret, and the
// timestamp within 5 minutes of now.
func specVerify(secret string, h http.Header, body []byte, now time.Time) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	if id == "" {
		return errors.New("no webhook-id")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook-timestamp %q: %v", ts, err)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return fmt.Errorf("webhook-timestamp %s is %s off", ts, d)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + string(body)))
	want := mac.Sum(nil)
	for _, entry := range strings.Fields(h.Get("webhook-signature")) {
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		if got, err := base64.StdEncoding.DecodeString(sig); err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("no v1 signature of %q matches", h.Get("webhook-signature"))
}

// request is one request a test server received.
type request struct {
	id     string
	header http.Header
	body   []byte
	at     time.Time
}

// server is a loopback webhook receiver that checks every request against the
// protocol (method, headers, a valid signature for each secret) and answers
// with respond.
type server struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []request
}

func newServer(t testing.TB, secrets []string, respond func(w http.ResponseWriter, r *http.Request, req request)) *server {
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		req := request{id: r.Header.Get("webhook-id"), header: r.Header.Clone(), body: body, at: time.Now()}
		if r.Method != http.MethodPost {
			t.Errorf("method %s, want POST", r.Method)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		if ua := r.Header.Get("User-Agent"); ua != "outbox-relay" {
			t.Errorf("User-Agent %q", ua)
		}
		for _, secret := range secrets {
			if err := specVerify(secret, r.Header, body, time.Now()); err != nil {
				t.Errorf("request %s: signature: %v", req.id, err)
			}
		}
		s.mu.Lock()
		s.reqs = append(s.reqs, req)
		s.mu.Unlock()
		respond(w, r, req)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) requests() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

func ok(w http.ResponseWriter, _ *http.Request, _ request) { w.WriteHeader(http.StatusNoContent) }

// testConfig is a config for url with fast retries.
func testConfig(url string) EndpointConfig {
	return EndpointConfig{
		Name:    "test",
		URL:     url,
		Secrets: []string{specSecret, rotatedSecret},
		Timeout: 5 * time.Second,
		Retry: RetryConfig{
			MaxAttempts:    20,
			InitialBackoff: time.Millisecond,
			MaxBackoff:     5 * time.Millisecond,
		},
	}
}

func newEndpoint(t testing.TB, cfg EndpointConfig) *Endpoint {
	t.Helper()
	e, err := NewEndpoint(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

func ev(id, aggregate string) *event.Event {
	return &event.Event{
		ID: id, AggregateType: "order", AggregateID: aggregate, Type: "order.created",
		Payload:    fmt.Appendf(nil, `{"id":%q,"aggregate":%q}`, id, aggregate),
		CommitTime: time.Date(2026, 5, 1, 12, 30, 0, 0, time.UTC),
	}
}

// write is e.Write, failing the test if it does not return within 30 s.
func write(t *testing.T, e *Endpoint, batch ...*event.Event) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := e.Write(ctx, batch)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("Write did not return within 30s")
	}
	return err
}

// permanentErrors checks that err is a BatchError whose entries are exactly
// the indexes want, each permanent, and returns the entries.
func permanentErrors(t *testing.T, err error, want ...int) map[int]error {
	t.Helper()
	var be *sink.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("Write = %v, want a *sink.BatchError", err)
	}
	for _, i := range want {
		if !sink.IsPermanent(be.Errs[i]) {
			t.Errorf("event %d: error %v is not permanent", i, be.Errs[i])
		}
	}
	if len(be.Errs) != len(want) {
		t.Errorf("BatchError has %d entries, want %d: %v", len(be.Errs), len(want), be.Errs)
	}
	return be.Errs
}

func TestPerAggregateOrderUnderConcurrentBatches(t *testing.T) {
	const aggregates, perAggregate, writes, maxConcurrency = 20, 15, 3, 8

	// Events of 20 aggregates, interleaved by a seeded shuffle.
	rng := rand.New(rand.NewPCG(1, 2))
	var order []int
	for a := range aggregates {
		for range perAggregate {
			order = append(order, a)
		}
	}
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	var events []*event.Event
	want := map[string][]string{}
	for i, a := range order {
		agg := fmt.Sprintf("agg-%02d", a)
		id := fmt.Sprintf("evt-%03d", i)
		events = append(events, ev(id, agg))
		want[agg] = append(want[agg], id)
	}

	var (
		mu          sync.Mutex
		attempts    = map[string]int{}
		delivered   = map[string][]string{} // aggregate -> ids in first-success order
		inFlightAgg = map[string]int{}
		inFlight    int
		maxInFlight int
		unavailable int
	)
	srv := newServer(t, []string{specSecret, rotatedSecret}, func(w http.ResponseWriter, r *http.Request, req request) {
		var p struct{ ID, Aggregate string }
		if err := json.Unmarshal(req.body, &p); err != nil {
			t.Errorf("body %q: %v", req.body, err)
		}
		if req.id != p.ID {
			t.Errorf("webhook-id %q carries the body of event %q", req.id, p.ID)
		}
		mu.Lock()
		attempts[p.ID]++
		n := attempts[p.ID]
		inFlightAgg[p.Aggregate]++
		if inFlightAgg[p.Aggregate] > 1 {
			t.Errorf("two requests of aggregate %s in flight at once", p.Aggregate)
		}
		inFlight++
		maxInFlight = max(maxInFlight, inFlight)
		mu.Unlock()

		// Deterministically, some attempts of some events are refused.
		h := fnv.New32a()
		fmt.Fprintf(h, "%s#%d", p.ID, n)
		fail := n <= 4 && h.Sum32()%10 < 4
		time.Sleep(time.Duration(h.Sum32()%500) * time.Microsecond)

		mu.Lock()
		inFlightAgg[p.Aggregate]--
		inFlight--
		if fail {
			unavailable++
		} else if n == 1 || !slices.Contains(delivered[p.Aggregate], p.ID) {
			delivered[p.Aggregate] = append(delivered[p.Aggregate], p.ID)
		}
		mu.Unlock()
		if fail {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	cfg := testConfig(srv.URL)
	cfg.MaxConcurrency = maxConcurrency
	e := newEndpoint(t, cfg)

	// Three batches in flight at once, submitted in order from one
	// goroutine, as the pipeline does.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, writes)
	size := len(events) / writes
	for w := range writes {
		batch := events[w*size : (w+1)*size]
		if w == writes-1 {
			batch = events[w*size:]
		}
		e.Submit(ctx, batch, sink.Collect(len(batch), func(err error) { errs <- err }))
	}
	for range writes {
		if err := <-errs; err != nil {
			t.Errorf("batch done with %v, want nil", err)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	if unavailable == 0 {
		t.Fatal("the server refused no attempt: the test proves nothing")
	}
	for agg, ids := range want {
		if !slices.Equal(delivered[agg], ids) {
			t.Errorf("aggregate %s delivered in order %v, want %v", agg, delivered[agg], ids)
		}
	}
	if maxInFlight > maxConcurrency {
		t.Errorf("%d requests in flight at once, max_concurrency is %d", maxInFlight, maxConcurrency)
	}
	// Every request of one event carried the same webhook-id (checked per
	// request above), and every event was retried under its own id only.
	for _, r := range srv.requests() {
		if attempts[r.id] == 0 {
			t.Errorf("request with unknown webhook-id %q", r.id)
		}
	}
	t.Logf("%d events, %d refused attempts, at most %d requests in flight", len(events), unavailable, maxInFlight)
}

type countingObserver struct {
	attempts, retries, delivered atomic.Int64
	mu                           sync.Mutex
	statuses                     []int
	failed                       []string
}

func (o *countingObserver) Attempt(status int, _ time.Duration) {
	o.attempts.Add(1)
	o.mu.Lock()
	o.statuses = append(o.statuses, status)
	o.mu.Unlock()
}
func (o *countingObserver) Retry(error)             { o.retries.Add(1) }
func (o *countingObserver) Delivered(time.Duration) { o.delivered.Add(1) }
func (o *countingObserver) Failed(reason string) {
	o.mu.Lock()
	o.failed = append(o.failed, reason)
	o.mu.Unlock()
}

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		name       string
		retryAfter string
		maxBackoff time.Duration
		minGap     time.Duration
	}{
		{"a Retry-After of 1 second is waited for", "1", 10 * time.Minute, 900 * time.Millisecond},
		{"a Retry-After of an hour is capped at max_backoff", "3600", 200 * time.Millisecond, 150 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var n atomic.Int64
			srv := newServer(t, []string{specSecret}, func(w http.ResponseWriter, r *http.Request, _ request) {
				if n.Add(1) == 1 {
					w.Header().Set("Retry-After", tt.retryAfter)
					w.WriteHeader(http.StatusTooManyRequests)
					return
				}
				w.WriteHeader(http.StatusOK)
			})
			obs := &countingObserver{}
			cfg := testConfig(srv.URL)
			cfg.Secrets = []string{specSecret}
			cfg.Retry.MaxBackoff = tt.maxBackoff
			cfg.Observer = obs
			e := newEndpoint(t, cfg)

			if err := write(t, e, ev("e1", "a")); err != nil {
				t.Fatalf("Write = %v, want nil", err)
			}
			reqs := srv.requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests, want 2 (a 429, then the retry)", len(reqs))
			}
			// Only a lower bound: a timer never fires early.
			if gap := reqs[1].at.Sub(reqs[0].at); gap < tt.minGap {
				t.Errorf("retried after %s, want at least %s", gap, tt.minGap)
			}
			if reqs[0].id != "e1" || reqs[1].id != "e1" {
				t.Errorf("webhook-ids %q, %q, want e1 both times", reqs[0].id, reqs[1].id)
			}
			if a, r, d := obs.attempts.Load(), obs.retries.Load(), obs.delivered.Load(); a != 2 || r != 1 || d != 1 {
				t.Errorf("observer saw %d attempts, %d retries, %d delivered; want 2, 1, 1", a, r, d)
			}
			if !slices.Equal(obs.statuses, []int{429, 200}) {
				t.Errorf("observer statuses %v, want [429 200]", obs.statuses)
			}
		})
	}
}

func TestGoneDisablesTheEndpoint(t *testing.T) {
	srv := newServer(t, nil, func(w http.ResponseWriter, _ *http.Request, _ request) {
		w.WriteHeader(http.StatusGone)
	})
	obs := &countingObserver{}
	cfg := testConfig(srv.URL)
	cfg.Observer = obs
	e := newEndpoint(t, cfg)

	// Three events of one aggregate: the first is sent and answered 410; the
	// two behind it fail without a request.
	errs := permanentErrors(t, write(t, e, ev("e1", "a"), ev("e2", "a"), ev("e3", "a")), 0, 1, 2)
	for i, err := range errs {
		if !errors.Is(err, ErrEndpointDisabled) || err.Error() != "endpoint disabled: 410 Gone" {
			t.Errorf("event %d: %v, want %v", i, err, ErrEndpointDisabled)
		}
	}
	if n := len(srv.requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}

	// A later write of other aggregates fails at once, without a request.
	permanentErrors(t, write(t, e, ev("e4", "b"), ev("e5", "c")), 0, 1)
	if n := len(srv.requests()); n != 1 {
		t.Errorf("%d requests after the endpoint was disabled, want still 1", n)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.failed) != 5 || obs.failed[0] != ReasonDisabled {
		t.Errorf("observer failures %v, want 5 × %s", obs.failed, ReasonDisabled)
	}
}

func TestPermanentStatuses(t *testing.T) {
	var targetHits atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		targetHits.Add(1)
	}))
	t.Cleanup(target.Close)

	tests := []struct {
		name    string
		respond func(w http.ResponseWriter, r *http.Request, _ request)
		want    string
		reason  string
	}{
		{
			name: "400 is rejected, quoting the body",
			respond: func(w http.ResponseWriter, _ *http.Request, _ request) {
				http.Error(w, `{"error":"bad field"}`, http.StatusBadRequest)
			},
			want:   `endpoint rejected the event with 400 Bad Request: {"error":"bad field"}`,
			reason: ReasonRejected,
		},
		{
			name: "302 is not followed",
			respond: func(w http.ResponseWriter, r *http.Request, _ request) {
				http.Redirect(w, r, target.URL+"/final", http.StatusFound)
			},
			want:   "redirects are not followed: point url at the final address (got 302 Found",
			reason: ReasonRedirect,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, nil, tt.respond)
			obs := &countingObserver{}
			cfg := testConfig(srv.URL)
			cfg.Observer = obs
			e := newEndpoint(t, cfg)

			errs := permanentErrors(t, write(t, e, ev("e1", "a"), ev("e2", "a")), 0, 1)
			for i, err := range errs {
				if !strings.Contains(err.Error(), tt.want) {
					t.Errorf("event %d: %q, want it to contain %q", i, err, tt.want)
				}
				var de *DeliveryError
				if !errors.As(err, &de) || de.Attempts != 1 {
					t.Errorf("event %d: want a DeliveryError of 1 attempt, got %#v", i, de)
				}
			}
			if n := len(srv.requests()); n != 2 {
				t.Errorf("%d requests, want 2 (one per event, no retry)", n)
			}
			if !slices.Equal(obs.failed, []string{tt.reason, tt.reason}) {
				t.Errorf("observer failures %v, want 2 × %s", obs.failed, tt.reason)
			}
		})
	}
	if n := targetHits.Load(); n != 0 {
		t.Errorf("the redirect target got %d requests, want 0", n)
	}
}

func TestHangingServerIsRetriedUntilTheBudgetIsSpent(t *testing.T) {
	release := make(chan struct{})
	srv := newServer(t, nil, func(w http.ResponseWriter, r *http.Request, _ request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release) // before srv.Close, which waits for handlers
	cfg := testConfig(srv.URL)
	cfg.Timeout = 100 * time.Millisecond
	cfg.Retry.MaxAttempts = 2
	e := newEndpoint(t, cfg)

	errs := permanentErrors(t, write(t, e, ev("e1", "a")), 0)
	want := "retry budget exhausted after 2 attempts over "
	if err := errs[0]; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "last error: attempt timed out after 100ms") {
		t.Errorf("error %q, want %q ... last error: attempt timed out after 100ms", err, want)
	}
	if n := len(srv.requests()); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}

func TestServerErrorsSpendTheBudget(t *testing.T) {
	srv := newServer(t, nil, func(w http.ResponseWriter, _ *http.Request, _ request) {
		w.WriteHeader(http.StatusBadGateway)
	})
	cfg := testConfig(srv.URL)
	cfg.Retry.MaxAttempts = 3
	e := newEndpoint(t, cfg)
	errs := permanentErrors(t, write(t, e, ev("e1", "a")), 0)
	if !strings.Contains(errs[0].Error(), "retry budget exhausted after 3 attempts over") ||
		!strings.HasSuffix(errs[0].Error(), "last status 502 Bad Gateway") {
		t.Errorf("error %q", errs[0])
	}
	if n := len(srv.requests()); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
}

func TestFilterAcknowledgesOtherEventsWithoutARequest(t *testing.T) {
	srv := newServer(t, []string{specSecret}, ok)
	cfg := testConfig(srv.URL)
	cfg.Secrets = []string{specSecret}
	cfg.Filter = Filter{EventTypes: []string{"order.*"}, AggregateTypes: []string{"ord?r"}}
	e := newEndpoint(t, cfg)

	mk := func(id, aggType, typ string) *event.Event {
		x := ev(id, "a")
		x.AggregateType, x.Type = aggType, typ
		return x
	}
	batch := []*event.Event{
		mk("e1", "order", "order.created"),
		mk("e2", "user", "user.created"),
		mk("e3", "customer", "order.created"),
		mk("e4", "order", "order.paid"),
		mk("e5", "order", "invoice.sent"),
	}
	if err := write(t, e, batch...); err != nil {
		t.Fatalf("Write = %v, want nil", err)
	}
	var ids []string
	for _, r := range srv.requests() {
		ids = append(ids, r.id)
	}
	if !slices.Equal(ids, []string{"e1", "e4"}) {
		t.Errorf("requests for %v, want [e1 e4]", ids)
	}

	// A batch that is all filtered out returns at once.
	if err := write(t, e, batch[1]); err != nil {
		t.Errorf("Write = %v, want nil", err)
	}
}

func TestEnvelopeBody(t *testing.T) {
	tests := []struct {
		name     string
		payload  string
		wantData string
	}{
		{"a JSON payload is embedded as stored", `{"b": [1, 2.0],  "a":"x"}`, `{"b": [1, 2.0],  "a":"x"}`},
		{"a payload that is not JSON becomes a string", `not <json>`, `"not <json>"`},
		{"an empty payload becomes null", ``, `null`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, []string{specSecret, rotatedSecret}, ok)
			cfg := testConfig(srv.URL)
			cfg.Body = BodyEnvelope
			e := newEndpoint(t, cfg)
			x := ev("e1", "agg-1")
			x.Payload = []byte(tt.payload)
			if err := write(t, e, x); err != nil {
				t.Fatal(err)
			}
			body := srv.requests()[0].body
			var got map[string]json.RawMessage
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("body %s: %v", body, err)
			}
			want := map[string]string{
				"id": `"e1"`, "type": `"order.created"`, "aggregate_type": `"order"`,
				"aggregate_id": `"agg-1"`, "timestamp": `"2026-05-01T12:30:00Z"`, "data": tt.wantData,
			}
			if len(got) != len(want) {
				t.Errorf("body %s has %d fields, want %d", body, len(got), len(want))
			}
			for k, v := range want {
				if string(got[k]) != v {
					t.Errorf("%s = %s, want %s", k, got[k], v)
				}
			}
		})
	}
}

func TestStaticHeadersAreSent(t *testing.T) {
	srv := newServer(t, nil, ok)
	cfg := testConfig(srv.URL)
	cfg.Headers = map[string]string{"Authorization": "Bearer t0ken", "X-Tenant": "acme"}
	e := newEndpoint(t, cfg)
	if err := write(t, e, ev("e1", "a")); err != nil {
		t.Fatal(err)
	}
	h := srv.requests()[0].header
	if h.Get("Authorization") != "Bearer t0ken" || h.Get("X-Tenant") != "acme" {
		t.Errorf("headers %v", h)
	}
	if n := len(strings.Fields(h.Get("webhook-signature"))); n != 2 {
		t.Errorf("%d signatures, want one per secret (2)", n)
	}
}

// A request does not ask for a compressed answer (the transport's own
// Accept-Encoding: gzip): the relay reads an answer only to reuse the
// connection or to quote its start.
func TestRequestsDoNotAskForCompressedAnswers(t *testing.T) {
	srv := newServer(t, nil, ok)
	e := newEndpoint(t, testConfig(srv.URL))
	if err := write(t, e, ev("e1", "a")); err != nil {
		t.Fatal(err)
	}
	if got := srv.requests()[0].header.Values("Accept-Encoding"); len(got) != 0 {
		t.Errorf("Accept-Encoding %q, want none", got)
	}
}

// The url's userinfo is sent as basic auth (as an http.Client sends it),
// unless an Authorization header is configured; it is never in the request
// line.
func TestURLUserinfoIsSentAsBasicAuth(t *testing.T) {
	srv := newServer(t, nil, ok)
	withUser := strings.Replace(srv.URL, "http://", "http://relay:s3cr%3At@", 1) + "/hook?x=1"
	e := newEndpoint(t, testConfig(withUser))
	if err := write(t, e, ev("e1", "a")); err != nil {
		t.Fatal(err)
	}
	r := srv.requests()[0]
	if got, want := r.header.Get("Authorization"), "Basic "+base64.StdEncoding.EncodeToString([]byte("relay:s3cr:t")); got != want {
		t.Errorf("Authorization %q, want %q", got, want)
	}

	cfg := testConfig(withUser)
	cfg.Headers = map[string]string{"Authorization": "Bearer t0ken"}
	e = newEndpoint(t, cfg)
	if err := write(t, e, ev("e2", "a")); err != nil {
		t.Fatal(err)
	}
	if got := srv.requests()[1].header.Get("Authorization"); got != "Bearer t0ken" {
		t.Errorf("Authorization %q, want the configured header", got)
	}
}

// A permanently failed event's aggregate goes on unless the stream stops.
// A Write's caller that cancels its ctx as Write returns has not stopped
// it: the aggregate's next event, queued by another call, is delivered,
// however the cancel and the release of the failed event's lane interleave
// (each round tries one interleaving).
func TestAWriteCancelledAfterItReturnedStopsNothing(t *testing.T) {
	arrived := make(chan string, 100)
	release := make(chan struct{}, 100)
	srv := newServer(t, nil, func(w http.ResponseWriter, r *http.Request, req request) {
		id := r.Header.Get("webhook-id")
		arrived <- id
		if strings.HasPrefix(id, "bad") {
			<-release
			w.WriteHeader(http.StatusBadRequest) // permanent
		}
	})
	e := newEndpoint(t, testConfig(srv.URL))
	for i := range 50 {
		agg := fmt.Sprintf("a%d", i)
		ctx, cancel := context.WithCancel(context.Background())
		errA := make(chan error, 1)
		go func() { errA <- e.Write(ctx, []*event.Event{ev(fmt.Sprintf("bad%d", i), agg)}) }()
		<-arrived
		// The aggregate's next event, queued behind the failing one.
		errB := make(chan error, 1)
		e.Submit(context.Background(), []*event.Event{ev(fmt.Sprintf("good%d", i), agg)}, sink.Collect(1, func(err error) { errB <- err }))
		release <- struct{}{}
		err := <-errA
		cancel() // as Write returns
		if !sink.IsPermanent(sink.ErrorFor(err, 0)) {
			t.Fatalf("round %d: Write = %v, want a permanent failure", i, err)
		}
		if err := <-errB; err != nil {
			t.Fatalf("round %d: the aggregate's next event: %v, want delivered (a Write's ctx cancelled after it returned stops nothing)", i, err)
		}
		<-arrived
	}
}

func TestCancelledWriteReturnsAndDropsItsEvents(t *testing.T) {
	tests := []struct {
		name   string
		status int // 0: hang
	}{
		{"while a request hangs", 0},
		{"while waiting to retry", http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			arrived := make(chan struct{}, 100)
			release := make(chan struct{})
			srv := newServer(t, nil, func(w http.ResponseWriter, r *http.Request, _ request) {
				arrived <- struct{}{}
				if tt.status != 0 {
					w.WriteHeader(tt.status)
					return
				}
				select {
				case <-r.Context().Done():
				case <-release:
				}
			})
			defer close(release)
			cfg := testConfig(srv.URL)
			cfg.Retry.InitialBackoff, cfg.Retry.MaxBackoff = time.Hour, time.Hour
			cfg.Timeout = time.Hour
			e := newEndpoint(t, cfg)

			ctx, cancel := context.WithCancel(context.Background())
			errA := make(chan error, 1)
			e.Submit(ctx, []*event.Event{ev("e1", "x"), ev("e2", "y")}, sink.Collect(2, func(err error) { errA <- err }))
			<-arrived
			// A second batch, with its own ctx, queues behind e1 on aggregate x.
			errB := make(chan error, 1)
			e.Submit(context.Background(), []*event.Event{ev("e3", "x")}, sink.Collect(1, func(err error) { errB <- err }))
			cancel()
			select {
			case err := <-errA:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("Write = %v, want context.Canceled", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Write did not return after its context was cancelled")
			}
			// e3 must not overtake e1, which will be written again: it is handed back, retriable.
			err := sink.ErrorFor(<-errB, 0)
			if !errors.Is(err, ErrPredecessorAbandoned) || sink.IsPermanent(err) {
				t.Errorf("the later write's event: %v, want retriable %v", err, ErrPredecessorAbandoned)
			}
			// The lanes are gone: a new write of x goes through at once once the server answers.
			e.mu.Lock()
			lanes := len(e.lanes)
			e.mu.Unlock()
			if lanes != 0 {
				t.Errorf("%d lanes left, want 0", lanes)
			}
		})
	}
}

// Calls that share a ctx (a pipeline's) share its watch: when it ends,
// every call of it still pending is abandoned, and the calls done are
// off the watch.
func TestCallsOfOneCtxShareItsWatch(t *testing.T) {
	arrived := make(chan string, 100)
	release := make(chan struct{})
	srv := newServer(t, nil, func(w http.ResponseWriter, r *http.Request, _ request) {
		id := r.Header.Get("webhook-id")
		arrived <- id
		if id == "done" {
			return
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	cfg := testConfig(srv.URL)
	cfg.Timeout = time.Hour
	cfg.MaxConcurrency = 4
	e := newEndpoint(t, cfg)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 10)
	submit := func(evs ...*event.Event) {
		e.Submit(ctx, evs, sink.Collect(len(evs), func(err error) { errs <- err }))
	}
	submit(ev("done", "d"))
	<-arrived
	if err := <-errs; err != nil {
		t.Fatalf("delivered call: %v", err)
	}
	submit(ev("e1", "x"), ev("e2", "y"))
	submit(ev("e3", "z"))
	submit(ev("e4", "x")) // behind e1
	for range 3 {
		<-arrived
	}
	e.mu.Lock()
	w := e.watch
	var calls int
	for c := w.first; c != nil; c = c.next {
		calls++
	}
	e.mu.Unlock()
	if w.done != ctx.Done() || calls != 3 {
		t.Fatalf("watch of %d calls (its ctx's: %v), want the 3 pending calls of ctx", calls, w.done == ctx.Done())
	}
	cancel()
	for i := range 3 {
		select {
		case err := <-errs:
			if err == nil || sink.IsPermanent(sink.ErrorFor(err, 0)) {
				t.Errorf("abandoned call %d: %v, want a retriable error", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the calls of a cancelled ctx were not abandoned")
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if w.first != nil || e.watch != nil || len(e.lanes) != 0 {
		t.Errorf("after the ctx ended: watch calls %v, current watch %v, %d lanes; want none", w.first != nil, e.watch != nil, len(e.lanes))
	}
}

func TestSubmitAfterCloseFails(t *testing.T) {
	srv := newServer(t, nil, ok)
	e, err := NewEndpoint(testConfig(srv.URL), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.Write(context.Background(), []*event.Event{ev("e1", "a")}); err == nil || sink.IsPermanent(err) {
		t.Errorf("Write after Close = %v, want a retriable error", err)
	}
}

func TestValidate(t *testing.T) {
	valid := func() EndpointConfig {
		return EndpointConfig{Name: "orders", URL: "https://example.com/hook", Secrets: []string{specSecret}}
	}
	short := "whsec_" + base64.StdEncoding.EncodeToString([]byte("only-16-bytes!!!"))
	tests := []struct {
		name   string
		modify func(c *EndpointConfig)
		want   string // "" means valid
	}{
		{"a minimal config is valid", func(*EndpointConfig) {}, ""},
		{"an unpadded secret is accepted", func(c *EndpointConfig) {
			c.Secrets = []string{strings.TrimRight(rotatedSecret, "=")}
		}, ""},
		{"a missing url is rejected", func(c *EndpointConfig) { c.URL = "" }, "url is empty"},
		{"a relative url is rejected", func(c *EndpointConfig) { c.URL = "/hook" }, `url "/hook" is not an absolute http or https address`},
		{"an ftp url is rejected", func(c *EndpointConfig) { c.URL = "ftp://example.com/x" }, "not an absolute http or https address"},
		{"a missing name is rejected", func(c *EndpointConfig) { c.Name = "" }, "name is empty"},
		{"a secret without the prefix is rejected", func(c *EndpointConfig) {
			c.Secrets = []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
		}, `secrets[0]: secret does not start with "whsec_"`},
		{"a secret that is not base64 is rejected", func(c *EndpointConfig) {
			c.Secrets = []string{specSecret, "whsec_MfKQ9r8G*YqrTwjUPD8ILPZIo2LaLaSw"}
		}, `secrets[1]: secret after "whsec_" is not valid base64`},
		{"a secret shorter than 24 bytes is rejected", func(c *EndpointConfig) { c.Secrets = []string{short} },
			"secrets[0]: secret decodes to 16 bytes, fewer than 24"},
		{"a bad glob is rejected", func(c *EndpointConfig) { c.Filter.EventTypes = []string{"order.[a"} },
			`filter.event_types[0] "order.[a" is not a valid glob pattern`},
		{"a negative timeout is rejected", func(c *EndpointConfig) { c.Timeout = -time.Second }, "timeout -1s is negative"},
		{"a negative rate limit is rejected", func(c *EndpointConfig) { c.RateLimit = -1 }, "rate_limit -1 is negative"},
		{"an unknown body mode is rejected", func(c *EndpointConfig) { c.Body = "xml" }, `body "xml" is not "raw" or "envelope"`},
		{"a reserved header is rejected", func(c *EndpointConfig) { c.Headers = map[string]string{"webhook-id": "x"} },
			`headers: "webhook-id" is set by the sink itself`},
		{"a header name with a space is rejected", func(c *EndpointConfig) { c.Headers = map[string]string{"X Bad": "x"} },
			`headers: "X Bad" is not a valid HTTP header name`},
		{"max_backoff below initial_backoff is rejected", func(c *EndpointConfig) {
			c.Retry.InitialBackoff, c.Retry.MaxBackoff = time.Minute, time.Second
		}, "retry.max_backoff 1s is less than retry.initial_backoff 1m0s"},
		{"negative max_attempts is rejected", func(c *EndpointConfig) { c.Retry.MaxAttempts = -2 }, "retry.max_attempts -2 is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.modify(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want it to contain %q", err, tt.want)
			}
			for _, s := range c.Secrets {
				if strings.Contains(err.Error(), strings.TrimPrefix(s, "whsec_")) {
					t.Errorf("the error %q reveals a secret", err)
				}
			}
			if _, err := NewEndpoint(c, nil); err == nil {
				t.Error("NewEndpoint accepted the config")
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	c := EndpointConfig{}.WithDefaults()
	if c.Timeout != 10*time.Second || c.MaxConcurrency != 16 || c.Body != BodyRaw || c.RateLimit != 0 ||
		c.Retry != (RetryConfig{MaxAttempts: 30, MaxAge: 24 * time.Hour, InitialBackoff: time.Second, MaxBackoff: 10 * time.Minute}) {
		t.Errorf("defaults %+v", c)
	}
	e, err := NewEndpoint(EndpointConfig{Name: "n", URL: "http://127.0.0.1:1/"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	// The transport is shared by the endpoints that dial alike, and limits
	// none of them: max_concurrency is the workers' bound.
	if e.transport.MaxConnsPerHost != 0 || e.transport.IdleConnTimeout != idleConnTimeout {
		t.Errorf("MaxConnsPerHost = %d, IdleConnTimeout = %s, want 0 and %s", e.transport.MaxConnsPerHost, e.transport.IdleConnTimeout, idleConnTimeout)
	}
}

func TestRetryAfterIsParsedByRetryablehttp(t *testing.T) {
	in30s := time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)
	tests := []struct {
		name     string
		value    string
		min, max time.Duration
		ok       bool
	}{
		{"seconds", "120", 2 * time.Minute, 2 * time.Minute, true},
		{"zero seconds", "0", 0, 0, true},
		{"an HTTP date", in30s, 28 * time.Second, 30 * time.Second, true},
		{"a past HTTP date is no wait", "Fri, 01 May 2026 11:00:00 GMT", 0, 0, true},
		{"negative seconds are ignored", "-5", 0, 0, false},
		{"garbage is ignored", "soon", 0, 0, false},
		{"empty is ignored", "", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{"Retry-After": {tt.value}}}
			got, ok := retryAfter(resp)
			if ok != tt.ok || ok && (got < tt.min || got > tt.max) {
				t.Errorf("retryAfter(%q) = %s, %v; want [%s, %s], %v", tt.value, got, ok, tt.min, tt.max, tt.ok)
			}
		})
	}
}

func TestClassifyCapsRetryAfterAtMaxBackoff(t *testing.T) {
	for _, code := range []int{429, 503} {
		resp := &http.Response{StatusCode: code, Header: http.Header{"Retry-After": {"3600"}}}
		o := classify(resp, nil, time.Now(), 200*time.Millisecond, nil)
		if o.kind != retryable || !o.hasRetryAfter || o.retryAfter != 200*time.Millisecond {
			t.Errorf("%d: %+v, want a retry after 200ms", code, o)
		}
	}
	// Other retriable statuses ignore Retry-After.
	resp := &http.Response{StatusCode: 502, Header: http.Header{"Retry-After": {"1"}}}
	if o := classify(resp, nil, time.Now(), time.Minute, nil); o.kind != retryable || o.hasRetryAfter {
		t.Errorf("502: %+v", o)
	}
	for code, want := range map[int]outcomeKind{200: delivered, 204: delivered, 301: permanent, 308: permanent,
		400: permanent, 401: permanent, 404: permanent, 408: retryable, 410: gone, 422: permanent, 500: retryable, 504: retryable} {
		if o := classify(&http.Response{StatusCode: code, Header: http.Header{}}, nil, time.Now(), time.Minute, nil); o.kind != want {
			t.Errorf("%d classified %v, want %v", code, o.kind, want)
		}
	}
}

func TestRetryWaitIsTheRelaysPolicyWithTheEndpointsBounds(t *testing.T) {
	e := &Endpoint{cfg: EndpointConfig{Retry: RetryConfig{MaxAttempts: 2000, MaxAge: 1000 * time.Hour,
		InitialBackoff: time.Second, MaxBackoff: 10 * time.Minute}}}
	ceilings := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	now := time.Now()
	for attempts, ceiling := range ceilings {
		for range 200 {
			d := &delivery{attempts: attempts + 1, first: now}
			if w, ok := e.retryWait(d, outcome{kind: retryable}, now); !ok || w < ceiling/2 || w > ceiling {
				t.Fatalf("after %d attempts: wait %s, want within [%s, %s]", attempts+1, w, ceiling/2, ceiling)
			}
		}
	}
	for range 200 {
		d := &delivery{attempts: 1000, first: now}
		if w, _ := e.retryWait(d, outcome{kind: retryable}, now); w > 10*time.Minute || w < 5*time.Minute {
			t.Fatalf("after 1000 attempts: wait %s, want within [5m, 10m]", w)
		}
	}
}

func TestRetryWaitRespectsMaxAge(t *testing.T) {
	e := &Endpoint{cfg: EndpointConfig{Retry: RetryConfig{MaxAttempts: 10, MaxAge: time.Minute,
		InitialBackoff: time.Hour, MaxBackoff: time.Hour}}}
	first := time.Now()
	d := &delivery{attempts: 1, first: first}
	if w, ok := e.retryWait(d, outcome{}, first.Add(50*time.Second)); !ok || w > 10*time.Second {
		t.Errorf("wait %s, %v; want at most the 10s left of max_age", w, ok)
	}
	if _, ok := e.retryWait(d, outcome{}, first.Add(time.Minute)); ok {
		t.Error("retry allowed after max_age")
	}
	d.attempts = 10
	if _, ok := e.retryWait(d, outcome{}, first); ok {
		t.Error("retry allowed after max_attempts")
	}
}

func TestRateLimitSpacesAttempts(t *testing.T) {
	srv := newServer(t, nil, ok)
	cfg := testConfig(srv.URL)
	cfg.RateLimit = 20 // one attempt per 50ms, no burst
	e := newEndpoint(t, cfg)
	var batch []*event.Event
	for i := range 5 {
		batch = append(batch, ev(fmt.Sprint("e", i), fmt.Sprint("agg-", i)))
	}
	if err := write(t, e, batch...); err != nil {
		t.Fatal(err)
	}
	reqs := srv.requests()
	if len(reqs) != 5 {
		t.Fatalf("%d requests, want 5", len(reqs))
	}
	// Only a lower bound: the limiter never lets attempts through early.
	if span := reqs[4].at.Sub(reqs[0].at); span < 150*time.Millisecond {
		t.Errorf("5 attempts at 20/s spanned %s, want at least 150ms", span)
	}
}

// A permanent failure holds its aggregate's lane until the ack returns: the
// pipeline decides there, and with no dead-letter store it ends the Submit
// ctx, so the aggregate's later events are never sent ahead of the failed
// one (they would be sent again, after it, once restarted). Other aggregates
// are not held.
func TestAPermanentFailureHoldsItsAggregateUntilTheAckReturns(t *testing.T) {
	tests := []struct {
		name string
		// stop: the ack of the failed event ends the Submit ctx, as the
		// pipeline does with no dead-letter store.
		stop     bool
		wantSent []string
	}{
		{name: "the stream goes on: the next event is sent after the ack returned", stop: false, wantSent: []string{"a1", "a2", "b1"}},
		{name: "the stream stops: the next event is never sent", stop: true, wantSent: []string{"a1", "b1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ackReturned atomic.Bool
			var sentBeforeAck atomic.Int64
			srv := newServer(t, nil, func(w http.ResponseWriter, _ *http.Request, req request) {
				if req.id == "a2" && !ackReturned.Load() {
					sentBeforeAck.Add(1)
				}
				if req.id == "a1" {
					w.WriteHeader(http.StatusBadRequest)
					return
				}
				w.WriteHeader(http.StatusOK)
			})
			e := newEndpoint(t, testConfig(srv.URL))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			results := make(chan string, 3)
			batch := []*event.Event{ev("a1", "a"), ev("a2", "a"), ev("b1", "b")}
			e.Submit(ctx, batch, func(i int, err error) {
				if batch[i].ID == "a1" {
					time.Sleep(200 * time.Millisecond) // a slow decision (a dead-letter write)
					if tc.stop {
						cancel()
					}
					ackReturned.Store(true)
				}
				results <- fmt.Sprintf("%s:%v", batch[i].ID, err != nil)
			})
			for range 3 {
				select {
				case <-results:
				case <-time.After(10 * time.Second):
					t.Fatal("not every event was acknowledged")
				}
			}
			var sent []string
			for _, r := range srv.requests() {
				sent = append(sent, r.id)
			}
			slices.Sort(sent)
			if !slices.Equal(sent, tc.wantSent) {
				t.Errorf("requests %v, want %v", sent, tc.wantSent)
			}
			if n := sentBeforeAck.Load(); n > 0 {
				t.Errorf("a2 was sent %d times before a1's ack returned", n)
			}
		})
	}
}

// Errors no retry can fix fail at once, on the first attempt, as go-retryablehttp's
// DefaultRetryPolicy says: an untrusted certificate, an invalid header value.
func TestRequestErrorsThatCannotSucceedAreNotRetried(t *testing.T) {
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) }))
	t.Cleanup(tlsSrv.Close)
	plain := newServer(t, nil, ok)
	tests := []struct {
		name    string
		cfg     func() EndpointConfig
		want    string
		reqsMax int
	}{
		{
			name: "an untrusted certificate",
			cfg:  func() EndpointConfig { return testConfig(tlsSrv.URL) },
			want: "certificate",
		},
		{
			name: "an invalid header value",
			cfg: func() EndpointConfig {
				c := testConfig(plain.URL)
				c.Headers = map[string]string{"X-Tenant": "a\x01b"}
				return c
			},
			want: "invalid header",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obs := &countingObserver{}
			cfg := tc.cfg()
			cfg.Observer = obs
			e := newEndpoint(t, cfg)
			errs := permanentErrors(t, write(t, e, ev("e1", "a")), 0)
			var de *DeliveryError
			if !errors.As(errs[0], &de) || de.Attempts != 1 || !strings.Contains(errs[0].Error(), tc.want) {
				t.Fatalf("error %v (%+v), want a failure after 1 attempt mentioning %q", errs[0], de, tc.want)
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if !slices.Equal(obs.failed, []string{ReasonRequest}) {
				t.Errorf("observer failures %v, want [%s]", obs.failed, ReasonRequest)
			}
		})
	}
	if n := len(plain.requests()); n != 0 {
		t.Errorf("the plain server got %d requests with an invalid header", n)
	}
}

// An endpoint that refused connections and comes back is noticed by the
// probe within about a second, whatever the events' backoff: here the first
// retry alone would wait at least 30s; the events arrive, in order, well
// within the 20s the test allows. The recovery time is logged.
func TestAnEndpointThatComesBackIsNoticedByTheProbe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // down: connections are refused

	var mu sync.Mutex
	var got []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("webhook-id"))
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	cfg := testConfig("http://" + addr + "/hook")
	cfg.Retry = RetryConfig{MaxAttempts: 30, InitialBackoff: time.Minute, MaxBackoff: time.Hour}
	e := newEndpoint(t, cfg)

	result := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() { result <- e.Write(ctx, []*event.Event{ev("e1", "a"), ev("e2", "a"), ev("e3", "b")}) }()
	time.Sleep(1500 * time.Millisecond) // every event has failed once and waits ≥ 30s

	for try := 0; ; try++ {
		l, err := net.Listen("tcp", addr)
		if err == nil {
			srv.Listener = l
			break
		}
		if try == 50 {
			t.Fatalf("listen again on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	back := time.Now()
	if err := <-result; err != nil {
		t.Fatalf("Write = %v, want every event delivered once the endpoint is back", err)
	}
	t.Logf("endpoint back → every event delivered: %s", time.Since(back).Round(time.Millisecond))
	mu.Lock()
	defer mu.Unlock()
	if i1, i2 := slices.Index(got, "e1"), slices.Index(got, "e2"); i1 < 0 || i2 < i1 || !slices.Contains(got, "e3") {
		t.Fatalf("received %v, want e1 before e2, and e3", got)
	}
}

// An idle endpoint runs no goroutine: workers start when events are due and
// end when none is, so 10,000 configured endpoints of a gateway do not hold
// max_concurrency goroutines each.
func TestIdleEndpointsRunNoGoroutines(t *testing.T) {
	const endpoints = 50
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	before := runtime.NumGoroutine()
	var eps []*Endpoint
	for i := range endpoints {
		cfg := testConfig(srv.URL)
		cfg.Name = fmt.Sprintf("idle-%d", i)
		cfg.MaxConcurrency = 16
		eps = append(eps, newEndpoint(t, cfg))
	}
	if n := runtime.NumGoroutine() - before; n > 0 {
		t.Fatalf("%d connected idle endpoints run %d goroutines, want none", endpoints, n)
	}
	// After each delivered a batch, their workers end; only the idle
	// keep-alive connections (closed here) held goroutines.
	for i, e := range eps {
		var batch []*event.Event
		for k := range 20 {
			batch = append(batch, ev(fmt.Sprintf("e%d-%d", i, k), fmt.Sprintf("agg-%d", k)))
		}
		if err := write(t, e, batch...); err != nil {
			t.Fatal(err)
		}
	}
	srv.CloseClientConnections()
	// Ending goroutines may take a while on a loaded machine: the check is
	// of what the count comes down to (the minute only guards a hang).
	eventually.Within(t, time.Minute, "the idle endpoints' goroutines to end", func() bool {
		for _, e := range eps {
			e.transport.CloseIdleConnections()
		}
		return runtime.NumGoroutine()-before <= 2
	}, func() {
		t.Logf("%d idle endpoints still run %d goroutines after delivering, want none", endpoints, runtime.NumGoroutine()-before)
	})
}

// workerCounts is e's workers: running (lingering ones included), waiting
// for a lane head, and started in all.
func workerCounts(e *Endpoint) (running, waiting, spawned int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.running, len(e.idle), e.spawned
}

// untilWorkers waits, 10 s at most, for ok to hold of e's workerCounts.
func untilWorkers(t *testing.T, e *Endpoint, what string, ok func(running, waiting, spawned int) bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(workerCounts(e)); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			r, w, s := workerCounts(e)
			t.Fatalf("%s: %d workers run, %d wait, %d started", what, r, w, s)
		}
	}
}

// A worker with nothing due lingers at a steady rate (it was started within
// its linger of the end of the last): the next events are handed to it
// instead of starting a goroutine each, and Close ends it without waiting
// its linger out. (With a linger of an hour, a Close that waited for it
// would fail.) The first worker, with none ended before it, does not linger.
func TestALingeringWorkerTakesTheNextEvent(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	e, err := NewEndpoint(testConfig(srv.URL), nil)
	if err != nil {
		t.Fatal(err)
	}
	e.linger = time.Hour
	if err := e.Connect(t.Context()); err != nil {
		t.Fatal(err)
	}
	workers := func() (running, waiting, spawned int) { return workerCounts(e) }
	if err := write(t, e, ev("e0", "agg")); err != nil {
		t.Fatal(err)
	}
	untilWorkers(t, e, "the first worker ends", func(r, _, _ int) bool { return r == 0 })
	for i := 1; i <= 3; i++ {
		if err := write(t, e, ev(fmt.Sprintf("e%d", i), "agg")); err != nil {
			t.Fatal(err)
		}
		untilWorkers(t, e, fmt.Sprintf("after event %d, one worker waits", i), func(_, w, _ int) bool { return w == 1 })
	}
	if running, _, spawned := workers(); spawned != 2 || running != 1 {
		t.Fatalf("4 events one after another started %d workers (%d running), want 2 (1 running)", spawned, running)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Fatalf("Close with a lingering worker: %v", err)
	}
	if running, _, _ := workers(); running != 0 {
		t.Fatalf("%d workers run after Close, want 0", running)
	}
}

// At a steady rate an event often comes while the lingering worker's
// request is still under way: a second worker lingers then too, so the
// next two events wake the two instead of starting a goroutine (each grew
// its stack again on its way into the HTTP client).
func TestTwoWorkersLingerBesideEachOther(t *testing.T) {
	hold := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("webhook-id") == "held" {
			<-hold
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	e := newEndpoint(t, testConfig(srv.URL))
	e.linger = time.Hour
	workers := func() (running, waiting, spawned int) { return workerCounts(e) }
	if err := write(t, e, ev("e0", "a")); err != nil {
		t.Fatal(err)
	}
	untilWorkers(t, e, "the first worker ends", func(r, _, _ int) bool { return r == 0 })
	held := make(chan error, 1)
	go func() { held <- write(t, e, ev("held", "a")) }() // its worker lingers, once done
	untilWorkers(t, e, "the held request's worker runs", func(r, _, _ int) bool { return r == 1 })
	if err := write(t, e, ev("e1", "b")); err != nil { // a second worker
		t.Fatal(err)
	}
	close(hold)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	untilWorkers(t, e, "both workers wait", func(r, w, _ int) bool { return r == w })
	if running, waiting, _ := workers(); waiting != 2 {
		t.Fatalf("after two events at once, %d workers wait of %d running, want 2 (lingerers)", waiting, running)
	}
	for i := range 2 {
		if err := write(t, e, ev(fmt.Sprintf("e%d", 2+i), fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, spawned := workers(); spawned != 3 {
		t.Fatalf("5 events, two at once, started %d workers, want 3", spawned)
	}
}

// A worker whose linger is over ends: an endpoint with no event for a while
// runs none, whether its worker lingered (started within its linger of the
// last one's end) or not.
func TestAWorkerEndsOnceItsLingerIsOver(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	e := newEndpoint(t, testConfig(srv.URL))
	e.linger = time.Second // the second worker lingers, however loaded the machine
	running := func() int {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.running + len(e.idle)
	}
	for i := range 2 {
		if err := write(t, e, ev(fmt.Sprintf("e%d", i), "a")); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); running() != 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d workers still run 10s after event %d, want none", running(), i)
			}
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.spawned != 2 {
		t.Fatalf("2 events started %d workers, want 2", e.spawned)
	}
}
