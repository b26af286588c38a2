package console

// This file owns the console's rate limits: the bounded tables of token
// buckets, and who a client is (its address, grouped, behind trusted
// proxies).

import (
	"container/list"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxLimiters bounds each table of rate limiters (one of the principals:
// tokens and link tenants; one of the failed requests' clients).
const maxLimiters = 10000

// failuresPerAddr is how many times console.rate_limit one client address
// may fail to authenticate, all credentials tried together; each
// credential tried (a tenant's link, a session's token name, a bearer
// token) gets console.rate_limit alone.
const failuresPerAddr = 4

// limiterTable is a bounded table of token buckets by key, kept in the
// order they were last used. When it is full, a new key takes the place
// of the least recently used one only if that one's bucket is full again
// (forgetting it forgets nothing); otherwise every new key shares one
// overflow bucket, which keeps limiting. So many keys (an IPv6 range's
// addresses) never give anyone a new allowance, and never grow the table.
// Safe for concurrent use.
type limiterTable struct {
	limit rate.Limit
	burst int
	max   int

	mu       sync.Mutex
	byKey    map[string]*list.Element // of *limiterEntry
	lru      list.List                // front: the most recently used
	overflow *rate.Limiter
}

type limiterEntry struct {
	key string
	l   *rate.Limiter
}

func newLimiterTable(perSecond float64, max int) *limiterTable {
	burst := int(2 * perSecond)
	if burst < 1 {
		burst = 1
	}
	t := &limiterTable{limit: rate.Limit(perSecond), burst: burst, max: max, byKey: map[string]*list.Element{}}
	t.overflow = rate.NewLimiter(t.limit, t.burst)
	return t
}

// get returns key's bucket at now.
func (t *limiterTable) get(key string, now time.Time) *rate.Limiter {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.byKey[key]; ok {
		t.lru.MoveToFront(e)
		return e.Value.(*limiterEntry).l
	}
	if len(t.byKey) >= t.max {
		oldest := t.lru.Back()
		old := oldest.Value.(*limiterEntry)
		if old.l.TokensAt(now) < float64(t.burst) {
			return t.overflow
		}
		delete(t.byKey, old.key)
		t.lru.Remove(oldest)
	}
	l := rate.NewLimiter(t.limit, t.burst)
	t.byKey[key] = t.lru.PushFront(&limiterEntry{key: key, l: l})
	return l
}

// len returns how many keys the table holds.
func (t *limiterTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byKey)
}

// take takes one request from each bucket at now, or none of them: it
// returns how long to wait when one is empty (0: taken).
func take(now time.Time, ls ...*rate.Limiter) time.Duration {
	var taken []*rate.Reservation
	for _, l := range ls {
		r := l.ReserveN(now, 1)
		if d := r.DelayFrom(now); !r.OK() || d > 0 {
			r.CancelAt(now)
			for _, t := range taken {
				t.CancelAt(now)
			}
			if !r.OK() {
				d = time.Second
			}
			return d
		}
		taken = append(taken, r)
	}
	return 0
}

// clients says who a request's client is, for the limits of failed
// requests: its address, or behind a trusted proxy (console.
// trusted_proxies) the address the proxy forwarded for.
type clients struct {
	proxies []netip.Prefix
}

func newClients(trusted []string) clients {
	var c clients
	for _, s := range trusted {
		if p, err := netip.ParsePrefix(s); err == nil {
			c.proxies = append(c.proxies, p.Masked())
		} else if a, err := netip.ParseAddr(s); err == nil {
			a = a.Unmap().WithZone("")
			c.proxies = append(c.proxies, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return c
}

func (c clients) trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range c.proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// peer returns the address of the request's connection.
func peer(r *http.Request) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	return a.Unmap().WithZone(""), err == nil
}

// fromProxy reports whether r came through a trusted proxy.
func (c clients) fromProxy(r *http.Request) bool {
	a, ok := peer(r)
	return ok && c.trusted(a)
}

// addr returns the client's address: the connection's, or, when that is
// a trusted proxy, the last address of X-Forwarded-For that is not one
// (each proxy appends the address it was reached from).
func (c clients) addr(r *http.Request) (netip.Addr, bool) {
	a, ok := peer(r)
	if !ok || !c.trusted(a) {
		return a, ok
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		h, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			return a, true // a hop that is not an address: the proxy is the client
		}
		if h = h.Unmap(); !c.trusted(h) {
			return h, true
		}
		a = h
	}
	return a, true
}

// key returns the key of r's client in the limits of failed requests: its
// IPv4 address, or its IPv6 address's /64 (a network whose owner has all
// of its addresses).
func (c clients) key(r *http.Request) string {
	a, ok := c.addr(r)
	switch {
	case !ok:
		return "addr:" + r.RemoteAddr
	case a.Is6():
		p, _ := a.Prefix(64)
		return "addr:" + p.String()
	}
	return "addr:" + a.String()
}

// secure reports whether the browser reached the console over TLS: TLS
// ends here, or at a trusted proxy (unless its X-Forwarded-Proto says the
// browser used plain http).
func (c clients) secure(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	return c.fromProxy(r) && !strings.EqualFold(strings.TrimSpace(r.Header.Get("X-Forwarded-Proto")), "http")
}
