package webhook

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Egress is the policy on the addresses an endpoint may connect to: the
// guard against server-side request forgery when a url is not fully trusted.
//
// With DenyPrivate, every connection (each attempt, each reconnect, each
// probe) resolves the url's host itself and connects only to an address
// that is public or allowed, so a name that resolves to a public address
// when checked and to a private one later (DNS rebinding) is refused too.
// The refused ranges are: unspecified (0.0.0.0/8, ::), loopback
// (127.0.0.0/8, ::1), private (10/8, 172.16/12, 192.168/16), shared
// (100.64/10), link-local (169.254/16, fe80::/10) with the cloud metadata
// addresses (169.254.169.254, fd00:ec2::254), unique-local (fc00::/7),
// site-local (fec0::/10), multicast, documentation, benchmarking and
// reserved ranges, and IPv6 forms embedding any of them (IPv4-mapped,
// NAT64, 6to4). Host names that can only be internal (localhost, names
// without a dot, *.localhost, *.local, *.internal, *.home.arpa) and IPv4
// literals in a non-standard form (2130706433, 0177.0.0.1, 0x7f.1, 127.1),
// which resolvers read differently, are refused by Validate. A proxy from
// the environment (HTTPS_PROXY) is not used under the policy: the policy
// must see the destination's address.
type Egress struct {
	// DenyPrivate refuses the addresses above. Default false for an
	// endpoint written in the configuration (its url is trusted); always on
	// for an endpoint from data (EndpointConfig.FromData), whatever this says.
	DenyPrivate bool `yaml:"deny_private"`
	// Allow lists the exceptions to DenyPrivate: CIDR ranges
	// ("10.20.0.0/16", "fd12::/64"), single addresses ("10.0.0.7"), and host
	// names ("hooks.internal", or "*.corp.example" for its subdomains), a
	// host name allowing whatever it resolves to. Default none.
	Allow []string `yaml:"allow"`
}

// Resolver resolves host names to addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// EgressError is the refusal of a destination by the egress policy. It is
// permanent: the event goes to the dead-letter store.
type EgressError struct {
	// Host is the url's host; Addr the refused address (invalid when the
	// host itself is refused).
	Host string
	Addr netip.Addr
	// Class says why: "loopback", "private", "link-local", "metadata" …
	Class string
	// AllowKey is the configuration key that allows it: egress.allow of
	// an endpoint of the configuration, endpoints_table.defaults.egress.allow
	// of a row of the endpoints table.
	AllowKey string
}

func (e *EgressError) Error() string {
	key := cmp.Or(e.AllowKey, "egress.allow")
	if e.Addr.IsValid() && e.Addr.String() != e.Host {
		return fmt.Sprintf("egress policy refuses %s: it resolves to %s, a %s address; add it to %s if it is intended", e.Host, e.Addr, e.Class, key)
	}
	return fmt.Sprintf("egress policy refuses %s, a %s address; add it to %s if it is intended", e.Host, e.Class, key)
}

// egressPolicy is an Egress compiled for one endpoint.
type egressPolicy struct {
	deny     bool
	allowKey string // EgressError.AllowKey
	nets     []netip.Prefix
	hosts    []string // lower case; "*.x" matches subdomains of x
	resolver Resolver
}

