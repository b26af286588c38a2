package main

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/console"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
)

// signIn signs in on the console's page with token and returns the
// session cookie and its CSRF token.
func (cr *consoleRelay) signIn(t *testing.T, token string) (*http.Cookie, string) {
	t.Helper()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.PostForm(cr.url+"/login", url.Values{"token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	for _, c := range res.Cookies() {
		if c.Name == "console_session" && c.Value != "" {
			body, _, _ := strings.Cut(c.Value, ".")
			b, _ := base64.RawURLEncoding.DecodeString(body)
			var s struct {
				CSRF string `json:"c"`
			}
			_ = json.Unmarshal(b, &s)
			return c, s.CSRF
		}
	}
	t.Fatalf("sign in: %d, no session cookie", res.StatusCode)
	return nil, ""
}

// withCookie makes an API request with a session cookie (and its CSRF
// token for a write) and returns the status.
func (cr *consoleRelay) withCookie(t *testing.T, method, path string, c *http.Cookie, csrf string) int {
	t.Helper()
	req, _ := http.NewRequest(method, cr.url+path, strings.NewReader("{}"))
	req.AddCookie(c)
	if csrf != "" {
		req.Header.Set("X-CSRF-Token", csrf)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode
}

// waitLog waits until the relay's log holds want n times.
func (cr *consoleRelay) waitLog(t *testing.T, want string, n int) {
	t.Helper()
	eventually.Within(t, 30*time.Second, "the log to say "+want, func() bool {
		b, _ := os.ReadFile(cr.logPath)
		return strings.Count(string(b), want) >= n
	}, cr.showLog)
}

// The built binary: a tenant's token is replaced by a new one of the same
// name and tenant (what `console token --tenant` prints again) and the
// relay gets SIGHUP. The session signed in with the old token ends at once
// (its reads and its CSRF-guarded writes get 401), as does the old bearer
// token; the new token works without a restart. A config that does not
// load keeps the tokens in use.
func TestAReplacedTokenEndsItsSessionsOnSIGHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary against MariaDB")
	}
	cr := startConsoleRelay(t)
	const path = "/api/v1/endpoints/hooks/shop-one"
	if st := cr.call(t, "POST", "/api/v1/endpoints/hooks", cr.t1, map[string]any{"id": "shop-one", "url": cr.rc.URL + "/one"}, nil); st != 201 {
		t.Fatalf("create shop-one: %d", st)
	}
	cookie, csrf := cr.signIn(t, cr.t1)
	if st := cr.withCookie(t, "GET", path, cookie, ""); st != 200 {
		t.Fatalf("the session reads shop-one: %d", st)
	}
	if st := cr.withCookie(t, "POST", path+"/rotate-secret", cookie, csrf); st != 200 {
		t.Fatalf("the session rotates shop-one's secret: %d", st)
	}

	// tenant-one's token replaced: same name, same tenant, a new hash.
	cfg, err := os.ReadFile(cr.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	newToken, newHash := console.NewToken()
	oldHash := console.HashToken(cr.t1)
	if !strings.Contains(string(cfg), oldHash) {
		t.Fatalf("the config does not hold tenant-one's hash %s", oldHash)
	}
	replaced := strings.Replace(string(cfg), oldHash, newHash, 1)
	if err := os.WriteFile(cr.cfgPath, []byte(replaced), 0o600); err != nil {
		t.Fatal(err)
	}
	// Until the relay reloads, the old token is the one in use.
	if st := cr.call(t, "GET", path, newToken, nil, nil); st != 401 {
		t.Errorf("the new token before the reload: %d, want 401", st)
	}
	if err := cr.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	cr.waitLog(t, "console tokens reloaded", 1)

	if st := cr.withCookie(t, "GET", path, cookie, ""); st != 401 {
		t.Errorf("the old token's session reads after its token was replaced: %d, want 401", st)
	}
	if st := cr.withCookie(t, "POST", path+"/rotate-secret", cookie, csrf); st != 401 {
		t.Errorf("the old token's session rotates a secret after its token was replaced: %d, want 401", st)
	}
	if st := cr.call(t, "GET", path, cr.t1, nil, nil); st != 401 {
		t.Errorf("the old bearer token after the reload: %d, want 401", st)
	}
	if st := cr.call(t, "GET", path, newToken, nil, nil); st != 200 {
		t.Errorf("the new bearer token after the reload: %d, want 200", st)
	}
	c2, _ := cr.signIn(t, newToken)
	if st := cr.withCookie(t, "GET", path, c2, ""); st != 200 {
		t.Errorf("a session of the new token: %d, want 200", st)
	}
	if st := cr.call(t, "GET", "/api/v1/endpoints", cr.op, nil, nil); st != 200 {
		t.Errorf("the operator's token, unchanged, after the reload: %d, want 200", st)
	}

	// A config that does not load: the tokens in use are kept, and the
	// log says so.
	if err := os.WriteFile(cr.cfgPath, []byte(replaced+"\nconsole: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cr.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	cr.waitLog(t, "console tokens not reloaded", 1)
	if st := cr.call(t, "GET", path, newToken, nil, nil); st != 200 {
		t.Errorf("the new token after a bad config was read: %d, want 200", st)
	}
	if st := cr.withCookie(t, "GET", path, c2, ""); st != 200 {
		t.Errorf("the new token's session after a bad config was read: %d, want 200", st)
	}
}
