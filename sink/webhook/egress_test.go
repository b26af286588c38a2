package webhook

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

func TestAddrClass(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"8.8.8.8", ""},
		{"2606:4700:4700::1111", ""},
		{"127.0.0.1", "loopback"},
		{"127.255.0.9", "loopback"},
		{"::1", "loopback"},
		{"10.1.2.3", "private"},
		{"172.31.255.255", "private"},
		{"192.168.1.1", "private"},
		{"100.100.100.200", "shared (carrier-grade NAT)"},
		{"169.254.169.254", "metadata"},
		{"fd00:ec2::254", "metadata"},
		{"169.254.1.1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"fd12:3456::1", "unique-local"},
		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"::ffff:127.0.0.1", "loopback"},
		{"::ffff:169.254.169.254", "metadata"},
		{"64:ff9b::a9fe:a9fe", "metadata"},
		{"64:ff9b::808:808", ""},
		{"2002:a00:1::", "private"},
		{"224.0.0.1", "multicast"},
		{"255.255.255.255", "reserved"},
		{"192.0.0.192", "reserved"},
	} {
		if got := addrClass(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("addrClass(%s) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}

func TestLegacyIPv4(t *testing.T) {
	for _, tc := range []struct {
		in     string
		want   string
		legacy bool
	}{
		{"2130706433", "127.0.0.1", true},
		{"0177.0.0.1", "127.0.0.1", true},
		{"0x7f.1", "127.0.0.1", true},
		{"0x7f000001", "127.0.0.1", true},
		{"127.1", "127.0.0.1", true},
		{"169.254.43518", "169.254.169.254", true},
		{"2852039166", "169.254.169.254", true},
		{"127.0.0.1", "127.0.0.1", false},
		{"example.com", "", false},
		{"1.2.3.4.5", "", false},
		{"256.1.1.1", "", false},
	} {
		ip, legacy := legacyIPv4(tc.in)
		if legacy != tc.legacy || (tc.want != "" && ip.String() != tc.want) {
			t.Errorf("legacyIPv4(%q) = %v, %v; want %s, %v", tc.in, ip, legacy, tc.want, tc.legacy)
		}
	}
}

func TestValidateAppliesTheEgressPolicyToTheURL(t *testing.T) {
	refused := []string{
		"http://169.254.169.254/latest/meta-data/",
		"http://[fd00:ec2::254]/",
		"http://10.0.0.1/hook",
		"http://192.168.0.10:8080/",
		"http://[::1]/",
		"http://127.0.0.1/",
		"http://0.0.0.0/",
		"http://[::]/",
		"http://[::ffff:127.0.0.1]/",
		"http://2130706433/",
		"http://0x7f000001/",
		"http://0177.0.0.1/",
		"http://8.8.8.010/", // octal in a dotted quad: ambiguous
		"http://localhost/",
		"http://metadata/computeMetadata/v1/",
		"http://metadata.google.internal/",
		"http://printer.local/",
	}
	for _, u := range refused {
		for _, fromData := range []bool{true, false} {
			cfg := EndpointConfig{Name: "e", URL: u, FromData: fromData, Egress: Egress{DenyPrivate: !fromData}}
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "egress policy refuses") {
				t.Errorf("%s (from data %v): Validate = %v, want a refusal by the egress policy", u, fromData, err)
			}
		}
		// A static endpoint that did not opt in is trusted.
		if err := (EndpointConfig{Name: "e", URL: u}).Validate(); err != nil {
			t.Errorf("%s, static without a policy: %v", u, err)
		}
	}
	for _, tc := range []struct {
		url   string
		allow []string
	}{
		{"https://hooks.example.com/in", nil},
		{"https://93.184.215.14/in", nil},
		{"http://10.0.0.1/hook", []string{"10.0.0.0/8"}},
		{"http://[::1]:8080/", []string{"::1"}},
		{"http://hooks.internal/", []string{"hooks.internal"}},
		{"http://a.svc.corp/", []string{"*.svc.corp"}},
	} {
		cfg := EndpointConfig{Name: "e", URL: tc.url, FromData: true, Egress: Egress{Allow: tc.allow}}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s with allow %v: %v", tc.url, tc.allow, err)
		}
	}
	bad := EndpointConfig{Name: "e", URL: "https://x.example.com/", Egress: Egress{Allow: []string{"10.0.0.0/8"}}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "egress.deny_private is false") {
		t.Errorf("allow without deny_private: %v", err)
	}
	bad = EndpointConfig{Name: "e", URL: "https://x.example.com/", Egress: Egress{DenyPrivate: true, Allow: []string{"10.0.0.0/33", "bad host!"}}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), `egress.allow[0] "10.0.0.0/33"`) || !strings.Contains(err.Error(), `egress.allow[1]`) {
		t.Errorf("invalid allow entries: %v", err)
	}
}

