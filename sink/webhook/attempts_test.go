package webhook

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
)

// recorder is an attempts.Recorder that keeps what it is told.
type recorder struct {
	mu  sync.Mutex
	all []attempts.Attempt
}

func (r *recorder) Record(a attempts.Attempt) {
	r.mu.Lock()
	r.all = append(r.all, a)
	r.mu.Unlock()
}

// wait returns the first n attempts once there are n.
func (r *recorder) wait(t *testing.T, n int) []attempts.Attempt {
	t.Helper()
	var got []attempts.Attempt
	eventually.Within(t, 20*time.Second, "the attempts recorded", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		got = append([]attempts.Attempt(nil), r.all...)
		return len(got) >= n
	})
	return got[:n]
}

func recordingConfig(url string, rec *recorder) EndpointConfig {
	cfg := testConfig(url)
	cfg.Attempts, cfg.Sink, cfg.Tenant = rec, "wh", "acme"
	return cfg
}

// An endpoint that answers 500 and then 200 reports both attempts, in
// order, with their codes, durations, the 500's answer (the echoed secret
// hidden), and where the event came from.
func TestEveryAttemptIsRecorded(t *testing.T) {
	var calls int
	var mu sync.Mutex
	srv := newServer(t, nil, func(w http.ResponseWriter, r *http.Request, _ request) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			// A receiver that echoes the request's Authorization.
			w.Write([]byte("database is down; auth was " + r.Header.Get("Authorization") + strings.Repeat(".", 2000)))
			return
		}
		w.Write([]byte(`{"ok":true}`))
	})
	rec := &recorder{}
	cfg := recordingConfig(srv.URL, rec)
	cfg.Headers = map[string]string{"Authorization": "Bearer s3cr3t-t0ken"}
	e := newEndpoint(t, cfg)
	x := ev("e1", "a")
	x.Source = event.Source{GTID: "0-1-42", File: "mysql-bin.000003", Pos: 4242}
	x.Headers = []event.Header{{Key: event.HeaderReplay, Value: "job-7"}}
	before := time.Now()
	if err := write(t, e, x); err != nil {
		t.Fatal(err)
	}
	got := rec.wait(t, 2)
	first, second := got[0], got[1]
	for i, a := range got {
		if a.Sink != "wh" || a.Endpoint != "test" || a.Tenant != "acme" || a.EventID != "e1" || a.EventType != "order.created" ||
			a.Number != i+1 || a.Replay != "job-7" || !a.Committed.Equal(x.CommitTime) || a.GTID != "0-1-42" ||
			a.File != "mysql-bin.000003" || a.Pos != 4242 || a.Duration <= 0 || a.Time.Before(before) || a.Class != "" {
			t.Errorf("attempt %d: %+v", i+1, a)
		}
	}
	if first.Status != 500 || first.Outcome != attempts.OutcomeRetry || !strings.Contains(first.Error, "500") {
		t.Errorf("first attempt: status %d, outcome %s, error %q; want 500, retry", first.Status, first.Outcome, first.Error)
	}
	if !bytes.HasPrefix(first.Answer, []byte("database is down; auth was [redacted]...")) || len(first.Answer) != attempts.AnswerLimit {
		t.Errorf("first answer %q (%d bytes), want the start of the body, %d bytes, the token hidden", first.Answer[:min(len(first.Answer), 60)], len(first.Answer), attempts.AnswerLimit)
	}
	if bytes.Contains(first.Answer, []byte("s3cr3t")) {
		t.Error("the answer keeps the echoed secret")
	}
	if second.Status != 200 || second.Outcome != attempts.OutcomeDelivered || string(second.Answer) != `{"ok":true}` || second.Error != "" {
		t.Errorf("second attempt: %+v", second)
	}
	if !first.Time.Before(second.Time) {
		t.Errorf("first at %s, second at %s", first.Time, second.Time)
	}
}

