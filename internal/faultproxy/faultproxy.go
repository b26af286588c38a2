// Package faultproxy is a loopback TCP proxy for tests that injects network
// faults between a client (the relay) and a server (mariadbd, a Kafka broker,
// a webhook endpoint) without touching either.
//
// Faults, each switched on and off while connections are open:
//
//   - CutSilently: nothing is forwarded any more, in either direction, and
//     no FIN or RST is sent: bytes are read and dropped, as a network that
//     loses every packet (a pulled cable, a firewall dropping a flow, a NAT
//     entry expired). New connections are accepted and black-holed too. Only
//     the client's own timeouts can notice it.
//   - CutHard: every open connection is closed (both sides see EOF), and new
//     ones are closed at once, as a server or middlebox that goes away.
//   - CutHardAfter: n more bytes go upstream (on all connections together),
//     then CutHard: a cut in the middle of a client's write.
//   - SetLatency: each chunk is delivered that long after it was read, in
//     both directions; throughput is not limited.
//   - SetBandwidth: a direction is limited to n bytes per second (a slow
//     reader on the far side, or a thin link).
//   - Restore: new connections are forwarded normally again (and a pending
//     CutHardAfter is dropped). A connection
//     that was silently cut stays dead (the bytes dropped on it are gone, so
//     TCP's stream could not continue): the client must notice and reconnect.
//
// Why hand-written rather than Shopify's toxiproxy v2 used in-process: we need
// six behaviours on one process's loopback; toxiproxy brings an HTTP API
// server, its own logger and metrics dependencies into the module graph for
// them, and its "timeout" toxic (the silent cut) and "limit_data" work per
// toxic and per link rather than as one switch over every open connection,
// which is what a fault scenario flips. This file is the whole proxy (about
// 300 lines, standard library plus golang.org/x/time/rate, already a
// dependency).
//
// A Proxy is safe for concurrent use. Close stops it and waits for its
// goroutines; Start registers Close with t.Cleanup.
package faultproxy

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// Direction is one way through the proxy.
type Direction int

const (
	// Upstream is client to server (what the relay sends).
	Upstream Direction = iota
	// Downstream is server to client (what the relay receives).
	Downstream
)

// Proxy forwards connections from its own loopback address to a target.
type Proxy struct {
	ln net.Listener

	mu        sync.Mutex
	target    string
	silent    bool
	hard      bool
	latency   time.Duration
	limiters  [2]*rate.Limiter
	budget    int // bytes upstream before a hard cut, when budgetOn
	budgetOn  bool
	conns     map[*link]struct{}
	accepted  int
	closed    bool
	wg        sync.WaitGroup
	dropped   atomic.Int64
	forwarded atomic.Int64
}

// link is one proxied connection.
type link struct {
	client, server net.Conn
	dead           atomic.Bool // silently cut: drop everything from now on
	once           sync.Once
}

func (l *link) close() {
	l.once.Do(func() {
		l.client.Close()
		if l.server != nil {
			l.server.Close()
		}
	})
}

// Start listens on a free loopback port, forwards to target (set it later
// with SetTarget when it is not known yet), and closes the proxy when the
// test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := Listen(target)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// Listen is Start without a test; the caller must Close.
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address ("127.0.0.1:port"): point the client here.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// SetTarget sets the address new connections are forwarded to.
func (p *Proxy) SetTarget(addr string) {
	p.mu.Lock()
	p.target = addr
	p.mu.Unlock()
}

// Advertise wraps a server's listener so that it reports the proxy's address
// as its own: a Kafka broker (kfake.ListenFn) then advertises the proxy in its
// metadata, and clients keep going through the proxy after bootstrapping.
// The proxy forwards to the wrapped listener's real address.
func (p *Proxy) Advertise(l net.Listener) net.Listener {
	p.SetTarget(l.Addr().String())
	return advertised{Listener: l, addr: p.ln.Addr()}
}

type advertised struct {
	net.Listener
	addr net.Addr
}

func (a advertised) Addr() net.Addr { return a.addr }

// CutSilently stops forwarding on every open and new connection, sending no
// FIN or RST: bytes are read and dropped.
func (p *Proxy) CutSilently() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.silent = true
	for l := range p.conns {
		l.dead.Store(true)
	}
}

// CutHard closes every open connection and closes new ones at once.
func (p *Proxy) CutHard() {
	p.mu.Lock()
	p.hard = true
	conns := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		conns = append(conns, l)
	}
	p.mu.Unlock()
	for _, l := range conns {
		l.close()
	}
}

