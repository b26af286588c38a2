package console

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/outbox-relay/outbox-relay/config"
)

func sessionCookieOf(res *http.Response) *http.Cookie {
	for _, c := range res.Cookies() {
		if c.Name == sessionCookieName {
			return c
		}
	}
	return nil
}

// Behind a trusted TLS-terminating proxy (console.trusted_proxies) the
// session cookie is Secure; X-Forwarded-Proto and X-Forwarded-For are
// believed from such a proxy only.
func TestTheSessionCookieIsSecureBehindATrustedProxy(t *testing.T) {
	f := newFixture(t, func(c *config.Console) { c.TrustedProxies = []string{"10.1.0.0/16", "fd00::7"} })
	for _, tc := range []struct {
		name, addr, proto string
		secure            bool
	}{
		{"a trusted proxy that ended TLS", "10.1.2.3:4000", "https", true},
		{"a trusted proxy that does not say", "10.1.2.3:4000", "", true},
		{"a trusted proxy (one address, IPv6) that ended TLS", "[fd00::7]:4000", "https", true},
		{"a trusted proxy whose browser used plain http", "10.1.2.3:4000", "http", false},
		{"an untrusted client claiming https", "10.9.9.9:4000", "https", false},
		{"an untrusted client", "10.9.9.9:4000", "", false},
	} {
		var h []string
		if tc.proto != "" {
			h = []string{"X-Forwarded-Proto", tc.proto}
		}
		res := f.from(t, tc.addr, "POST", "/login", "", f.op, h...)
		c := sessionCookieOf(res)
		if res.StatusCode != http.StatusSeeOther || c == nil {
			t.Errorf("%s: sign in %d, no cookie", tc.name, res.StatusCode)
			continue
		}
		if c.Secure != tc.secure {
			t.Errorf("%s: cookie Secure %v, want %v", tc.name, c.Secure, tc.secure)
		}
	}
	// Without trusted proxies, X-Forwarded-Proto is not believed.
	f2 := newFixture(t)
	if c := sessionCookieOf(f2.from(t, "10.1.2.3:4000", "POST", "/login", "", f2.op, "X-Forwarded-Proto", "https")); c == nil || c.Secure {
		t.Errorf("no trusted proxies: cookie %+v, want one, not Secure", c)
	}
}

// Failures through a trusted proxy are limited per client it forwarded
// for; X-Forwarded-For from anyone else is ignored (a flood cannot escape
// its limit by naming other clients).
func TestFailuresBehindATrustedProxyAreLimitedPerClient(t *testing.T) {
	f := newFixture(t, func(c *config.Console) { c.RateLimit = 1; c.TrustedProxies = []string{"10.1.0.0/16"} })
	const proxy = "10.1.2.3:4000"
	for range 10 {
		f.from(t, proxy, "GET", "/api/v1/sinks", "orc_wrong", "", "X-Forwarded-For", "198.51.100.1, 10.1.9.9")
	}
	if res := f.from(t, proxy, "GET", "/api/v1/sinks", "orc_wrong", "", "X-Forwarded-For", "198.51.100.1"); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the flooding client: %d, want 429", res.StatusCode)
	}
	if res := f.from(t, proxy, "GET", "/api/v1/sinks", "orc_wrong", "", "X-Forwarded-For", "198.51.100.2"); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("another client behind the same proxy: %d, want 401", res.StatusCode)
	}
	const direct = "192.0.2.50:4000"
	limited := 0
	for i := range 10 {
		if f.from(t, direct, "GET", "/api/v1/sinks", "orc_wrong", "", "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", 10+i)).StatusCode == http.StatusTooManyRequests {
			limited++
		}
	}
	if limited < 8 {
		t.Errorf("an untrusted client naming other clients in X-Forwarded-For: %d of 10 limited, want 8", limited)
	}
}