// Attempts that got no answer, or were never sent, say why with a class.
func TestAnAttemptWithoutAnAnswerIsRecordedWithItsClass(t *testing.T) {
	t.Run("refused by the egress policy", func(t *testing.T) {
		srv := newServer(t, nil, ok)
		res := &fakeResolver{}
		res.set("hooks.example.com", "127.0.0.1")
		rec := &recorder{}
		cfg := recordingConfig(hookURL(t, srv), rec)
		cfg.FromData, cfg.Resolver = true, res
		e := newEndpoint(t, cfg)
		permanentErrors(t, write(t, e, ev("e1", "a")), 0)
		a := rec.wait(t, 1)[0]
		if a.Class != attempts.ClassEgress || a.Status != 0 || a.Outcome != attempts.OutcomeFailed || a.Number != 1 ||
			!strings.Contains(a.Error, "egress policy refuses") {
			t.Errorf("%+v, want class egress, failed", a)
		}
		if n := len(srv.requests()); n != 0 {
			t.Errorf("the receiver got %d requests", n)
		}
	})
	t.Run("a timeout", func(t *testing.T) {
		release := make(chan struct{})
		srv := newServer(t, nil, func(w http.ResponseWriter, r *http.Request, _ request) {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		})
		defer close(release)
		rec := &recorder{}
		cfg := recordingConfig(srv.URL, rec)
		cfg.Timeout, cfg.Retry.MaxAttempts = 100*time.Millisecond, 2
		e := newEndpoint(t, cfg)
		permanentErrors(t, write(t, e, ev("e1", "a")), 0)
		got := rec.wait(t, 2)
		for i, a := range got {
			want := []string{attempts.OutcomeRetry, attempts.OutcomeFailed}[i]
			if a.Class != attempts.ClassTimeout || a.Status != 0 || a.Outcome != want || a.Number != i+1 || a.Duration < 100*time.Millisecond {
				t.Errorf("attempt %d: %+v, want class timeout, outcome %s", i+1, a, want)
			}
		}
	})
	t.Run("a refused connection", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		rec := &recorder{}
		cfg := recordingConfig("http://"+addr+"/in", rec)
		cfg.Retry.MaxAttempts = 1
		e := newEndpoint(t, cfg)
		permanentErrors(t, write(t, e, ev("e1", "a")), 0)
		if a := rec.wait(t, 1)[0]; a.Class != attempts.ClassConnection || a.Outcome != attempts.OutcomeFailed {
			t.Errorf("%+v, want class connection, failed", a)
		}
	})
	t.Run("an untrusted certificate", func(t *testing.T) {
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
		defer srv.Close()
		rec := &recorder{}
		e := newEndpoint(t, recordingConfig(srv.URL, rec))
		permanentErrors(t, write(t, e, ev("e1", "a")), 0)
		if a := rec.wait(t, 1)[0]; a.Class != attempts.ClassTLS || a.Outcome != attempts.OutcomeFailed {
			t.Errorf("%+v, want class tls, failed", a)
		}
	})
	t.Run("a request that cannot be made", func(t *testing.T) {
		srv := newServer(t, nil, ok)
		rec := &recorder{}
		e := newEndpoint(t, recordingConfig(srv.URL, rec))
		permanentErrors(t, write(t, e, ev("e\n1", "a")), 0)
		if a := rec.wait(t, 1)[0]; a.Class != attempts.ClassRequest || a.Outcome != attempts.OutcomeFailed || a.Status != 0 {
			t.Errorf("%+v, want class request, failed", a)
		}
	})
	t.Run("a 4xx is a status, not a class", func(t *testing.T) {
		srv := newServer(t, nil, func(w http.ResponseWriter, _ *http.Request, _ request) {
			w.WriteHeader(http.StatusUnprocessableEntity)
			w.Write([]byte(`{"error":"bad amount"}`))
		})
		rec := &recorder{}
		e := newEndpoint(t, recordingConfig(srv.URL, rec))
		permanentErrors(t, write(t, e, ev("e1", "a")), 0)
		if a := rec.wait(t, 1)[0]; a.Class != "" || a.Status != 422 || a.Outcome != attempts.OutcomeFailed || string(a.Answer) != `{"error":"bad amount"}` {
			t.Errorf("%+v, want status 422, failed, with its answer", a)
		}
	})
}
