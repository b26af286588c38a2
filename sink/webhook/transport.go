package webhook

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// idleConnTimeout closes a kept-alive connection unused this long: an idle
// connection costs the relay two goroutines and its buffers (about 30 KB),
// and receivers behind common load balancers drop theirs after 60 s, so a
// connection kept longer would often be found closed anyway.
const idleConnTimeout = 30 * time.Second

// maxIdlePerHost caps the kept-alive connections to one host left unused at
// once (four endpoints' default max_concurrency): a burst to thousands of
// endpoints on one host opens thousands of connections, and without a cap
// every one of them, two goroutines and about 30 KB each, would stay for
// idleConnTimeout after it. A connection put back beyond the cap is closed;
// the requests in flight to a host are not capped by it (the workers are).
const maxIdlePerHost = 64

// The endpoints whose connections are made alike share one http.Transport,
// and so its pool of kept-alive connections per host: alike means the same
// egress policy (the dialer and whether a proxy may be used) and no
// resolver of their own; TLS settings are the defaults for every endpoint.
// A quiet endpoint then keeps no connection of its own: one kept alive
// for another endpoint on its host serves it too. The transport limits no
// endpoint: each endpoint's workers (max_concurrency) bound its requests,
// and so its connections; the idle ones to a host are at most the requests
// that were in flight to it at once, and at most maxIdlePerHost, until
// idleConnTimeout closes them.
var transports = struct {
	mu sync.Mutex
	m  map[string]*sharedTransport
}{m: map[string]*sharedTransport{}}

type sharedTransport struct {
	tr    *http.Transport
	users int
}

// transportFor returns the transport for an endpoint with policy p, whose
// connections dial makes, and the function the endpoint calls once it is
// closed. An endpoint with a resolver of its own (tests) gets a transport
// of its own.
func transportFor(p *egressPolicy, ownResolver bool, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*http.Transport, func()) {
	newTransport := func() *http.Transport {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if p.deny || ownResolver {
			tr.DialContext = dial
		}
		if p.deny {
			tr.Proxy = nil // a proxy would hide the destination's address from the policy
		}
		tr.MaxConnsPerHost = 0 // the endpoints' workers bound their requests
		tr.MaxIdleConns = 0
		tr.MaxIdleConnsPerHost = maxIdlePerHost
		tr.IdleConnTimeout = idleConnTimeout
		// No "Accept-Encoding: gzip" of the transport's own: an answer's
		// body is read only to reuse the connection, or to quote its start
		// (a failure, the attempts record), so asking for it compressed
		// buys nothing and costs the header, built and written per request.
		tr.DisableCompression = true
		return tr
	}
	if ownResolver {
		tr := newTransport()
		return tr, tr.CloseIdleConnections
	}
	key := p.key()
	transports.mu.Lock()
	defer transports.mu.Unlock()
	s := transports.m[key]
	if s == nil {
		s = &sharedTransport{tr: newTransport()}
		transports.m[key] = s
	}
	s.users++
	var once sync.Once
	return s.tr, func() {
		once.Do(func() {
			transports.mu.Lock()
			defer transports.mu.Unlock()
			if s.users--; s.users == 0 {
				delete(transports.m, key)
				s.tr.CloseIdleConnections()
			}
		})
	}
}

// key identifies the policy's dialing: equal keys dial alike.
func (p *egressPolicy) key() string {
	var b strings.Builder
	b.WriteString(strconv.FormatBool(p.deny))
	b.WriteByte(0)
	b.WriteString(p.allowKey)
	for _, n := range p.nets {
		b.WriteByte(0)
		b.WriteString(n.String())
	}
	b.WriteByte(1)
	for _, h := range p.hosts {
		b.WriteByte(0)
		b.WriteString(h)
	}
	return b.String()
}
