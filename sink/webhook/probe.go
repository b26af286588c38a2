package webhook

// This file owns coming back after a connection failure: while events wait
// after one, probe opens a TCP connection to the url's host every
// probeEvery, and once one succeeds wakeUnreachableLocked readies them at
// once, whatever their backoff.

import (
	"context"
	"net"
	"net/url"
	"time"
)

// wakeUnreachableLocked readies at once every lane head waiting after a
// connection failure: the endpoint is reachable again.
func (e *Endpoint) wakeUnreachableLocked() {
	if !e.mayWaitUnreachable {
		return
	}
	e.mayWaitUnreachable = false
	for _, l := range e.lanes {
		if len(l.q) == 0 {
			continue
		}
		d := l.q[0]
		if d.unreachable && d.timer != nil && !d.done {
			d.timer.Stop()
			d.timer = nil
			d.unreachable = false
			e.readyLocked(d)
		}
	}
}

// anyUnreachableLocked reports whether a lane head waits after a connection
// failure.
func (e *Endpoint) anyUnreachableLocked() bool {
	for _, l := range e.lanes {
		if len(l.q) > 0 && l.q[0].unreachable && l.q[0].timer != nil {
			return true
		}
	}
	return false
}

// probe runs while events wait after connection failures: every probeEvery
// it opens (and closes) a TCP connection to the url's host, which sends no
// request, and once one succeeds it readies those events at once, however
// long their backoff. So an endpoint that comes back after a long outage is
// noticed within about a second, while each event's attempts still back off.
func (e *Endpoint) probe() {
	defer e.workers.Done()
	addr := probeAddr(e.cfg.URL)
	t := time.NewTicker(e.probeEvery)
	defer t.Stop()
	for {
		select {
		case <-e.closing:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), e.probeEvery)
		c, err := e.dial(ctx, "tcp", addr)
		cancel()
		if err == nil {
			_ = c.Close()
		}
		e.mu.Lock()
		switch {
		case e.closed:
		case err == nil:
			e.wakeUnreachableLocked()
		case e.anyUnreachableLocked():
			e.mu.Unlock()
			continue
		}
		e.probing = false
		e.mu.Unlock()
		return
	}
}

// probeAddr is the host:port a probe connects to.
func probeAddr(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	if u.Port() != "" {
		return u.Host
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}