// compile parses the policy; fromData forces DenyPrivate.
func (g Egress) compile(fromData bool, r Resolver) (*egressPolicy, error) {
	p := &egressPolicy{deny: g.DenyPrivate || fromData, resolver: r, allowKey: "egress.allow"}
	if fromData {
		p.allowKey = "endpoints_table.defaults.egress.allow"
	}
	if p.resolver == nil {
		p.resolver = net.DefaultResolver
	}
	var errs []error
	for i, a := range g.Allow {
		a = strings.TrimSpace(a)
		if pfx, err := netip.ParsePrefix(a); err == nil {
			p.nets = append(p.nets, pfx.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(a); err == nil {
			p.nets = append(p.nets, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			continue
		}
		name := strings.ToLower(strings.TrimSuffix(a, "."))
		if !validHostPattern(name) {
			errs = append(errs, fmt.Errorf("egress.allow[%d] %q is not a CIDR range, an address or a host name (*.example.com for subdomains)", i, a))
			continue
		}
		p.hosts = append(p.hosts, name)
	}
	return p, errors.Join(errs...)
}

func validHostPattern(s string) bool {
	s = strings.TrimPrefix(s, "*.")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// hostAllowed reports whether host is on the allowlist by name.
func (p *egressPolicy) hostAllowed(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, h := range p.hosts {
		if suffix, ok := strings.CutPrefix(h, "*"); ok {
			if strings.HasSuffix(host, suffix) {
				return true
			}
		} else if host == h {
			return true
		}
	}
	return false
}

// checkAddr returns the refusal of a connection to ip for host, or nil.
func (p *egressPolicy) checkAddr(host string, ip netip.Addr) error {
	if !p.deny {
		return nil
	}
	ip = ip.WithZone("")
	class := addrClass(ip)
	if class == "" {
		return nil
	}
	for _, n := range p.nets {
		if n.Contains(ip.Unmap()) || n.Contains(ip) {
			return nil
		}
	}
	return &EgressError{AllowKey: p.allowKey, Host: host, Addr: ip, Class: class}
}

// checkHost is the policy applied to a url's host before any connection:
// an address literal is checked as an address, and names that can only be
// internal, or IPv4 literals in a non-standard form, are refused.
func (p *egressPolicy) checkHost(host string) error {
	if !p.deny || p.hostAllowed(host) {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return p.checkAddr(host, ip)
	}
	if ip, ok := legacyIPv4(host); ok {
		return &EgressError{AllowKey: p.allowKey, Host: host, Class: "non-standard IPv4 literal (it reads as " + ip.String() + "; write addresses in dotted decimal)"}
	}
	if class := nameClass(host); class != "" {
		return &EgressError{AllowKey: p.allowKey, Host: host, Class: class}
	}
	return nil
}

// dialContext connects to addr ("host:port") under the policy: it resolves
// the host, drops the refused addresses, and connects to the others in
// turn; each connection is checked again on the address actually dialled.
func (p *egressPolicy) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port %q: %w", portStr, err)
	}
	byName := p.hostAllowed(host)
	if err := p.checkHost(host); err != nil {
		return nil, err
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else if ips, err = p.resolver.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, err
	}
	d := &net.Dialer{
		Timeout:   30 * time.Second,
		KeepAlive: 30 * time.Second,
		// The last word: the address the socket connects to.
		Control: func(_, address string, _ syscall.RawConn) error {
			if byName {
				return nil
			}
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("egress policy: cannot read the address %q", address)
			}
			return p.checkAddr(host, ap.Addr())
		},
	}
	var refused, last error
	for _, ip := range ips {
		if (network == "tcp4" && !ip.Unmap().Is4()) || (network == "tcp6" && ip.Is4()) {
			continue
		}
		if !byName {
			if err := p.checkAddr(host, ip); err != nil {
				refused = err
				continue
			}
		}
		c, err := d.DialContext(ctx, network, netip.AddrPortFrom(ip, uint16(port)).String())
		if err == nil {
			return c, nil
		}
		last = err
	}
	switch {
	case last != nil:
		return nil, last
	case refused != nil:
		return nil, refused
	default:
		return nil, &net.DNSError{Err: "no address", Name: host, IsNotFound: true}
	}
}

// addrClass names the special-purpose range ip is in, or "" for a public
// address.
func addrClass(ip netip.Addr) string {
	ip = ip.WithZone("")
	if ip.Is4In6() {
		return addrClass(ip.Unmap())
	}
	if ip == metadataV4 || ip == metadataV6 {
		return "metadata"
	}
	for _, r := range specialRanges {
		if r.p.Contains(ip) {
			if r.embedded != nil {
				if c := addrClass(r.embedded(ip)); c != "" {
					return c
				}
				return ""
			}
			return r.class
		}
	}
	return ""
}

var (
	metadataV4 = netip.MustParseAddr("169.254.169.254")
	metadataV6 = netip.MustParseAddr("fd00:ec2::254")
)

type specialRange struct {
	p     netip.Prefix
	class string
	// embedded, for a range that carries an IPv4 address, returns it: the
	// range is refused when that address is.
	embedded func(netip.Addr) netip.Addr
}

func v4At(i int) func(netip.Addr) netip.Addr {
	return func(a netip.Addr) netip.Addr {
		b := a.As16()
		return netip.AddrFrom4([4]byte{b[i], b[i+1], b[i+2], b[i+3]})
	}
}

var specialRanges = func() []specialRange {
	var out []specialRange
	add := func(class string, cidrs ...string) {
		for _, c := range cidrs {
			out = append(out, specialRange{p: netip.MustParsePrefix(c), class: class})
		}
	}
	add("unspecified", "0.0.0.0/8", "::/128")
	add("loopback", "127.0.0.0/8", "::1/128")
	add("private", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fec0::/10")
	add("shared (carrier-grade NAT)", "100.64.0.0/10")
	add("link-local", "169.254.0.0/16", "fe80::/10")
	add("unique-local", "fc00::/7")
	add("multicast", "224.0.0.0/4", "ff00::/8")
	add("documentation", "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")
	add("benchmarking", "198.18.0.0/15")
	add("reserved", "192.0.0.0/24", "192.88.99.0/24", "240.0.0.0/4", "64:ff9b:1::/48", "100::/64", "2001::/32", "::/96")
	out = append(out,
		specialRange{p: netip.MustParsePrefix("64:ff9b::/96"), embedded: v4At(12)}, // NAT64
		specialRange{p: netip.MustParsePrefix("2002::/16"), embedded: v4At(2)},     // 6to4
	)
	return out
}()

// nameClass names a host name that can only be internal, or "".
func nameClass(host string) string {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	switch {
	case h == "localhost" || strings.HasSuffix(h, ".localhost") || h == "ip6-localhost" || h == "ip6-loopback":
		return "loopback name"
	case !strings.Contains(h, "."):
		return "single-label (internal) name"
	}
	for _, s := range []string{".local", ".internal", ".localdomain", ".home.arpa", ".intranet", ".lan", ".corp"} {
		if strings.HasSuffix(h, s) {
			return "internal name (" + s + ")"
		}
	}
	return ""
}

// legacyIPv4 reads s as inet_aton does (1 to 4 parts, each decimal, octal
// with a leading 0, or hex with 0x) and reports whether it is such an
// address written other than in plain dotted decimal.
func legacyIPv4(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 || s == "" {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		base, digits := 10, p
		switch {
		case len(p) > 2 && (p[:2] == "0x" || p[:2] == "0X"):
			base, digits = 16, p[2:]
		case len(p) > 1 && p[0] == '0':
			base, digits = 8, p[1:]
		}
		v, err := strconv.ParseUint(digits, base, 32)
		if err != nil || p == "" {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	var n uint64
	last := len(vals) - 1
	for i, v := range vals[:last] {
		if v > 255 {
			return netip.Addr{}, false
		}
		n |= v << (24 - 8*uint(i))
	}
	if vals[last] >= 1<<(8*uint(4-last)) {
		return netip.Addr{}, false
	}
	n |= vals[last]
	ip := netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
	if ip.String() == s {
		return ip, false // plain dotted decimal
	}
	return ip, true
}
