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
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := URL(tc.in); got != tc.want {
				t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
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
