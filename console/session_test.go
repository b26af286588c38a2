package console

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/outbox-relay/outbox-relay/config"
)

// A session is bound to the hash of the token it was signed in with: the
// token given a new hash under the same name and tenant (SetTokens, as a
// SIGHUP does) ends the session for the API, its writes and the pages. A
// list SetTokens refuses leaves the tokens as they were.
func TestASessionEndsWhenItsTokenIsReplaced(t *testing.T) {
	f := newFixture(t)
	c := f.signIn(t, f.tenA)
	write := func() int {
		r := httptest.NewRequest("POST", "/api/v1/endpoints/hooks/a1/rotate-secret", nil)
		r.AddCookie(c)
		v, _ := f.s.sign.verifySession(c.Value, f.now)
		r.Header.Set("X-CSRF-Token", v.csrf)
		w := httptest.NewRecorder()
		f.h.ServeHTTP(w, r)
		return w.Code
	}
	if res, _ := f.get(t, "/api/v1/endpoints", c); res.StatusCode != 200 || write() != 200 {
		t.Fatalf("the session before: read %d", res.StatusCode)
	}
	newTok, newHash := NewToken()
	list := slices.Clone(f.s.tokens.Load().list)
	list[1].Hash = newHash // tenant-a, tenant A: the same name and tenant
	if _, _, _, err := f.s.SetTokens(append(slices.Clone(list), config.ConsoleToken{Name: "x", Hash: "sha256:zz"})); err == nil {
		t.Fatal("SetTokens took a hash that is not one")
	}
	if res, _ := f.get(t, "/api/v1/endpoints", c); res.StatusCode != 200 {
		t.Fatalf("a refused list changed the tokens: read %d", res.StatusCode)
	}
	added, removed, changed, err := f.s.SetTokens(list)
	if err != nil || len(added)+len(removed) != 0 || !slices.Equal(changed, []string{"tenant-a"}) {
		t.Fatalf("SetTokens: %v %v %v %v", added, removed, changed, err)
	}
	if res, _ := f.get(t, "/api/v1/endpoints", c); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("the old token's session reads: %d, want 401", res.StatusCode)
	}
	if st := write(); st != http.StatusUnauthorized {
		t.Errorf("the old token's session rotates a secret: %d, want 401", st)
	}
	if res, _ := f.get(t, "/", c); res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/login" {
		t.Errorf("the old token's session opens the page: %d, want the sign-in form", res.StatusCode)
	}
	if res, _ := f.do(t, "GET", "/api/v1/endpoints", f.tenA, ""); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("the old bearer token: %d, want 401", res.StatusCode)
	}
	if res, _ := f.get(t, "/api/v1/endpoints", f.signIn(t, newTok)); res.StatusCode != 200 {
		t.Errorf("a session of the new token: %d, want 200", res.StatusCode)
	}
}
