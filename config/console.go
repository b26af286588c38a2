package config

// This file owns the console section: its types and their checks.

import (
	"encoding/hex"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"time"
)

// Console configures the gateway's console (docs/console.md): an admin API
// (/api/v1, described by /api/openapi.json) and a web page for the webhook
// sinks' endpoints, their delivery attempts and dead letters, on a listener
// of its own. Off unless listen is set.
type Console struct {
	// Listen is the console's address (host:port). Default "": no console,
	// no listener.
	Listen string `yaml:"listen" example:"# 127.0.0.1:9465"`
	// Tokens are the bearer tokens that may use the console: an operator
	// token (no tenant) sees every endpoint; a tenant token only the
	// endpoints whose tenant column equals its tenant. Each is stored
	// hashed (`outbox-relay console token` makes one). Required when
	// listen is set.
	Tokens []ConsoleToken `yaml:"tokens"`
	// LinkKeyEnv names the environment variable holding the key (at least
	// 32 bytes) that signs tenant links (`outbox-relay console link`) and
	// the page's session cookies. Default OUTBOX_RELAY_CONSOLE_KEY.
	LinkKeyEnv string `yaml:"link_key_env" default:"OUTBOX_RELAY_CONSOLE_KEY"`
	// RateLimit is the requests per second each token may make; a burst of
	// twice as many is allowed. Default 20.
	RateLimit float64 `yaml:"rate_limit" default:"20"`
	// Session is how long a browser's sign-in lasts. Default 8h.
	Session time.Duration `yaml:"session" default:"8h"`
	// FrameAncestors are the origins allowed to embed the page in a frame
	// (the Content-Security-Policy's frame-ancestors), e.g. a platform's
	// dashboard showing its customers their tenant's view. Default none:
	// no page can be framed.
	FrameAncestors []string `yaml:"frame_ancestors"`
	// TrustedProxies are the reverse proxies that end TLS in front of the
	// console, each a network (10.0.0.0/8) or an address. A request from
	// one of them gets a Secure session cookie (unless its
	// X-Forwarded-Proto says the browser used plain http), and its client
	// is the last address of X-Forwarded-For that is not a trusted proxy
	// (failed sign-ins are limited per client). Default none: the cookie
	// is Secure only when TLS ends at the relay, and the client is the
	// connection's address.
	TrustedProxies []string `yaml:"trusted_proxies"`
}

// ConsoleToken is one bearer token of the console, as its hash.
type ConsoleToken struct {
	// Name names the token in the audit log. Required.
	Name string `yaml:"name" example:"ops"`
	// Hash is "sha256:" and the hex SHA-256 of the token. Required.
	Hash string `yaml:"hash" example:"sha256:0000000000000000000000000000000000000000000000000000000000000000"`
	// Tenant, when set, limits the token to that tenant's endpoints,
	// attempts and dead letters. Default "": an operator token.
	Tenant string `yaml:"tenant"`
}

// ConsoleHashPrefix starts a console token's hash (ConsoleToken.Hash).
const ConsoleHashPrefix = "sha256:"

// envNameRe is an environment variable's name.
var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validate reports what is wrong with the console section through bad.
// Nothing is checked when listen is not set: the console is off.
func (c Console) validate(bad func(format string, a ...any)) {
	if c.Listen == "" {
		return
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		bad("console.listen: %q is not host:port (127.0.0.1:9465, :9465): %v", c.Listen, err)
	}
	if len(c.Tokens) == 0 {
		bad("console.tokens: none; add one made with `outbox-relay console token` (an operator token) or `outbox-relay console token --tenant T`")
	}
	names, hashes := map[string]bool{}, map[string]bool{}
	for i, t := range c.Tokens {
		switch {
		case t.Name == "":
			bad("console.tokens[%d].name: empty; name the token (the audit log names who wrote with it)", i)
		case names[t.Name]:
			bad("console.tokens[%d].name: %q is used twice; each token needs its own name", i, t.Name)
		}
		names[t.Name] = true
		hexPart, ok := strings.CutPrefix(t.Hash, ConsoleHashPrefix)
		if b, err := hex.DecodeString(hexPart); !ok || err != nil || len(b) != 32 {
			bad("console.tokens[%d].hash: not %s and 64 hex digits; paste the hash line `outbox-relay console token` prints (never the token itself)", i, ConsoleHashPrefix)
		} else if hashes[t.Hash] {
			bad("console.tokens[%d].hash: the same as another token's; make a new token for each", i)
		}
		hashes[t.Hash] = true
	}
	if !envNameRe.MatchString(c.LinkKeyEnv) {
		bad("console.link_key_env: %q is not an environment variable's name", c.LinkKeyEnv)
	}
	if c.RateLimit <= 0 {
		bad("console.rate_limit: %v: use requests per second above 0", c.RateLimit)
	}
	if c.Session < time.Minute || c.Session > 7*24*time.Hour {
		bad("console.session: %s: use between 1m and 168h", c.Session)
	}
	for i, a := range c.FrameAncestors {
		if a == "'self'" {
			continue
		}
		if a == "" || strings.ContainsAny(a, " \t;,'\"") || !(strings.HasPrefix(a, "https://") || strings.HasPrefix(a, "http://")) {
			bad("console.frame_ancestors[%d]: %q: give an origin (https://dashboard.example.com) or 'self'", i, a)
		}
	}
	for i, p := range c.TrustedProxies {
		if _, err := netip.ParsePrefix(p); err != nil {
			if _, err := netip.ParseAddr(p); err != nil {
				bad("console.trusted_proxies[%d]: %q is not a network (10.0.0.0/8, fd00::/8) nor an address (10.0.0.7)", i, p)
			}
		}
	}
}
