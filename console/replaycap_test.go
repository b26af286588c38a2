package console

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// A tenant's recover and resend carry its tenant to the relay, and a
// replay the relay refuses because the tenant's queue is full is a 429
// problem naming the cap (not a 422: the request was fine, its time was
// not).
func TestATenantsReplayBeyondItsCapIsA429NamingTheCap(t *testing.T) {
	f := newFixture(t)
	f.relay.cap = 2
	for i := range 2 {
		res, body := f.do(t, "POST", "/api/v1/endpoints/hooks/b1/recover", f.tenB, `{"since":"1h"}`)
		if res.StatusCode != 202 {
			t.Fatalf("recover %d: %d %s", i+1, res.StatusCode, body)
		}
	}
	if !slices.Contains(f.relay.calls, "recover hooks/b1 by B") {
		t.Fatalf("the relay was not told the tenant: %v", f.relay.calls)
	}
	for _, req := range []struct{ path, body string }{
		{"/api/v1/endpoints/hooks/b1/recover", `{"since":"1h"}`},
		{"/api/v1/attempts/2/resend", ""},
	} {
		res, body := f.do(t, "POST", req.path, f.tenB, req.body)
		isProblem(t, req.path, res, body, 429)
		var p problem
		_ = json.Unmarshal([]byte(body), &p)
		if !strings.HasSuffix(p.Type, "/replay-queue-full") || !strings.Contains(p.Detail, "replay.max_jobs_per_tenant (2)") {
			t.Errorf("%s: problem %+v, want replay-queue-full naming the cap 2", req.path, p)
		}
	}
	if res, body := f.do(t, "POST", "/api/v1/endpoints/hooks/a1/recover", f.tenA, `{"since":"1h"}`); res.StatusCode != 202 {
		t.Errorf("another tenant's recover: %d %s", res.StatusCode, body)
	}
}
