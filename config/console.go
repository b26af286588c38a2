package config

import (
	"encoding/hex"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"time"
)

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
