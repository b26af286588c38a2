package main

import (
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/eventually"
)

// Against the built binary and MariaDB, with each kind of store: tenant
// t1's endpoint "orders" dead-letters an event; t1 deletes the endpoint;
// t2 is given an "orders" of its own. A tenant's own creates name rows in
// its namespace, so the same row id passes from one tenant to another only
// through the operator (or the table itself): the operator makes both rows
// here. t2's dead letters and attempts
// show nothing of t1's; t1 still lists its own record, which no one can
// replay to t2's endpoint, and purges it. t2's own dead letter is t2's.
func TestAReusedEndpointNameShowsNothingOfTheTenantBefore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary against MariaDB")
	}
	for _, store := range []string{"file", "mysql"} {
		t.Run(store, func(t *testing.T) {
			cr := startConsoleRelayOn(t, store)
			type record struct {
				ID, Sink, Tenant string
				Event            struct{ ID string }
			}
			letters := func(token string) []record {
				t.Helper()
				var out struct {
					DeadLetters []record `json:"dead_letters"`
				}
				if st := cr.call(t, "GET", "/api/v1/dead-letters", token, nil, &out); st != 200 {
					t.Fatalf("list dead letters: %d", st)
				}
				return out.DeadLetters
			}
			events := func(recs []record) []string {
				var ids []string
				for _, r := range recs {
					ids = append(ids, r.Event.ID)
				}
				return ids
			}
			cr.addEndpointFor(t, "t1", "orders", "/dead")
			cr.insert("evt-t1", "t1")
			var mine []record
			eventually.Within(t, 30*time.Second, "t1's event dead-lettered", func() bool {
				mine = letters(cr.t1)
				return len(mine) == 1
			}, cr.showLog)
			if r := mine[0]; r.Sink != "hooks/orders" || r.Tenant != "t1" || r.Event.ID != "evt-t1" {
				t.Errorf("t1's dead letter: %+v, want evt-t1 of hooks/orders, tenant t1", r)
			}
			if st := cr.call(t, "DELETE", "/api/v1/endpoints/hooks/orders", cr.t1, nil, nil); st != 204 {
				t.Fatalf("t1 deletes orders: %d", st)
			}
			eventually.Within(t, 30*time.Second, "orders gone", func() bool {
				return cr.call(t, "GET", "/api/v1/endpoints/hooks/orders", cr.op, nil, nil) == 404
			}, cr.showLog)
			cr.addEndpointFor(t, "t2", "orders", "/dead")

			// The reproduction: t2 lists no dead letter, and none of t1's
			// attempts.
			if got := letters(cr.t2); len(got) != 0 {
				t.Errorf("t2 lists dead letters %+v, want none: they are t1's", got)
			}
			var att struct{ Attempts []apiAttempt }
			if st := cr.call(t, "GET", "/api/v1/attempts?endpoint=orders", cr.t2, nil, &att); st != 200 || len(att.Attempts) != 0 {
				t.Errorf("t2 lists attempts %+v (%d), want none", att.Attempts, st)
			}
			// t1's record stays t1's: listed, not replayed to t2's
			// endpoint by anyone, purged by t1.
			if got := events(letters(cr.t1)); !slices.Equal(got, []string{"evt-t1"}) {
				t.Errorf("t1 lists %v, want its evt-t1", got)
			}
			ids := map[string]any{"ids": []string{mine[0].ID}}
			for who, token := range map[string]string{"t1": cr.t1, "the operator": cr.op} {
				if st := cr.call(t, "POST", "/api/v1/dead-letters/replay", token, ids, nil); st != http.StatusConflict {
					t.Errorf("%s replays t1's dead letter to t2's orders: %d, want 409", who, st)
				}
			}
			// The operator's command keeps it too, and says why.
			out, err := exec.Command(cr.bin, "dlq", "replay", "--config", cr.cfgPath, "--id", mine[0].ID).CombinedOutput()
			if err == nil || !strings.Contains(string(out), `is of tenant "t1", and hooks/orders is not that tenant's now`) {
				t.Errorf("dlq replay of t1's record to t2's orders: %v\n%s", err, out)
			}
			out, err = exec.Command(cr.bin, "dlq", "list", "--config", cr.cfgPath, "--tenant", "t1").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "hooks/orders  t1  ") || !strings.Contains(string(out), "1 dead letters") {
				t.Errorf("dlq list --tenant t1: %v\n%s", err, out)
			}
			if st := cr.call(t, "POST", "/api/v1/dead-letters/replay", cr.t2, ids, nil); st != 404 {
				t.Errorf("t2 replays t1's dead letter: %d, want 404", st)
			}
			if st := cr.call(t, "POST", "/api/v1/dead-letters/purge", cr.t2, ids, nil); st != 404 {
				t.Errorf("t2 purges t1's dead letter: %d, want 404", st)
			}
			// t2's own event fails on its orders: its dead letter is t2's.
			cr.insert("evt-t2", "t2")
			eventually.Within(t, 30*time.Second, "t2's event dead-lettered", func() bool {
				return len(letters(cr.t2)) == 1
			}, cr.showLog)
			if got := letters(cr.t2); got[0].Event.ID != "evt-t2" || got[0].Tenant != "t2" {
				t.Errorf("t2's dead letter %+v, want evt-t2 of tenant t2", got[0])
			}
			if got := events(letters(cr.t1)); !slices.Equal(got, []string{"evt-t1"}) {
				t.Errorf("t1 lists %v, want its evt-t1 only", got)
			}
			var purged struct{ Purged int }
			if st := cr.call(t, "POST", "/api/v1/dead-letters/purge", cr.t1, ids, &purged); st != 200 || purged.Purged != 1 {
				t.Errorf("t1 purges its dead letter: %d %+v", st, purged)
			}
			if got := events(letters(cr.op)); !slices.Equal(got, []string{"evt-t2"}) {
				t.Errorf("after t1's purge the operator lists %v, want evt-t2", got)
			}
			if n := len(cr.rc.Accepted("/dead")); n != 0 {
				t.Errorf("/dead accepted %d requests", n)
			}
		})
	}
}

