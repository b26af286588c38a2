package config_test

import (
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/config"
)

func TestConsoleTrustedProxiesAreNetworksOrAddresses(t *testing.T) {
	const base = `
source: {host: 127.0.0.1}
tables: [{name: shop.outbox}]
checkpoint: {path: /tmp/cp.json}
sinks: [{name: out, type: stdout}]
console:
  listen: 127.0.0.1:9465
  tokens: [{name: ops, hash: "sha256:0000000000000000000000000000000000000000000000000000000000000000"}]
`
	for _, tc := range []struct {
		name, proxies, wantErr string
	}{
		{"none", "[]", ""},
		{"networks and addresses, IPv4 and IPv6", "[10.0.0.0/8, 192.0.2.7, 'fd00::/8', '::1']", ""},
		{"a host name is refused, naming the field", "[10.0.0.0/8, proxy.internal]", `console.trusted_proxies[1]: "proxy.internal" is not a network`},
		{"a bad prefix is refused", "['10.0.0.0/33']", `console.trusted_proxies[0]: "10.0.0.0/33"`},
	} {
		_, err := config.Parse([]byte(base + "  trusted_proxies: " + tc.proxies + "\n"))
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.wantErr)
		}
	}
}
