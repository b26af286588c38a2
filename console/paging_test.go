package console

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/internal/paging"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

// pagingFixture is a console over a private MariaDB: the endpoints table
// of sink "hooks" (with the static endpoint "ops-hook"), the MySQL
// attempts and dead-letter stores, and tokens of an operator and of the
// tenants A and B.
type pagingFixture struct {
	*fixture
	db     *sql.DB
	dbname string
	at     *attempts.MySQL
	dl     deadletter.Store
}

func newPagingFixture(t *testing.T, dl func(db *sql.DB) deadletter.Store) *pagingFixture {
	t.Helper()
	srv := testserver.Start(t, testserver.Options{NoBinlog: true})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	ctx := context.Background()
	if _, err := db.Exec(webhook.EndpointsTableSchema); err != nil {
		t.Fatal(err)
	}
	sc := config.Sink{Name: "hooks", Type: "webhook", Config: &webhook.SinkConfig{
		Endpoints:      []webhook.EndpointConfig{{Name: "ops-hook", URL: "https://ops.example/"}},
		EndpointsTable: &webhook.TableConfig{Table: dbname + ".outbox_endpoints", TenantHeader: "tenant"}}}
	fo, ok := gateway.FanOutFor(sc)
	if !ok {
		t.Fatal("webhook is not a fan-out kind")
	}
	ta, err := fo.Admin(sc.Name, sc.Config, db)
	if err != nil {
		t.Fatal(err)
	}
	at, err := attempts.OpenMySQL(ctx, db, "")
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	pf := &pagingFixture{fixture: f, db: db, dbname: dbname, at: at, dl: dl(db)}
	s, err := New(Options{Config: f.s.o.Config, Key: f.s.o.Key, Sinks: []Sink{{Name: "hooks", Static: []string{"ops-hook"}, Table: ta}},
		Attempts: at, DeadLetters: pf.dl, Now: f.s.o.Now})
	if err != nil {
		t.Fatal(err)
	}
	f.s, f.h = s, s.Handler()
	return pf
}

// row inserts endpoint row id of tenant.
func (pf *pagingFixture) row(t *testing.T, id, tenant string) {
	t.Helper()
	if _, err := pf.db.Exec("INSERT INTO outbox_endpoints (id, url, secrets, tenant) VALUES (?, 'https://r.example/hook', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', ?)", id, tenant); err != nil {
		t.Fatal(err)
	}
}

// walk follows a list's pages from path (which has its query) and
// returns the ids of what each page held, in order; between runs after
// each page but the last, with the page's number.
func (pf *pagingFixture) walk(t *testing.T, path, token, list, idField string, between func(page int)) []string {
	t.Helper()
	var ids []string
	it := ""
	for page := 0; ; page++ {
		p := path
		if it != "" {
			p += "&iterator=" + url.QueryEscape(it)
		}
		res, body := pf.do(t, "GET", p, token, "")
		if res.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", p, res.StatusCode, body)
		}
		var doc map[string]json.RawMessage
		var items []map[string]any
		var next string
		var done bool
		if err := json.Unmarshal([]byte(body), &doc); err != nil {
			t.Fatal(err)
		}
		_ = json.Unmarshal(doc[list], &items)
		_ = json.Unmarshal(doc["next"], &next)
		_ = json.Unmarshal(doc["done"], &done)
		for _, x := range items {
			ids = append(ids, fmt.Sprint(x[idField]))
		}
		if done != (next == "") {
			t.Fatalf("page %d: done %v with next %q", page, done, next)
		}
		if done {
			return ids
		}
		if page > 1000 {
			t.Fatal("the walk does not end")
		}
		between(page)
		it = next
	}
}

// once checks a walk: each of want exactly once, nothing twice, and
// nothing that may not be seen.
func once(t *testing.T, what string, seen, want []string, may func(id string) bool) {
	t.Helper()
	n := map[string]int{}
	for _, id := range seen {
		n[id]++
		if n[id] == 2 {
			t.Errorf("%s: %s is on two pages", what, id)
		}
		if !may(id) {
			t.Errorf("%s: %s is listed, and may not be", what, id)
		}
	}
	for _, id := range want {
		if n[id] != 1 {
			t.Errorf("%s: %s, there throughout the walk, is listed %d times, want once", what, id, n[id])
		}
	}
}

