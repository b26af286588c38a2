package sinktest

import (
	"net"
	"sync"
	"testing"
)

// Link is a loopback TCP proxy between a sink and its server, which a test
// breaks and heals (a Fault). Broken, it closes every open connection (both
// sides see EOF) and every new one at once, as a server or middlebox that
// went away. It implements Fault.
//
// (A minimal proxy of its own: internal/faultproxy, with silent cuts,
// latency and bandwidth limits, can replace it where it is available.)
type Link struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	broken bool
	budget int // bytes upstream before the link breaks; <0: unlimited
	conns  map[net.Conn]net.Conn
	wg     sync.WaitGroup
}

// StartLink listens on a free loopback port and forwards to target until
// the test ends.
func StartLink(t testing.TB, target string) *Link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Link{ln: ln, target: target, budget: -1, conns: map[net.Conn]net.Conn{}}
	l.wg.Add(1)
	go l.accept()
	t.Cleanup(l.close)
	return l
}

// Addr is the address the sink dials instead of the server's.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Break closes every connection and refuses new ones until Heal.
func (l *Link) Break() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.broken = true
	l.closeAllLocked()
}

// BreakMidWrite lets 8 KiB more through upstream (client to server), then
// breaks the link, in the middle of a write of a few hundred events.
func (l *Link) BreakMidWrite() { l.BreakAfter(8 << 10) }

// BreakAfter lets n more bytes through upstream, then breaks the link.
func (l *Link) BreakAfter(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.budget = n
}

// Heal forwards new connections again.
func (l *Link) Heal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.broken = false
	l.budget = -1
}

func (l *Link) closeAllLocked() {
	for c, up := range l.conns {
		c.Close()
		up.Close()
	}
	clear(l.conns)
}

func (l *Link) close() {
	l.ln.Close()
	l.mu.Lock()
	l.closeAllLocked()
	l.mu.Unlock()
	l.wg.Wait()
}

func (l *Link) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		broken := l.broken
		l.mu.Unlock()
		if broken {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", l.target)
		if err != nil {
			c.Close()
			continue
		}
		l.mu.Lock()
		l.conns[c] = up
		l.mu.Unlock()
		l.wg.Add(2)
		go func() { defer l.wg.Done(); l.pipe(up, c, true) }()
		go func() { defer l.wg.Done(); l.pipe(c, up, false) }()
	}
}

// pipe copies from src to dst; upstream copies count against the budget.
func (l *Link) pipe(dst, src net.Conn, upstream bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			cut := false
			if upstream {
				l.mu.Lock()
				if l.budget >= 0 {
					if n >= l.budget {
						chunk, cut = chunk[:l.budget], true
						l.budget = 0
					} else {
						l.budget -= n
					}
				}
				l.mu.Unlock()
			}
			if _, werr := dst.Write(chunk); werr != nil {
				return
			}
			if cut {
				l.Break()
				return
			}
		}
		if err != nil { // EOF or closed: the other side goes too
			return
		}
	}
}
