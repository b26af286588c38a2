// Package redact hides secrets in text that is printed, logged or stored:
// the userinfo and query values of URLs (URL), and known secret values
// wherever they appear, as receivers echo them back (Replacer).
//
// URL is the one function every part of the relay uses to show or store a
// URL; it never fails, whatever the string. Its functions are pure and a
// Replacer is safe for concurrent use.
package redact

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Mask replaces every hidden value.
const Mask = "xxxxx"

// URL returns raw with its userinfo replaced by Mask and the value of every
// query parameter (and the fragment) replaced by Mask, keeping scheme, host,
// path and parameter names. It works on the text, not on a parsed URL, so a
// URL that does not parse is redacted the same way:
//
//	http://user:pw@host/ok%zz?token=abc&x  →  http://xxxxx@host/ok%zz?token=xxxxx&x
func URL(raw string) string {
	p := split(raw)
	var b strings.Builder
	b.WriteString(p.scheme)
	if p.hasUser {
		b.WriteString(Mask + "@")
	}
	b.WriteString(p.host)
	b.WriteString(p.path)
	if p.hasQuery {
		b.WriteByte('?')
		for i, kv := range strings.Split(p.query, "&") {
			if i > 0 {
				b.WriteByte('&')
			}
			if k, _, ok := strings.Cut(kv, "="); ok {
				b.WriteString(k + "=" + Mask)
			} else {
				b.WriteString(kv)
			}
		}
	}
	if p.hasFragment {
		b.WriteString("#" + Mask)
	}
	return b.String()
}

// URLSecrets returns the parts of raw that URL hides (the userinfo, its
// password, the query values, the fragment), each as written and decoded,
// and, for a userinfo, the Basic credentials an HTTP client derives from it.
// They feed a Replacer, so that an error or a receiver's reply quoting them
// is redacted too.
func URLSecrets(raw string) []string {
	p := split(raw)
	var out []string
	add := func(s string) {
		out = append(out, s)
		if d, err := url.QueryUnescape(s); err == nil && d != s {
			out = append(out, d)
		}
	}
	if p.hasUser {
		add(p.user)
		user, pw, hasPW := strings.Cut(p.user, ":")
		if hasPW {
			add(pw)
		}
		u, _ := url.PathUnescape(user)
		w, _ := url.PathUnescape(pw)
		out = append(out, base64.StdEncoding.EncodeToString([]byte(u+":"+w)))
	}
	if p.hasQuery {
		for _, kv := range strings.Split(p.query, "&") {
			if _, v, ok := strings.Cut(kv, "="); ok && v != "" {
				add(v)
			}
		}
	}
	if p.hasFragment && p.fragment != "" {
		add(p.fragment)
	}
	return out
}

type parts struct {
	scheme, user, host, path, query, fragment string
	hasUser, hasQuery, hasFragment            bool
}

// split cuts raw the way RFC 3986 does, leniently: it never fails. A
// password holding an unescaped "/", "?", "#" or "@" would end the
// authority early, and show up as a host, a path, a query or a fragment:
// the userinfo runs to the last "@" before the host (authorityEnd).
func split(raw string) parts {
	var p parts
	rest := raw
	if i := strings.Index(rest, "://"); i >= 0 && !strings.ContainsAny(rest[:i], "/?#@") {
		p.scheme, rest = rest[:i+3], rest[i+3:]
	} else if strings.HasPrefix(rest, "//") {
		p.scheme, rest = "//", rest[2:]
	} else if strings.HasPrefix(rest, "/") || !strings.Contains(rest, "@") {
		// No authority: a path only.
		p.tail(rest)
		return p
	}
	end := authorityEnd(rest)
	authority := rest[:end]
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		p.user, p.hasUser = authority[:i], true
		authority = authority[i+1:]
	}
	p.host = authority
	p.tail(rest[end:])
	return p
}

// tail cuts the path, query and fragment.
func (p *parts) tail(s string) {
	if i := strings.Index(s, "#"); i >= 0 {
		p.fragment, p.hasFragment = s[i+1:], true
		s = s[:i]
	}
	if i := strings.Index(s, "?"); i >= 0 {
		p.query, p.hasQuery = s[i+1:], true
		s = s[:i]
	}
	p.path = s
}

