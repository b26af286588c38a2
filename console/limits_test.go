package console

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
)

// from makes a request from the client address addr (host:port), with
// headers (name, value pairs), and returns the answer.
func (f *fixture) from(t *testing.T, addr, method, path, token, form string, headers ...string) *http.Response {
	t.Helper()
	var r *http.Request
	if form != "" {
		r = httptest.NewRequest(method, path, strings.NewReader(url.Values{"token": {form}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		r = httptest.NewRequest(method, path, nil)
	}
	r.RemoteAddr = addr
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w.Result()
}

// A flood of wrong tokens from one address (a proxy many people share)
// is refused with 429, but a right token from that address still signs in
// and still reads: a wrong credential is charged to the address's
// allowance of failures only once it was checked and found wrong.
func TestAFloodOfWrongTokensFromOneAddressNeverStopsARightOne(t *testing.T) {
	f := newFixture(t, func(c *config.Console) { c.RateLimit = 1 }) // bursts of 2; the clock does not move
	const proxy = "192.0.2.10:4000"
	limited := 0
	for i := range 50 {
		if f.from(t, proxy, "POST", "/login", "", fmt.Sprintf("orc_wrong%d", i)).StatusCode == http.StatusTooManyRequests {
			limited++
		}
		if f.from(t, proxy, "GET", "/api/v1/sinks", fmt.Sprintf("orc_wrong%d", i), "").StatusCode == http.StatusTooManyRequests {
			limited++
		}
	}
	if limited < 90 {
		t.Errorf("%d of 100 wrong tokens from one address were limited, want all but the first few", limited)
	}
	if res := f.from(t, proxy, "POST", "/login", "", f.tenA); res.StatusCode != http.StatusSeeOther {
		t.Errorf("a right token signing in from the flooded address: %d, want 303", res.StatusCode)
	}
	if res := f.from(t, proxy, "GET", "/api/v1/sinks", f.tenB, ""); res.StatusCode != http.StatusOK {
		t.Errorf("a right bearer token from the flooded address: %d, want 200", res.StatusCode)
	}
	// Each credential tried has an allowance of its own within the
	// address's (four times as large): a tenant's expired link, tried from
	// the same address, is answered 401, not 429.
	old := f.s.sign.Link("A", f.now.Add(-time.Hour))
	f2 := newFixture(t, func(c *config.Console) { c.RateLimit = 1 })
	for range 3 {
		f2.from(t, proxy, "GET", "/api/v1/sinks", "orc_wrong", "")
	}
	if res := f2.from(t, proxy, "GET", "/api/v1/sinks", old, ""); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("an expired link after wrong tokens from its address: %d, want 401", res.StatusCode)
	}
	for range 10 {
		f2.from(t, proxy, "GET", "/api/v1/sinks", f2.s.sign.Link(fmt.Sprint("T", time.Now().UnixNano()), f.now.Add(-time.Hour)), "")
	}
	if res := f2.from(t, proxy, "GET", "/t/"+old+"/", "", ""); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a flood of links, each of another tenant: %d, want the address's allowance spent (429)", res.StatusCode)
	}
}

// IPv6 clients are limited by their /64: a network whose owner has all of
// its addresses is one client.
func TestFailuresOfAnIPv6NetworkAreLimitedTogether(t *testing.T) {
	f := newFixture(t, func(c *config.Console) { c.RateLimit = 1 })
	for i := range 20 {
		f.from(t, fmt.Sprintf("[2001:db8:1:2::%x]:4000", i+1), "GET", "/api/v1/sinks", "orc_wrong", "")
	}
	if res := f.from(t, "[2001:db8:1:2:ffff::9]:4000", "GET", "/api/v1/sinks", "orc_wrong", ""); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("another address of the same /64: %d, want 429", res.StatusCode)
	}
	if res := f.from(t, "[2001:db8:1:3::1]:4000", "GET", "/api/v1/sinks", "orc_wrong", ""); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("an address of the next /64: %d, want 401", res.StatusCode)
	}
}

// Failures from more networks than the table holds neither grow it nor
// give a limited client a new allowance (the old table was cleared at
// 10,000 keys: every allowance started afresh).
func TestManyClientsNeitherGrowTheLimitsNorResetThem(t *testing.T) {
	f := newFixture(t, func(c *config.Console) { c.RateLimit = 1 })
	const limitedClient = "198.51.100.7:4000"
	for range 3 {
		f.from(t, limitedClient, "GET", "/api/v1/sinks", "orc_wrong", "")
	}
	for i := range maxLimiters + 5000 {
		f.from(t, fmt.Sprintf("[2001:db8:%x:%x::1]:4000", i>>16, i&0xffff), "GET", "/api/v1/sinks", "orc_wrong", "")
	}
	if n := f.s.failed.len(); n > maxLimiters {
		t.Errorf("the table of failed clients holds %d, more than %d", n, maxLimiters)
	}
	if res := f.from(t, limitedClient, "GET", "/api/v1/sinks", "orc_wrong", ""); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the client limited before the flood: %d, want 429 still", res.StatusCode)
	}
	if res := f.from(t, "203.0.113.1:4000", "GET", "/api/v1/sinks", f.op, ""); res.StatusCode != http.StatusOK {
		t.Errorf("a right token during the flood: %d, want 200", res.StatusCode)
	}
}

func TestALimiterTableForgetsOnlyBucketsThatAreFullAgain(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	tb := newLimiterTable(1, 2) // bursts of 2, two keys
	for _, k := range []string{"a", "b"} {
		for range 2 {
			if take(now, tb.get(k, now)) != 0 {
				t.Fatalf("%s: the burst is refused", k)
			}
		}
	}
	// Full of spent buckets: a new key shares the overflow bucket, and a
	// and b are still spent.
	if take(now, tb.get("c", now)) != 0 || take(now, tb.get("d", now)) != 0 || take(now, tb.get("e", now)) == 0 {
		t.Error("new keys of a full table do not share one bucket of burst 2")
	}
	if take(now, tb.get("a", now)) == 0 || take(now, tb.get("b", now)) == 0 || tb.len() != 2 {
		t.Errorf("a spent bucket was forgotten (table of %d)", tb.len())
	}
	// Once a's bucket is full again (and a is the least recently used),
	// a new key takes its place.
	later := now.Add(2 * time.Second)
	tb.get("b", later)
	if take(later, tb.get("f", later)) != 0 || tb.len() != 2 {
		t.Error("a new key does not take the place of a full bucket")
	}
	if _, ok := tb.byKey["a"]; ok {
		t.Error("a is kept, f should have taken its place")
	}
}