// The endpoints list pages through the table by id while rows are added
// and deleted between its pages: each row there throughout is on exactly
// one page, none on two; a tenant's pages hold its own rows only.
func TestEndpointPagesAreCompleteWhileRowsChange(t *testing.T) {
	pf := newPagingFixture(t, func(*sql.DB) deadletter.Store { return &memDeadLetters{} })
	tenantOf := map[string]string{}
	for i := range 60 {
		id, tenant := fmt.Sprintf("r%03d", i*2), []string{"A", "B"}[i%2]
		pf.row(t, id, tenant)
		tenantOf[id] = tenant
	}
	for _, c := range []struct {
		name, token, query, tenant string
	}{
		{"the operator", pf.op, "", ""},
		{"the operator's filter by tenant", pf.op, "&tenant=A", "A"},
		{"tenant A", pf.tenA, "", "A"},
		{"tenant B", pf.tenB, "", "B"},
	} {
		t.Run(c.name, func(t *testing.T) {
			present := map[string]bool{}
			for id := range tenantOf {
				present[id] = true
			}
			victims := slices.Sorted(maps.Keys(present))
			added := 0
			seen := pf.walk(t, "/api/v1/endpoints?limit=7"+c.query, c.token, "endpoints", "id", func(page int) {
				// Between pages: a row near the walk's place and one at
				// the end, of each tenant in turn, and a row of those
				// there at the start deleted, from the end and from the
				// start in turn.
				for _, id := range []string{fmt.Sprintf("r%03d", 2*page+1), fmt.Sprintf("z%03d", added)} {
					tenant := []string{"A", "B"}[added%2]
					pf.row(t, id, tenant)
					tenantOf[id] = tenant
					added++
				}
				var id string
				if page%2 == 0 {
					id, victims = victims[len(victims)-1], victims[:len(victims)-1]
				} else {
					id, victims = victims[0], victims[1:]
				}
				if _, err := pf.db.Exec("DELETE FROM outbox_endpoints WHERE id = ?", id); err != nil {
					t.Fatal(err)
				}
				delete(present, id)
			})
			var want []string
			for id := range present {
				if c.tenant == "" || tenantOf[id] == c.tenant {
					want = append(want, id)
				}
			}
			if c.tenant == "" {
				want = append(want, "ops-hook")
			}
			once(t, c.name, seen, want, func(id string) bool {
				return c.tenant == "" || tenantOf[id] == c.tenant
			})
			if len(want) < 20 {
				t.Fatalf("only %d rows throughout: the test proves little", len(want))
			}
		})
		// Put the table back as it was for the next walk.
		if _, err := pf.db.Exec("DELETE FROM outbox_endpoints"); err != nil {
			t.Fatal(err)
		}
		clear(tenantOf)
		for i := range 60 {
			id, tenant := fmt.Sprintf("r%03d", i*2), []string{"A", "B"}[i%2]
			pf.row(t, id, tenant)
			tenantOf[id] = tenant
		}
	}
}

