package webhook

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

// Endpoints that dial alike share a transport (and its kept-alive
// connections); one with another egress policy has its own; the last to
// close lets the shared one go.
func TestEndpointsThatDialAlikeShareATransport(t *testing.T) {
	mk := func(name string, eg Egress) *Endpoint {
		e, err := NewEndpoint(EndpointConfig{Name: name, URL: "http://hooks.example.com/" + name, Egress: eg}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	a, b := mk("a", Egress{}), mk("b", Egress{})
	c := mk("c", Egress{DenyPrivate: true})
	d := mk("d", Egress{DenyPrivate: true, Allow: []string{"10.0.0.0/8"}})
	if a.transport != b.transport {
		t.Error("two endpoints without a policy have a transport each, want one shared")
	}
	if c.transport == a.transport || d.transport == c.transport {
		t.Error("endpoints of different egress policies share a transport")
	}
	key := a.egress.key()
	for _, e := range []*Endpoint{a, c, d} {
		if err := e.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	transports.mu.Lock()
	s := transports.m[key]
	transports.mu.Unlock()
	if s == nil || s.tr != b.transport || s.users != 1 {
		t.Fatalf("after a closed, the shared transport is %+v, want b's with one user", s)
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	transports.mu.Lock()
	defer transports.mu.Unlock()
	if transports.m[key] != nil {
		t.Fatal("the shared transport is kept after its last endpoint closed")
	}
}

// On a shared transport, each endpoint's max_concurrency still bounds its
// own requests, and each reaches it: the transport limits none.
func TestSharedTransportKeepsEachEndpointsConcurrency(t *testing.T) {
	var mu sync.Mutex
	now, most := map[string]int{}, map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/")
		mu.Lock()
		now[name]++
		most[name] = max(most[name], now[name])
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		now[name]--
		mu.Unlock()
	}))
	defer srv.Close()
	limits := map[string]int{"two": 2, "five": 5}
	var eps []*Endpoint
	var wg sync.WaitGroup
	for name, n := range limits {
		cfg := testConfig(srv.URL + "/" + name)
		cfg.Name, cfg.MaxConcurrency = name, n
		e := newEndpoint(t, cfg)
		eps = append(eps, e)
		var batch []*event.Event
		for j := range 20 {
			batch = append(batch, ev(fmt.Sprintf("%s-%d", name, j), fmt.Sprintf("agg-%d", j)))
		}
		wg.Go(func() {
			if err := e.Write(context.Background(), batch); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	wg.Wait()
	if eps[0].transport != eps[1].transport {
		t.Fatal("the endpoints do not share a transport: the test proves nothing")
	}
	mu.Lock()
	defer mu.Unlock()
	for name, n := range limits {
		if most[name] != n {
			t.Errorf("%s had at most %d requests in flight, want its max_concurrency %d", name, most[name], n)
		}
	}
}

// countingConn counts the writes made on a connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int32
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// A request goes out in one write, its headers and body together: net/http
// flushes the headers on their own before a body it does not know is in
// memory, which costs a system call per request.
func TestARequestIsOneWrite(t *testing.T) {
	srv := newServer(t, nil, ok)
	e := newEndpoint(t, testConfig(srv.URL))
	var writes atomic.Int32
	tr := e.transport.Clone()
	dial := (&net.Dialer{}).DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &writes}, nil
	}
	t.Cleanup(tr.CloseIdleConnections)
	e.transport = tr
	for i := range 3 {
		if err := write(t, e, ev(fmt.Sprintf("e%d", i), "a")); err != nil {
			t.Fatal(err)
		}
	}
	if n := writes.Load(); n != 3 {
		t.Errorf("%d writes for 3 requests, want 3", n)
	}
}

// After a burst of more requests to one host than maxIdlePerHost, the
// connections beyond it are closed as they come back, not kept unused
// for idleConnTimeout (each costs the relay two goroutines and its
// buffers: thousands after a burst to thousands of endpoints on one host).
func TestABurstLeavesAtMostMaxIdlePerHostConnections(t *testing.T) {
	const n = maxIdlePerHost + 16
	var open, inFlight atomic.Int32
	all := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if inFlight.Add(1) == n {
			close(all)
		}
		<-all // every request is in flight at once: n connections
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	srv.Start()
	defer srv.Close()
	cfg := testConfig(srv.URL)
	cfg.MaxConcurrency = n
	e := newEndpoint(t, cfg)
	var batch []*event.Event
	for j := range n {
		batch = append(batch, ev(fmt.Sprintf("e%d", j), fmt.Sprintf("agg-%d", j)))
	}
	if err := e.Write(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("at most %d connections left open after %d requests at once (%d open)", maxIdlePerHost, n, open.Load()),
		func() bool { return open.Load() <= maxIdlePerHost })
}