// fakeResolver answers every name from a table it can change (a DNS
// rebinding attack changes the answer between the check and the use).
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][]netip.Addr
	lookups int
}

func (r *fakeResolver) set(host string, addrs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.answers == nil {
		r.answers = map[string][]netip.Addr{}
	}
	r.answers[host] = nil
	for _, a := range addrs {
		r.answers[host] = append(r.answers[host], netip.MustParseAddr(a))
	}
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookups++
	if a, ok := r.answers[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// hookURL points a made-up public host name at srv's port.
func hookURL(t *testing.T, srv *server) string {
	t.Helper()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	return "http://hooks.example.com:" + port + "/in"
}

func TestAnEndpointFromDataIsRefusedWhenItsNameResolvesToAPrivateAddress(t *testing.T) {
	srv := newServer(t, nil, ok)
	for _, addr := range []string{"127.0.0.1", "::ffff:127.0.0.1"} {
		res := &fakeResolver{}
		res.set("hooks.example.com", addr)
		cfg := testConfig(hookURL(t, srv))
		cfg.FromData, cfg.Resolver = true, res
		obs := &countingObserver{}
		cfg.Observer = obs
		e := newEndpoint(t, cfg)
		errs := permanentErrors(t, write(t, e, ev("e1", "a")), 0)
		var ee *EgressError
		if !errors.As(errs[0], &ee) || ee.Class != "loopback" {
			t.Fatalf("%s: %v, want an EgressError for a loopback address", addr, errs[0])
		}
		if !strings.Contains(errs[0].Error(), "hooks.example.com: it resolves to") {
			t.Errorf("the error does not say what the name resolved to: %v", errs[0])
		}
		if len(obs.failed) != 1 || obs.failed[0] != ReasonRequest {
			t.Errorf("observer failures %v, want [%s]", obs.failed, ReasonRequest)
		}
	}
	if n := len(srv.requests()); n != 0 {
		t.Fatalf("the private receiver got %d requests", n)
	}
}

func TestTheEgressPolicyIsCheckedAtEveryConnection(t *testing.T) {
	// Each response closes the connection, so every attempt dials anew.
	srv := newServer(t, nil, func(w http.ResponseWriter, _ *http.Request, _ request) {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusNoContent)
	})
	res := &fakeResolver{}
	res.set("hooks.example.com", "127.0.0.1")
	cfg := testConfig(hookURL(t, srv))
	cfg.FromData, cfg.Resolver = true, res
	cfg.Egress.Allow = []string{"127.0.0.1/32"} // stands for a public address here
	e := newEndpoint(t, cfg)
	if err := write(t, e, ev("e1", "a")); err != nil {
		t.Fatalf("first write, to an allowed address: %v", err)
	}
	// The name now resolves to the metadata service (DNS rebinding).
	res.set("hooks.example.com", "169.254.169.254")
	errs := permanentErrors(t, write(t, e, ev("e2", "a")), 0)
	var ee *EgressError
	if !errors.As(errs[0], &ee) || ee.Class != "metadata" || ee.Addr.String() != "169.254.169.254" {
		t.Fatalf("after rebinding: %v, want the metadata address refused", errs[0])
	}
	// A mix: only the allowed address is dialled.
	res.set("hooks.example.com", "10.9.9.9", "127.0.0.1")
	if err := write(t, e, ev("e3", "a")); err != nil {
		t.Fatalf("a name with a refused and an allowed address: %v", err)
	}
	if n := len(srv.requests()); n != 2 {
		t.Errorf("%d requests reached the receiver, want 2", n)
	}
	if res.lookups < 3 {
		t.Errorf("%d lookups for 3 connections: the policy did not resolve at each connection", res.lookups)
	}
}

func TestAStaticEndpointOptsInAndAllowsByName(t *testing.T) {
	srv := newServer(t, nil, ok)
	res := &fakeResolver{}
	res.set("hooks.example.com", "127.0.0.1")

	cfg := testConfig(hookURL(t, srv))
	cfg.Resolver = res
	if err := write(t, newEndpoint(t, cfg), ev("e1", "a")); err != nil {
		t.Fatalf("a static endpoint without a policy: %v", err)
	}
	cfg.Egress.DenyPrivate = true
	permanentErrors(t, write(t, newEndpoint(t, cfg), ev("e2", "a")), 0)
	cfg.Egress.Allow = []string{"*.example.com"}
	if err := write(t, newEndpoint(t, cfg), ev("e3", "a")); err != nil {
		t.Fatalf("a host allowed by name: %v", err)
	}
	if n := len(srv.requests()); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}