// The dead letters and the attempts page by id while records are added
// and deleted between pages, in both dead-letter stores: each record
// there throughout is on exactly one page; a tenant's pages hold its own.
func TestDeadLetterAndAttemptPagesAreCompleteWhileRecordsChange(t *testing.T) {
	for _, store := range []struct {
		name string
		open func(t *testing.T, db *sql.DB) deadletter.Store
	}{
		{"mysql", func(t *testing.T, db *sql.DB) deadletter.Store {
			st, err := deadletter.OpenMySQL(context.Background(), db, "")
			if err != nil {
				t.Fatal(err)
			}
			return st
		}},
		{"file", func(t *testing.T, _ *sql.DB) deadletter.Store {
			st, err := deadletter.OpenFile(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return st
		}},
	} {
		t.Run(store.name, func(t *testing.T) {
			pf := newPagingFixture(t, func(db *sql.DB) deadletter.Store { return store.open(t, db) })
			ctx := context.Background()
			put := func(i int) {
				t.Helper()
				tenant := []string{"A", "B"}[i%2]
				err := pf.dl.Put(ctx, deadletter.Letter{Sink: "hooks/r" + tenant, Tenant: tenant, Event: &event.Event{ID: fmt.Sprint("evt-", i)}, Reason: "gave up"})
				if err != nil {
					t.Fatal(err)
				}
				if err := pf.at.Append(ctx, []attempts.Attempt{{Time: time.Now(), Sink: "hooks", Endpoint: "r" + tenant, Tenant: attempts.TenantKey(tenant), EventID: fmt.Sprint("evt-", i), Number: 1, Outcome: attempts.OutcomeFailed}}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 50 {
				put(i)
			}
			// Another sink's dead letters (not a webhook sink's): never listed.
			_ = pf.dl.Put(ctx, deadletter.Letter{Sink: "kafka", Event: &event.Event{ID: "other"}, Reason: "x"})
			all, err := pf.dl.List(ctx, deadletter.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			tenantOf := map[string]string{}
			for _, r := range all {
				tenantOf[r.ID] = r.Tenant
			}
			recs, err := pf.at.Search(ctx, attempts.Query{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			attemptTenant := map[string]string{}
			for _, r := range recs {
				attemptTenant[fmt.Sprint(r.ID)] = strings.TrimPrefix(r.Tenant, "")
			}
			for _, c := range []struct {
				name, token, query, tenant string
			}{
				{"the operator", pf.op, "", ""},
				{"the operator's filter by tenant", pf.op, "&tenant=B", "B"},
				{"tenant A", pf.tenA, "", "A"},
			} {
				t.Run(c.name+" dead letters", func(t *testing.T) {
					cur, _ := pf.dl.List(ctx, deadletter.Filter{})
					present := map[string]bool{}
					var ids []string
					for _, r := range cur {
						present[r.ID] = true
						ids = append(ids, r.ID)
					}
					n := len(cur)
					seen := pf.walk(t, "/api/v1/dead-letters?limit=4"+c.query, c.token, "dead_letters", "id", func(page int) {
						put(1000 + n + page)
						id := ids[len(ids)-1]
						if page%2 == 1 {
							id = ids[0]
						}
						ids = slices.DeleteFunc(ids, func(x string) bool { return x == id })
						if err := pf.dl.Delete(ctx, id); err != nil {
							t.Fatal(err)
						}
						delete(present, id)
					})
					now, _ := pf.dl.List(ctx, deadletter.Filter{})
					for _, r := range now {
						tenantOf[r.ID] = r.Tenant
					}
					var want []string
					for id := range present {
						if tenantOf[id] != "" && (c.tenant == "" || tenantOf[id] == c.tenant) {
							want = append(want, id)
						}
					}
					once(t, c.name, seen, want, func(id string) bool {
						return tenantOf[id] != "" && (c.tenant == "" || tenantOf[id] == c.tenant)
					})
					if len(want) < 10 {
						t.Fatalf("only %d records throughout: the test proves little", len(want))
					}
				})
				t.Run(c.name+" attempts", func(t *testing.T) {
					cur, _ := pf.at.Search(ctx, attempts.Query{Limit: 10000})
					present := map[string]bool{}
					var ids []int64
					for _, r := range cur {
						present[fmt.Sprint(r.ID)] = true
						attemptTenant[fmt.Sprint(r.ID)] = r.Tenant
						ids = append(ids, r.ID)
					}
					seen := pf.walk(t, "/api/v1/attempts?limit=4"+c.query, c.token, "attempts", "id", func(page int) {
						put(5000 + page)
						id := ids[len(ids)-1] // the oldest: ahead of the walk, newest first
						if page%2 == 1 {
							id = ids[0]
						}
						ids = slices.DeleteFunc(ids, func(x int64) bool { return x == id })
						if _, err := pf.db.Exec("DELETE FROM "+config.DefaultAttemptsTable+" WHERE id = ?", id); err != nil {
							t.Fatal(err)
						}
						delete(present, fmt.Sprint(id))
					})
					key := attempts.TenantKey(c.tenant)
					var want []string
					for id := range present {
						if c.tenant == "" || attemptTenant[id] == key {
							want = append(want, id)
						}
					}
					once(t, c.name, seen, want, func(id string) bool {
						tk, known := attemptTenant[id]
						return known && (c.tenant == "" || tk == key)
					})
					if len(want) < 10 {
						t.Fatalf("only %d records throughout: the test proves little", len(want))
					}
				})
			}
		})
	}
}

// A cursor that is not one the list gave is a 400 problem saying how to
// go on, on every list; so is a limit out of range, and a tenant naming
// another tenant.
func TestListsRefuseABadCursorLimitOrTenant(t *testing.T) {
	f := newFixture(t)
	other := paging.EncodeCursor(cursorAttempts, "5")
	for _, list := range []string{"endpoints", "attempts", "dead-letters"} {
		for _, q := range []string{"iterator=%25%25not-base64", "iterator=" + other + "x", "iterator=" + paging.EncodeCursor('x', "1"), "iterator=" + paging.EncodeCursor(cursorEndpoints, "hooks"), "limit=0", "limit=1001", "limit=ten"} {
			res, body := f.do(t, "GET", "/api/v1/"+list+"?"+q, f.op, "")
			isProblem(t, list+"?"+q, res, body, 400)
			if !strings.Contains(body, "iterator") && !strings.Contains(body, "limit") {
				t.Errorf("%s?%s: %s, want it to say how to fix it", list, q, body)
			}
		}
		res, body := f.do(t, "GET", "/api/v1/"+list+"?tenant=B", f.tenA, "")
		isProblem(t, "tenant A asking for tenant B's "+list, res, body, 400)
	}
	// The endpoints' cursor is not the attempts' nor the dead letters'.
	res, body := f.do(t, "GET", "/api/v1/attempts?iterator="+paging.EncodeCursor(cursorEndpoints, "hooks", "1", "a1"), f.op, "")
	isProblem(t, "an endpoints cursor given to the attempts", res, body, 400)
}
