package redact

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"a plain url is unchanged", "https://hooks.example.com/in", "https://hooks.example.com/in"},
		{"a password is hidden with its user", "https://u:pw@h/p", "https://xxxxx@h/p"},
		{"a user alone is hidden (it may be a token)", "https://tok@h/p", "https://xxxxx@h/p"},
		{"query values are hidden, names kept", "https://h/p?token=abc&v=1&flag", "https://h/p?token=xxxxx&v=xxxxx&flag"},
		{"a url that does not parse is redacted the same way", "http://user:pw@host/ok%zz?token=s3cr3t", "http://xxxxx@host/ok%zz?token=xxxxx"},
		{"an @ in the password is hidden whole", "http://u:p@ss@host/", "http://xxxxx@host/"},
		{"a fragment is hidden", "https://h/p#access_token=abc", "https://h/p#xxxxx"},
		{"a relative location keeps its path", "/next?sig=abc", "/next?sig=xxxxx"},
		{"a scheme-relative location hides its userinfo", "//u:p@h/x", "//xxxxx@h/x"},
		{"no scheme but credentials", "u:p@h:80/x", "xxxxx@h:80/x"},
		{"an empty string", "", ""},
		{"a password with a slash is hidden whole", "http://user:pa/ss@host/p?x=1", "http://xxxxx@host/p?x=xxxxx"},
		{"an @ in a path is not userinfo", "https://host/users/@me", "https://host/users/@me"},
		{"a password with a question mark is hidden whole", "https://relay:pa?ss@host/p", "https://xxxxx@host/p"},
		{"a password with a hash is hidden whole", "https://relay:pa#ss@host/p?x=1", "https://xxxxx@host/p?x=xxxxx"},
		{"a password of digits with a hash is hidden whole", "https://relay:12#34@host/p", "https://xxxxx@host/p"},
		{"a token with a question mark is hidden whole", "https://tok?en@host/", "https://xxxxx@host/"},
		{"a password with ?, / and @ is hidden whole", "http://u:p?s/s@x@host:8080/p?q=1#f", "http://xxxxx@host:8080/p?q=xxxxx#xxxxx"},
		{"a userinfo after a password with a hash, then an @ in the query", "https://u:p#w@host/p?email=a@b.example", "https://xxxxx@host/p?email=xxxxx"},
		{"no scheme and a password with a question mark", "u:p?w@h:80/x", "xxxxx@h:80/x"},
		{"an @ in a query after a path is not userinfo", "https://host:8443/p?email=a@b.example", "https://host:8443/p?email=xxxxx"},
		{"an @ in a path after a port is not userinfo", "https://host:8443/users/@me", "https://host:8443/users/@me"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := URL(tc.in); got != tc.want {
				t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestURLNeverShowsAPlantedPassword plants a password holding each of the
// characters that end a URL's authority and looks for it in what URL and a
// Replacer fed by URLSecrets leave.
func TestURLNeverShowsAPlantedPassword(t *testing.T) {
	for _, pw := range []string{"Pl4nted?Secret", "Pl4nted#Secret", "Pl4nted/Secret", "Pl4nted@Secret", "Pl4nted?#/@Secret", "1234?5678"} {
		for _, raw := range []string{
			"https://relay:" + pw + "@hooks.example.com/in?x=1",
			"https://relay:" + pw + "@hooks.example.com",
			"https://relay:" + pw + "@10.0.0.1:8443/a/b#frag",
			"relay:" + pw + "@db:3306",
		} {
			got := URL(raw)
			for _, part := range append([]string{pw}, strings.FieldsFunc(pw, func(r rune) bool { return strings.ContainsRune("?#/@", r) })...) {
				if strings.Contains(got, part) {
					t.Errorf("URL(%q) = %q shows %q", raw, got, part)
				}
			}
			if r := NewReplacer(URLSecrets(raw)...).Replace("error: " + raw); strings.Contains(r, pw) {
				t.Errorf("a Replacer fed URLSecrets(%q) left the password in %q", raw, r)
			}
		}
	}
}

func TestURLSecretsFeedAReplacer(t *testing.T) {
	raw := "http://relay:pa%24s@host/ok%zz?token=abc%2Fdef&k=v"
	r := NewReplacer(URLSecrets(raw)...)
	// A parse error quotes the URL; a receiver echoes the decoded token and
	// the Basic credentials.
	text := `parse "` + raw + `": invalid; echoed: token=abc/def auth=Basic cmVsYXk6cGEkcw== pa$s`
	got := r.Replace(text)
	for _, secret := range []string{"pa%24s", "pa$s", "abc%2Fdef", "abc/def", "cmVsYXk6cGEkcw=="} {
		if strings.Contains(got, secret) {
			t.Errorf("%q is left in %q", secret, got)
		}
	}
}

func TestReplacerHidesEchoedForms(t *testing.T) {
	const token = "tok/en+with\"quote<>"
	r := NewReplacer(HeaderSecrets("Bearer " + token)...)
	for _, echoed := range []string{
		"Authorization: Bearer " + token,
		`{"authorization":"Bearer tok\/en+with\"quote\u003c\u003e"}`,
		"?auth=tok%2Fen%2Bwith%22quote%3C%3E",
		"only: " + token,
	} {
		got := r.Replace(echoed)
		if strings.Contains(got, "tok") || strings.Contains(got, "en+with") {
			t.Errorf("Replace(%q) = %q: the token is left", echoed, got)
		}
	}
	if got := NewReplacer("abc").Replace("abc"); got != "abc" {
		t.Errorf("a 3-byte value was hidden: %q", got)
	}
	var nilR *Replacer
	if nilR.Replace("x") != "x" {
		t.Error("a nil Replacer changed the text")
	}
}