// authorityEnd returns where the authority of rest (what follows "//")
// ends. It ends at the first "/", "?" or "#", unless the first "@" after
// that one followed by a host ends a userinfo that holds the delimiter:
// when the text before the delimiter is not a plain host[:port]
// ("user:pa?ss@host", "user:p@ss/x@host"), or when no "/" comes between
// a "?" or "#" and the "@" ("user:12#34@host/p", "token?x@host"). An "@"
// in a path after a plain host ("https://host/users/@me") or in a query
// after a path ("https://host/p?email=a@b") stays where it is. When in
// doubt the userinfo is taken to be longer: more is hidden, never less.
func authorityEnd(rest string) int {
	d := strings.IndexAny(rest, "/?#")
	if d < 0 {
		return len(rest)
	}
	plainHost := hostPort(rest[:d])
	for at := d; ; {
		i := strings.Index(rest[at+1:], "@")
		if i < 0 {
			return d
		}
		at += 1 + i
		end := len(rest)
		if i := strings.IndexAny(rest[at+1:], "/?#"); i >= 0 {
			end = at + 1 + i
		}
		if !hostLike(rest[at+1 : end]) {
			continue
		}
		if !plainHost || (rest[d] != '/' && !strings.Contains(rest[d:at], "/")) {
			return end
		}
	}
}

// hostLike reports whether s could be a host[:port]: not empty, only the
// characters of a name, an address or a port.
func hostLike(s string) bool {
	return s != "" && strings.Trim(s, hostChars+":[]") == ""
}

// hostPort reports whether s is a plain host, [IPv6] or host:port, with
// nothing a userinfo would add (no "@", a port of digits only).
func hostPort(s string) bool {
	host, port := s, ""
	if strings.HasPrefix(s, "[") {
		i := strings.Index(s, "]")
		if i < 0 {
			return false
		}
		host, port = s[1:i], s[i+1:]
		if port != "" && port[0] != ':' {
			return false
		}
		port = strings.TrimPrefix(port, ":")
		return host != "" && strings.Trim(host, "0123456789abcdefABCDEF:.%") == "" && strings.Trim(port, "0123456789") == ""
	}
	if i := strings.Index(s, ":"); i >= 0 {
		host, port = s[:i], s[i+1:]
	}
	return host != "" && strings.Trim(host, hostChars) == "" && strings.Trim(port, "0123456789") == ""
}

// hostChars are the characters of a host name or an IPv4 address.
const hostChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_~%"

// minSecret is the shortest value a Replacer hides: shorter ones are not
// secrets, and hiding them would mangle ordinary text.
const minSecret = 4

// Replacer hides a set of secret values in any text, in the forms a
// receiver or a library may quote them: as given, JSON-escaped and
// URL-escaped.
type Replacer struct {
	r *strings.Replacer
}

// NewReplacer returns a Replacer for secrets; values shorter than 4 bytes
// are ignored. For a header value such as "Bearer abc…" pass it whole and
// the credentials alone (HeaderSecrets does both).
func NewReplacer(secrets ...string) *Replacer {
	seen := map[string]bool{}
	var forms []string
	add := func(s string) {
		if len(s) >= minSecret && !seen[s] {
			seen[s] = true
			forms = append(forms, s)
		}
	}
	for _, s := range secrets {
		add(s)
		if b, err := json.Marshal(s); err == nil {
			j := string(b[1 : len(b)-1])
			add(j)
			add(strings.ReplaceAll(j, "/", `\/`)) // JSON's optional escape
		}
		var noHTML strings.Builder
		enc := json.NewEncoder(&noHTML)
		enc.SetEscapeHTML(false)
		if enc.Encode(s) == nil {
			j := strings.TrimSuffix(noHTML.String(), "\n")
			add(j[1 : len(j)-1])
		}
		add(url.QueryEscape(s))
		add(url.PathEscape(s))
	}
	if len(forms) == 0 {
		return &Replacer{}
	}
	// Longest first, so that a value containing another is hidden whole.
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	pairs := make([]string, 0, 2*len(forms))
	for _, f := range forms {
		pairs = append(pairs, f, "[redacted]")
	}
	return &Replacer{r: strings.NewReplacer(pairs...)}
}

// Replace returns s with every secret hidden. JSON escapes of printable
// ASCII characters (\u0041, \/) are decoded first, so that a secret spelt
// with gratuitous escapes is recognised too.
func (r *Replacer) Replace(s string) string {
	if r == nil || r.r == nil {
		return s
	}
	if strings.Contains(s, `\u00`) || strings.Contains(s, `\/`) {
		s = jsonEscape.ReplaceAllStringFunc(s, func(m string) string {
			if m == `\/` {
				return "/"
			}
			n, err := strconv.ParseUint(m[2:], 16, 8)
			if err != nil || n < 0x20 || n > 0x7e || n == '"' || n == '\\' {
				return m
			}
			return string(rune(n))
		})
	}
	return r.r.Replace(s)
}

var jsonEscape = regexp.MustCompile(`\\u00[0-9a-fA-F]{2}|\\/`)

// HeaderSecrets returns the secret parts of a header value: the value, and
// for "<scheme> <credentials>" (Bearer, Basic, Token …) the credentials.
func HeaderSecrets(value string) []string {
	out := []string{value}
	if _, cred, ok := strings.Cut(strings.TrimSpace(value), " "); ok {
		out = append(out, strings.TrimSpace(cred))
	}
	return out
}