// CutHardAfter lets n more bytes through upstream (client to server), on
// every connection together, and then cuts hard: the connection that sent
// the n-th byte is closed right after it, every other one with it.
func (p *Proxy) CutHardAfter(n int) {
	p.mu.Lock()
	p.budget, p.budgetOn = max(n, 0), true
	p.mu.Unlock()
}

// spend takes up to n bytes from the upstream budget: it returns how many
// may go, and whether the proxy must cut hard after them.
func (p *Proxy) spend(n int) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.budgetOn {
		return n, false
	}
	if n >= p.budget {
		n, p.budgetOn = p.budget, false
		return n, true
	}
	p.budget -= n
	return n, false
}

// Restore forwards new connections normally again and drops a pending
// CutHardAfter; latency and bandwidth limits stay as set. Silently cut
// connections stay dead.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.silent, p.hard, p.budgetOn = false, false, false
	p.mu.Unlock()
}

// SetLatency delays every chunk by d in both directions (0: none).
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// SetBandwidth limits dir to bytesPerSecond on every connection together
// (0: unlimited).
func (p *Proxy) SetBandwidth(dir Direction, bytesPerSecond int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if bytesPerSecond <= 0 {
		p.limiters[dir] = nil
		return
	}
	p.limiters[dir] = rate.NewLimiter(rate.Limit(bytesPerSecond), min(bytesPerSecond, chunkSize))
}

// Stats reports the connections accepted so far, and the bytes forwarded and
// dropped (by a silent cut).
func (p *Proxy) Stats() (accepted int, forwarded, dropped int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted, p.forwarded.Load(), p.dropped.Load()
}

// Close stops listening, closes every connection and waits for the proxy's
// goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	conns := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		conns = append(conns, l)
	}
	p.mu.Unlock()
	p.ln.Close()
	for _, l := range conns {
		l.close()
	}
	p.wg.Wait()
}

const chunkSize = 32 << 10

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.accepted++
		hard, silent, target := p.hard, p.silent, p.target
		l := &link{client: c}
		l.dead.Store(silent)
		p.conns[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			defer func() {
				l.close()
				p.mu.Lock()
				delete(p.conns, l)
				p.mu.Unlock()
			}()
			if hard || target == "" {
				return
			}
			if silent {
				// A black hole: the client's bytes vanish, nothing answers.
				p.pipe(l, c, io.Discard, Upstream)
				return
			}
			s, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				return // the server is down: the client sees its connection closed
			}
			p.mu.Lock()
			l.server = s
			p.mu.Unlock()
			var both sync.WaitGroup
			both.Go(func() { p.pipe(l, c, s, Upstream) })
			both.Go(func() { p.pipe(l, s, c, Downstream) })
			both.Wait()
		}()
	}
}

type chunk struct {
	b  []byte
	at time.Time
}

// pipe copies src to dst through the link's faults until either side ends.
// A reader goroutine timestamps chunks; this goroutine delivers each one once
// its latency has passed, within the direction's bandwidth.
func (p *Proxy) pipe(l *link, src io.Reader, dst io.Writer, dir Direction) {
	chunks := make(chan chunk, 64)
	done := make(chan struct{})
	readerDone := make(chan struct{})
	defer func() {
		close(done)
		l.close() // unblocks the reader's Read
		<-readerDone
	}()
	go func() {
		defer close(readerDone)
		defer close(chunks)
		for {
			buf := make([]byte, chunkSize)
			n, err := src.Read(buf)
			if n > 0 {
				if l.dead.Load() {
					p.dropped.Add(int64(n))
				} else {
					select {
					case chunks <- chunk{buf[:n], time.Now()}:
					case <-done:
						return
					}
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		p.mu.Lock()
		latency, lim := p.latency, p.limiters[dir]
		p.mu.Unlock()
		if wait := time.Until(c.at.Add(latency)); wait > 0 {
			time.Sleep(wait)
		}
		b := c.b
		for len(b) > 0 {
			if l.dead.Load() {
				p.dropped.Add(int64(len(b)))
				break
			}
			n := len(b)
			if lim != nil {
				n = min(n, lim.Burst())
				if err := lim.WaitN(context.Background(), n); err != nil {
					n = len(b)
				}
			}
			cut := false
			if dir == Upstream {
				n, cut = p.spend(n)
			}
			// Counted before the write: whoever sees the bytes arrive
			// (an echo back at the client) sees them in Stats already.
			p.forwarded.Add(int64(n))
			if w, err := dst.Write(b[:n]); err != nil {
				p.forwarded.Add(-int64(n - w)) // not forwarded after all
				return
			}
			if cut {
				p.CutHard()
				return
			}
			b = b[n:]
		}
	}
}
