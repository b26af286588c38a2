package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
)

// MinKeyBytes is the shortest key (config.Console.LinkKeyEnv) that signs
// links and sessions.
const MinKeyBytes = 32

// tokenPrefix starts every token NewToken makes, so that one found in a log
// or a repository is recognised.
const tokenPrefix = "orc_"

// NewToken returns a new random token and its hash line for the config
// (config.ConsoleToken.Hash).
func NewToken() (token, hash string) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	token = tokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return token, HashToken(token)
}

// HashToken returns the hash of token as the config stores it.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return config.ConsoleHashPrefix + hex.EncodeToString(sum[:])
}

// principal is who makes a request.
type principal struct {
	// name is the token's name, "link:<tenant>" for a tenant link.
	name   string
	tenant string // "": the operator
	// bind is a digest of the token's hash (tokens.bind), which a session
	// made from the token carries: a session lasts only as long as its
	// token is configured with that very hash. "" for a tenant link.
	bind string
	// csrf is the session's CSRF token; "" when the request is not
	// authenticated by a cookie (a bearer header needs none).
	csrf string
}

func (p principal) operator() bool { return p.tenant == "" }

// tokens checks bearer tokens against the configured hashes. A tokens is
// never changed once made: Server.SetTokens swaps in a new one.
type tokens struct {
	hashes [][]byte // sha256 sums, in config order
	list   []config.ConsoleToken
}

func newTokens(list []config.ConsoleToken) (*tokens, error) {
	t := &tokens{list: slices.Clone(list)}
	names := map[string]bool{}
	for i, c := range list {
		b, err := hex.DecodeString(strings.TrimPrefix(c.Hash, config.ConsoleHashPrefix))
		if err != nil || len(b) != sha256.Size || !strings.HasPrefix(c.Hash, config.ConsoleHashPrefix) {
			return nil, fmt.Errorf("console.tokens[%d].hash is not %s and 64 hex digits", i, config.ConsoleHashPrefix)
		}
		if c.Name == "" || names[c.Name] {
			return nil, fmt.Errorf("console.tokens[%d].name: %q is empty or used twice; each token needs its own name", i, c.Name)
		}
		names[c.Name] = true
		t.hashes = append(t.hashes, b)
	}
	return t, nil
}

