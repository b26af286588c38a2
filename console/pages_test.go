package console

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
)

// signIn posts token to the sign-in form and returns the session cookie.
func (f *fixture) signIn(t *testing.T, token string) *http.Cookie {
	t.Helper()
	r := httptest.NewRequest("POST", "/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	res := w.Result()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %d %s", res.StatusCode, w.Body)
	}
	for _, c := range res.Cookies() {
		if c.Name == sessionCookieName {
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
				t.Errorf("session cookie %+v is not HttpOnly and SameSite=Strict", c)
			}
			return c
		}
	}
	t.Fatal("no session cookie")
	return nil
}

func (f *fixture) get(t *testing.T, path string, c *http.Cookie) (*http.Response, string) {
	t.Helper()
	r := httptest.NewRequest("GET", path, nil)
	if c != nil {
		r.AddCookie(c)
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w.Result(), w.Body.String()
}

var (
	inlineScript = regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]+</script>|<script>`)
	inlineStyle  = regexp.MustCompile(`(?i)<style|\sstyle=|\son[a-z]+=`)
)

func TestPagesAreSignedInServedUnderAStrictPolicyAndHoldNoInlineCode(t *testing.T) {
	f := newFixture(t)
	res, _ := f.get(t, "/", nil)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/login" {
		t.Errorf("an anonymous visit: %d to %q, want the sign-in form", res.StatusCode, res.Header.Get("Location"))
	}
	c := f.signIn(t, f.op)
	for _, path := range []string{"/", "/endpoints/hooks/b1", "/login"} {
		res, body := f.get(t, path, c)
		if res.StatusCode != 200 {
			t.Errorf("%s: %d %s", path, res.StatusCode, body)
		}
		csp := res.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: CSP %q lacks %q", path, csp, want)
			}
		}
		if inlineScript.MatchString(body) || inlineStyle.MatchString(body) {
			t.Errorf("%s holds inline script or style:\n%s", path, body)
		}
		if strings.Contains(body, f.op) {
			t.Errorf("%s shows the token", path)
		}
	}
	_, body := f.get(t, "/endpoints/hooks/b1", c)
	if !strings.Contains(body, "b-answer") || !strings.Contains(body, `data-attempt="2"`) {
		t.Errorf("the endpoint page does not show the failed attempt's answer and its resend button:\n%s", body)
	}
}

func TestAPageWriteNeedsItsCSRFToken(t *testing.T) {
	f := newFixture(t)
	c := f.signIn(t, f.tenA)
	p, _ := f.s.sign.verifySession(c.Value, f.now)
	post := func(csrf string) *http.Response {
		r := httptest.NewRequest("POST", "/api/v1/attempts/1/resend", nil)
		r.AddCookie(c)
		if csrf != "" {
			r.Header.Set("X-CSRF-Token", csrf)
		}
		w := httptest.NewRecorder()
		f.h.ServeHTTP(w, r)
		return w.Result()
	}
	if res := post(""); res.StatusCode != http.StatusForbidden {
		t.Errorf("a cookie write without the CSRF token: %d, want 403", res.StatusCode)
	}
	if res := post("forged"); res.StatusCode != http.StatusForbidden {
		t.Errorf("a cookie write with a wrong CSRF token: %d, want 403", res.StatusCode)
	}
	if res := post(p.csrf); res.StatusCode != http.StatusAccepted {
		t.Errorf("a cookie write with its CSRF token: %d, want 202", res.StatusCode)
	}
	// A session outlives nothing: once expired, it is refused.
	f.now = f.now.Add(2 * time.Hour)
	if res := post(p.csrf); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("an expired session's write: %d, want 401", res.StatusCode)
	}
}

func TestATenantLinkShowsOnlyItsTenantAndCanBeFramedWhereConfigured(t *testing.T) {
	f := newFixture(t, func(c *config.Console) { c.FrameAncestors = []string{"https://platform.example"} })
	link := LinkPath(f.s.sign.key, "A", f.now.Add(15*time.Minute))
	res, body := f.get(t, link, nil)
	if res.StatusCode != 200 || !strings.Contains(body, "hooks/a1") || strings.Contains(body, "hooks/b1") || strings.Contains(body, "ops-hook") {
		t.Errorf("tenant A's link: %d\n%s", res.StatusCode, body)
	}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors https://platform.example") {
		t.Errorf("CSP %q does not let the platform frame the page", csp)
	}
	res, _ = f.get(t, strings.TrimSuffix(link, "/")+"/endpoints/hooks/b1", nil)
	if res.StatusCode != http.StatusNotFound {
		t.Errorf("tenant A's link opens tenant B's endpoint: %d", res.StatusCode)
	}
	forged := strings.Replace(link, "l1.QQ", "l1.Qg", 1) // tenant "B", A's signature
	if res, _ := f.get(t, forged, nil); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("a link whose tenant was changed: %d, want 401", res.StatusCode)
	}
}