// An endpoint the operator gives from t1 to t2 records the attempts made
// after as t2's: t1 does not see t2's events, and t2 sees none of t1's.
func TestAnEndpointGivenToAnotherTenantRecordsItsAttemptsAsTheNewTenants(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary against MariaDB")
	}
	cr := startConsoleRelay(t)
	cr.addEndpointFor(t, "t1", "orders", "/one") // an operator's row id, in no tenant's namespace
	cr.insert("evt-1", "t1")
	eventually.Within(t, 30*time.Second, "evt-1 delivered", func() bool {
		got := cr.attempts(t, cr.t1, "event_id=evt-1")
		return len(got) > 0 && got[0].Status == 200
	}, cr.showLog)
	if st := cr.call(t, "PUT", "/api/v1/endpoints/hooks/orders", cr.op, map[string]any{"url": cr.rc.URL + "/one", "tenant": "t2"}, nil); st != 200 {
		t.Fatalf("the operator gives orders to t2: %d", st)
	}
	// The endpoint takes t2's events from the change on (its filter is
	// t2's): evt-2, committed after, is delivered.
	cr.insert("evt-2", "t2")
	eventually.Within(t, 30*time.Second, "evt-2 delivered", func() bool {
		got := cr.attempts(t, cr.op, "event_id=evt-2")
		return len(got) > 0 && got[0].Status == 200
	}, cr.showLog)
	for _, a := range cr.attempts(t, cr.op, "event_id=evt-2") {
		if a.Tenant != "t2" {
			t.Errorf("an attempt of t2's evt-2 is recorded as tenant %q's: %+v", a.Tenant, a)
		}
	}
	if got := cr.attempts(t, cr.t1, "event_id=evt-2"); len(got) != 0 {
		t.Errorf("t1 sees the attempts of t2's evt-2: %+v", got)
	}
	if got := cr.attempts(t, cr.t2, "event_id=evt-1"); len(got) != 0 {
		t.Errorf("t2 sees the attempts of t1's evt-1: %+v", got)
	}
	if got := cr.attempts(t, cr.t1, "event_id=evt-1"); len(got) != 2 {
		t.Errorf("t1 sees %d attempts of its evt-1, want its 2", len(got))
	}
}