// bind returns the digest of a token's hash that its sessions carry (the
// first 16 bytes of a SHA-256 of it: a cookie does not hold the hash the
// config holds).
func bind(hash []byte) string {
	sum := sha256.Sum256(append([]byte("outbox-relay console session\x00"), hash...))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// find returns the principal of token: every configured hash is compared,
// each in constant time.
func (t *tokens) find(token string) (principal, bool) {
	sum := sha256.Sum256([]byte(token))
	found := -1
	for i, h := range t.hashes {
		if subtle.ConstantTimeCompare(sum[:], h) == 1 {
			found = i
		}
	}
	if found < 0 {
		return principal{}, false
	}
	return principal{name: t.list[found].Name, tenant: t.list[found].Tenant, bind: bind(t.hashes[found])}, true
}

// current reports whether a session of p is still good: its token is
// configured with the same name, tenant and hash. A token removed or given
// a new hash (`outbox-relay console token` again) ends its sessions.
func (t *tokens) current(p principal) bool {
	for i, c := range t.list {
		if c.Name == p.name && c.Tenant == p.tenant && subtleEq(bind(t.hashes[i]), p.bind) {
			return true
		}
	}
	return false
}

// LinkPath returns the path of a tenant link: the tenant's view of the
// console until expires, signed with key (the console's).
func LinkPath(key []byte, tenant string, expires time.Time) string {
	return "/t/" + signer{key: key}.Link(tenant, expires) + "/"
}

// signer signs tenant links and session cookies with the console's key.
type signer struct{ key []byte }

func (s signer) mac(kind string, parts ...string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(kind))
	for _, p := range parts {
		m.Write([]byte{0})
		m.Write([]byte(p))
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (s signer) check(mac, kind string, parts ...string) bool {
	return hmac.Equal([]byte(mac), []byte(s.mac(kind, parts...)))
}

// linkPrefix starts a tenant link's credential.
const linkPrefix = "l1."

// Link returns a tenant link's credential: tenant and expiry, signed. It
// is what /t/{link}/ and an "Authorization: Bearer" header take.
func (s signer) Link(tenant string, expires time.Time) string {
	t := base64.RawURLEncoding.EncodeToString([]byte(tenant))
	exp := strconv.FormatInt(expires.Unix(), 10)
	return linkPrefix + t + "." + exp + "." + s.mac("link", tenant, exp)
}

var errLink = errors.New("the link is not valid or has expired: ask for a new one")

// verifyLink returns the principal of a link credential.
func (s signer) verifyLink(link string, now time.Time) (principal, error) {
	rest, ok := strings.CutPrefix(link, linkPrefix)
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 3 {
		return principal{}, errLink
	}
	tb, err := base64.RawURLEncoding.DecodeString(parts[0])
	tenant := string(tb)
	exp, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || err2 != nil || tenant == "" || !s.check(parts[2], "link", tenant, parts[1]) || now.Unix() >= exp {
		return principal{}, errLink
	}
	return principal{name: "link:" + tenant, tenant: tenant}, nil
}

// session is what a browser's cookie holds.
type session struct {
	Name   string `json:"n"`
	Tenant string `json:"t,omitempty"`
	// Bind is the digest of the hash of the token signed in with
	// (principal.bind).
	Bind    string `json:"b"`
	Expires int64  `json:"e"`
	CSRF    string `json:"c"`
}

// sessionCookie returns a new signed session of p, valid for ttl.
func (s signer) sessionCookie(p principal, now time.Time, ttl time.Duration) (string, session) {
	var c [18]byte
	_, _ = rand.Read(c[:])
	ss := session{Name: p.name, Tenant: p.tenant, Bind: p.bind, Expires: now.Add(ttl).Unix(), CSRF: base64.RawURLEncoding.EncodeToString(c[:])}
	b, _ := json.Marshal(ss)
	v := base64.RawURLEncoding.EncodeToString(b)
	return v + "." + s.mac("session", v), ss
}

// verifySession returns the principal of a session cookie's value.
func (s signer) verifySession(v string, now time.Time) (principal, bool) {
	body, mac, ok := strings.Cut(v, ".")
	if !ok || !s.check(mac, "session", body) {
		return principal{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(body)
	var ss session
	if err != nil || json.Unmarshal(b, &ss) != nil || now.Unix() >= ss.Expires || ss.Name == "" || ss.CSRF == "" || ss.Bind == "" {
		return principal{}, false
	}
	return principal{name: ss.Name, tenant: ss.Tenant, bind: ss.Bind, csrf: ss.CSRF}, true
}

func subtleEq(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// maxClaimed caps what claimedTenant and claimedName return: a key of the
// limits of failed requests.
const maxClaimed = 64

// claimedTenant returns the tenant a link credential claims to be for,
// unverified (clipped to maxClaimed bytes).
func claimedTenant(link string) string {
	rest, _ := strings.CutPrefix(link, linkPrefix)
	t, _, _ := strings.Cut(rest, ".")
	b, _ := base64.RawURLEncoding.DecodeString(t[:min(len(t), 2*maxClaimed)])
	return string(b[:min(len(b), maxClaimed)])
}

// claimedName returns the token name a session cookie claims, unverified
// (clipped to maxClaimed bytes).
func claimedName(v string) string {
	body, _, _ := strings.Cut(v, ".")
	b, err := base64.RawURLEncoding.DecodeString(body[:min(len(body), 4096)])
	var ss session
	if err != nil || json.Unmarshal(b, &ss) != nil {
		return ""
	}
	return ss.Name[:min(len(ss.Name), maxClaimed)]
}
