package console

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/gateway"
)

var update = flag.Bool("update", false, "rewrite docs/console-api.md from the OpenAPI document")

// fixture is a console over in-memory parts: a webhook sink "hooks" with
// a static endpoint "ops-hook" and table rows a1 (tenant A) and b1
// (tenant B), an attempt and a dead letter of each.
type fixture struct {
	s                  *Server
	h                  http.Handler
	relay              *fakeRelay
	table              *memTable
	op, tenA, tenB     string
	now                time.Time
	logs               *strings.Builder
	attemptA, attemptB int64
}

func newFixture(t *testing.T, mutate ...func(*config.Console)) *fixture {
	t.Helper()
	f := &fixture{relay: &fakeRelay{}, now: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), logs: &strings.Builder{}}
	var hop, ha, hb string
	f.op, hop = NewToken()
	f.tenA, ha = NewToken()
	f.tenB, hb = NewToken()
	cc := config.Console{Listen: "127.0.0.1:0", LinkKeyEnv: "K", RateLimit: 1000, Session: time.Hour, Tokens: []config.ConsoleToken{
		{Name: "ops", Hash: hop}, {Name: "tenant-a", Hash: ha, Tenant: "A"}, {Name: "tenant-b", Hash: hb, Tenant: "B"}}}
	for _, m := range mutate {
		m(&cc)
	}
	f.table = &memTable{static: []string{"ops-hook"}, rows: map[string]gateway.TableRow{
		"a1": {ID: "a1", URL: "https://a.example/hook", Tenant: "A", Enabled: true, Secrets: 1},
		"b1": {ID: "b1", URL: "https://b-secret.example/hook", Tenant: "B", Enabled: true, Secrets: 1},
	}}
	at := &memAttempts{}
	_ = at.Append(context.Background(), []attempts.Attempt{
		{Time: f.now, Sink: "hooks", Endpoint: "a1", Tenant: "A", EventID: "evt-a", EventType: "order.created", Number: 1, Status: 500, Outcome: attempts.OutcomeRetry, Answer: []byte("a-answer")},
		{Time: f.now, Sink: "hooks", Endpoint: "b1", Tenant: "B", EventID: "evt-b", EventType: "order.created", Number: 1, Status: 500, Outcome: attempts.OutcomeRetry, Answer: []byte("b-answer")},
	})
	f.attemptA, f.attemptB = 1, 2
	dl := &memDeadLetters{}
	_ = dl.Put(context.Background(), deadletter.Letter{Sink: "hooks/a1", Tenant: "A", Event: &event.Event{ID: "evt-a"}, Reason: "gave up"})
	_ = dl.Put(context.Background(), deadletter.Letter{Sink: "hooks/b1", Tenant: "B", Event: &event.Event{ID: "evt-b"}, Reason: "gave up on b-answer"})
	stats := func(string) map[string][]gateway.EndpointStats {
		return map[string][]gateway.EndpointStats{"hooks": {
			{Endpoint: "hooks/a1", State: "attached", LagSeconds: 1.5},
			{Endpoint: "hooks/b1", State: "attached", LagSeconds: 2.5, Failing: f.now},
			{Endpoint: "hooks/ops-hook", State: "attached"},
		}}
	}
	s, err := New(Options{Config: cc, Key: []byte(strings.Repeat("k", 32)), Sinks: []Sink{{Name: "hooks", Static: []string{"ops-hook"}, Table: f.table}},
		Stats: stats, Attempts: at, DeadLetters: dl, Relay: f.relay, Now: func() time.Time { return f.now },
		Logger: slog.New(slog.NewTextHandler(f.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	f.s, f.h = s, s.Handler()
	return f
}

// do makes a request with token (may be "") and returns the answer.
func (f *fixture) do(t *testing.T, method, path, token, body string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, path, rd)
	r.RemoteAddr = "127.0.0.1:5555"
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w.Result(), w.Body.String()
}

// isProblem fails unless the answer is a problem document of status.
func isProblem(t *testing.T, what string, res *http.Response, body string, status ...int) {
	t.Helper()
	if !slices.Contains(status, res.StatusCode) {
		t.Errorf("%s: status %d, want %v: %s", what, res.StatusCode, status, body)
		return
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("%s: Content-Type %q, want application/problem+json", what, ct)
	}
	var p problem
	if err := json.Unmarshal([]byte(body), &p); err != nil || p.Status != res.StatusCode || p.Type == "" || p.Title == "" {
		t.Errorf("%s: not an RFC 9457 problem (%v): %s", what, err, body)
	}
}

// Every route, tried with tenant A's token against tenant B's endpoint,
// attempt and dead letter, is refused or shows nothing of B's.
func TestATenantTokenCannotReachAnotherTenantsThings(t *testing.T) {
	f := newFixture(t)
	// (A 404 may repeat the name asked for; it shows nothing else.)
	leaks := []string{"b-secret", "evt-b", "b-answer", `"b1"`, "tenant B", `"B"`}
	// Each route's request at B's things.
	reqs := map[string]struct{ path, body string }{
		"listSinks":         {"/api/v1/sinks", ""},
		"listEndpoints":     {"/api/v1/endpoints?sink=hooks", ""},
		"createEndpoint":    {"/api/v1/endpoints/hooks", `{"id":"b2","url":"https://b-secret.example/2","tenant":"B"}`},
		"getEndpoint":       {"/api/v1/endpoints/hooks/b1", ""},
		"updateEndpoint":    {"/api/v1/endpoints/hooks/b1", `{"url":"https://evil.example/"}`},
		"deleteEndpoint":    {"/api/v1/endpoints/hooks/b1", ""},
		"disableEndpoint":   {"/api/v1/endpoints/hooks/b1/disable", ""},
		"enableEndpoint":    {"/api/v1/endpoints/hooks/b1/enable", ""},
		"rotateSecret":      {"/api/v1/endpoints/hooks/b1/rotate-secret", `{}`},
		"recoverEndpoint":   {"/api/v1/endpoints/hooks/b1/recover", `{"since":"1h"}`},
		"listAttempts":      {"/api/v1/attempts?sink=hooks&endpoint=b1&event_id=evt-b", ""},
		"getAttempt":        {"/api/v1/attempts/2", ""},
		"resendAttempt":     {"/api/v1/attempts/2/resend", ""},
		"listDeadLetters":   {"/api/v1/dead-letters?sink=hooks/b1", ""},
		"replayDeadLetters": {"/api/v1/dead-letters/replay", `{"ids":["2"]}`},
		"purgeDeadLetters":  {"/api/v1/dead-letters/purge", `{"ids":["2"]}`},
		"createLink":        {"/api/v1/links", `{"tenant":"B"}`},
	}
	for _, rt := range apiRoutes {
		rq, ok := reqs[rt.id]
		if !ok {
			t.Errorf("route %s %s (%s) is not tried: add it to this test", rt.method, rt.path, rt.id)
			continue
		}
		res, body := f.do(t, rt.method, rq.path, f.tenA, rq.body)
		for _, l := range leaks {
			if strings.Contains(body, l) {
				t.Errorf("%s %s: the answer shows tenant B's %s: %s", rt.method, rq.path, l, body)
			}
		}
		if rt.method == "GET" && !strings.Contains(rt.path, "{") {
			if res.StatusCode != http.StatusOK {
				t.Errorf("%s %s: status %d: %s", rt.method, rq.path, res.StatusCode, body)
			}
			continue
		}
		isProblem(t, rt.method+" "+rq.path, res, body, http.StatusNotFound, http.StatusForbidden)
	}
	// B's endpoint is answered as one that does not exist: no oracle.
	_, b1 := f.do(t, "GET", "/api/v1/endpoints/hooks/b1", f.tenA, "")
	_, none := f.do(t, "GET", "/api/v1/endpoints/hooks/zz", f.tenA, "")
	if strings.ReplaceAll(b1, "b1", "zz") != none {
		t.Errorf("another tenant's endpoint is told apart from a missing one:\n%s\n%s", b1, none)
	}
	if len(f.relay.calls) > 0 {
		t.Errorf("the relay was asked %v for tenant B's things by tenant A", f.relay.calls)
	}
	if r := f.table.rows["b1"]; r.URL != "https://b-secret.example/hook" || !r.Enabled {
		t.Errorf("tenant B's row changed: %+v", r)
	}
	if _, ok := f.table.rows["b2"]; ok {
		t.Error("tenant A made a row of tenant B")
	}
	// An operator mints a link that opens tenant B's view.
	res, body := f.do(t, "POST", "/api/v1/links", f.op, `{"tenant":"B","ttl":"5m"}`)
	var link struct{ Path string }
	_ = json.Unmarshal([]byte(body), &link)
	if res.StatusCode != 201 || !strings.HasPrefix(link.Path, "/t/l1.") {
		t.Fatalf("mint a link: %d %s", res.StatusCode, body)
	}
	if res, body := f.do(t, "GET", link.Path, "", ""); res.StatusCode != 200 || !strings.Contains(body, "hooks/b1") || strings.Contains(body, "hooks/a1") {
		t.Errorf("the minted link's view: %d\n%s", res.StatusCode, body)
	}
	// The same routes work for B's own token (so the refusals above are
	// the tenant's, not a broken route).
	res, body = f.do(t, "GET", "/api/v1/attempts/2", f.tenB, "")
	if res.StatusCode != 200 || !strings.Contains(body, "evt-b") {
		t.Errorf("tenant B cannot read its own attempt: %d %s", res.StatusCode, body)
	}
	res, body = f.do(t, "POST", "/api/v1/attempts/2/resend", f.tenB, "")
	if res.StatusCode != 202 || !slices.Contains(f.relay.calls, "resend hooks/b1 evt-b") {
		t.Errorf("tenant B cannot resend its own event: %d %s %v", res.StatusCode, body, f.relay.calls)
	}
}

// A tenant sees its own endpoints only, never the configuration's; the
// operator sees all of them with state, health and lag.
func TestEndpointsAreScopedAndCarryTheGatewaysFigures(t *testing.T) {
	f := newFixture(t)
	var got struct{ Endpoints []Endpoint }
	_, body := f.do(t, "GET", "/api/v1/endpoints", f.op, "")
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, e := range got.Endpoints {
		keys = append(keys, e.Key+":"+e.State+":"+e.Health)
	}
	want := []string{"hooks/ops-hook:attached:ok", "hooks/a1:attached:ok", "hooks/b1:attached:failing"}
	if !slices.Equal(keys, want) {
		t.Errorf("operator sees %v, want %v", keys, want)
	}
	_, body = f.do(t, "GET", "/api/v1/endpoints", f.tenA, "")
	got.Endpoints = nil
	_ = json.Unmarshal([]byte(body), &got)
	if len(got.Endpoints) != 1 || got.Endpoints[0].Key != "hooks/a1" || got.Endpoints[0].Stats == nil || got.Endpoints[0].Stats.LagSeconds != 1.5 {
		t.Errorf("tenant A sees %+v, want a1 with its lag", got.Endpoints)
	}
}

func TestWritesFollowTheTablesRulesAndAreAudited(t *testing.T) {
	f := newFixture(t)
	res, body := f.do(t, "POST", "/api/v1/endpoints/hooks", f.tenA, `{"id":"a2","url":"https://a.example/2"}`)
	a2 := namespace("A") + "a2" // the row id of tenant A's endpoint named a2
	if res.StatusCode != 201 || !strings.Contains(body, `"secret":"whsec_new"`) || f.table.rows[a2].Tenant != "A" {
		t.Errorf("tenant create: %d %s %+v", res.StatusCode, body, f.table.rows[a2])
	}
	res, body = f.do(t, "POST", "/api/v1/endpoints/hooks", f.op, `{"id":"ops-hook","url":"https://x.example/"}`)
	isProblem(t, "a row named as a static endpoint", res, body, http.StatusUnprocessableEntity)
	res, body = f.do(t, "DELETE", "/api/v1/endpoints/hooks/ops-hook", f.op, "")
	isProblem(t, "deleting a static endpoint", res, body, http.StatusConflict)
	res, body = f.do(t, "POST", "/api/v1/endpoints/hooks", f.op, `{"id":"a1","url":"https://x.example/"}`)
	isProblem(t, "a row that exists", res, body, http.StatusConflict)
	res, body = f.do(t, "POST", "/api/v1/endpoints/hooks", f.op, `{"id":"x","url":"https://x.example/","colour":"red"}`)
	isProblem(t, "an unknown field", res, body, http.StatusBadRequest)
	if !strings.Contains(body, "colour") {
		t.Errorf("the error does not name the field: %s", body)
	}
	res, _ = f.do(t, "POST", "/api/v1/endpoints/hooks/a1/disable", f.tenA, "")
	if res.StatusCode != 200 || f.table.rows["a1"].Enabled {
		t.Errorf("disable: %d, row %+v", res.StatusCode, f.table.rows["a1"])
	}
	// An endpoint of the configuration cannot be disabled here, but one the
	// relay disabled for failing is enabled (its checkpoint's mark cleared).
	res, body = f.do(t, "POST", "/api/v1/endpoints/hooks/ops-hook/disable", f.op, "")
	isProblem(t, "disabling a static endpoint", res, body, http.StatusConflict)
	res, _ = f.do(t, "POST", "/api/v1/endpoints/hooks/ops-hook/enable", f.op, "")
	if res.StatusCode != 200 || !slices.Contains(f.relay.calls, "enable hooks/ops-hook") {
		t.Errorf("enable a static endpoint: %d, relay asked %v", res.StatusCode, f.relay.calls)
	}
	res, _ = f.do(t, "POST", "/api/v1/endpoints/hooks/a1/enable", f.tenA, "")
	if res.StatusCode != 200 || !f.table.rows["a1"].Enabled || !slices.Contains(f.relay.calls, "enable hooks/a1") {
		t.Errorf("enable a1: %d, row %+v, relay asked %v", res.StatusCode, f.table.rows["a1"], f.relay.calls)
	}
	logs := f.logs.String()
	for _, want := range []string{`who=tenant-a tenant=A action="create endpoint" target=hooks/` + a2 + ` result=ok`, `who=tenant-a tenant=A action="disable endpoint" target=hooks/a1 result=ok`, `who=ops tenant="" action="create endpoint" target=hooks/ops-hook result=`} {
		if !strings.Contains(logs, want) {
			t.Errorf("no audit line %q in\n%s", want, logs)
		}
	}
	if strings.Contains(logs, "whsec_new") {
		t.Error("the audit log shows a secret")
	}
}

func TestRequestsWithoutAValidTokenAreRefused(t *testing.T) {
	f := newFixture(t)
	for _, tok := range []string{"", "orc_wrong", "l1.QQ.99999999999.bad"} {
		res, body := f.do(t, "GET", "/api/v1/endpoints", tok, "")
		isProblem(t, "token "+tok, res, body, http.StatusUnauthorized)
	}
	// A link signed with the key, expired, is refused; a current one is
	// tenant A.
	old := f.s.sign.Link("A", f.now.Add(-time.Second))
	res, body := f.do(t, "GET", "/api/v1/endpoints", old, "")
	isProblem(t, "an expired link", res, body, http.StatusUnauthorized)
	res, body = f.do(t, "GET", "/api/v1/endpoints", f.s.sign.Link("A", f.now.Add(time.Minute)), "")
	if res.StatusCode != 200 || !strings.Contains(body, "hooks/a1") || strings.Contains(body, "hooks/b1") {
		t.Errorf("a link of tenant A: %d %s", res.StatusCode, body)
	}
}

func TestEachTokenIsRateLimited(t *testing.T) {
	f := newFixture(t, func(c *config.Console) { c.RateLimit = 1 })
	var last *http.Response
	var body string
	for range 3 { // a burst of 2, then refused: the clock does not move
		last, body = f.do(t, "GET", "/api/v1/sinks", f.op, "")
	}
	isProblem(t, "the third request", last, body, http.StatusTooManyRequests)
	if last.Header.Get("Retry-After") != "1" {
		t.Errorf("Retry-After %q, want 1", last.Header.Get("Retry-After"))
	}
	if res, _ := f.do(t, "GET", "/api/v1/sinks", f.tenA, ""); res.StatusCode != 200 {
		t.Errorf("another token is limited too: %d", res.StatusCode)
	}
}

// Every route the mux serves under /api is in the OpenAPI document, and
// every operation of the document is served.
func TestTheOpenAPIDocumentIsTheRouteList(t *testing.T) {
	f := newFixture(t)
	res, body := f.do(t, "GET", "/api/openapi.json", "", "")
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil || res.StatusCode != 200 || doc.OpenAPI != "3.1.0" {
		t.Fatalf("/api/openapi.json: %d %v %s", res.StatusCode, err, body[:min(len(body), 200)])
	}
	documented := map[string]bool{}
	param := regexp.MustCompile(`\{[a-z_]+\}`)
	for path, ops := range doc.Paths {
		for m := range ops {
			pattern := strings.ToUpper(m) + " " + path
			documented[pattern] = true
			// The mux serves it with this very pattern.
			r := httptest.NewRequest(strings.ToUpper(m), param.ReplaceAllString(path, "x1"), nil)
			if _, got := f.s.mux.Handler(r); got != pattern {
				t.Errorf("documented %s is served by %q", pattern, got)
			}
		}
	}
	for _, p := range f.s.patterns {
		if !documented[p] {
			t.Errorf("the mux serves %s, which the document does not describe", p)
		}
	}
	if len(documented) != len(f.s.patterns) {
		t.Errorf("%d documented operations, %d served", len(documented), len(f.s.patterns))
	}
}

func TestTheAPIReferenceIsGenerated(t *testing.T) {
	const file = "../docs/console-api.md"
	want := Reference()
	if *update {
		if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(file)
	if err != nil || string(got) != want {
		t.Errorf("%s differs from the OpenAPI document (%v); run go test ./console/ -run APIReference -update", file, err)
	}
}

// Issue 41's reproduction, item 1: tenant A's endpoint a1 dead-letters an
// event; A deletes a1; tenant B makes its own a1. B sees nothing of A's,
// and A's records stay A's: listed, never sent to B's a1 (not by the
// operator either), purged by A.
func TestADeletedEndpointsRecordsStayWithItsTenant(t *testing.T) {
	f := newFixture(t)
	type letters struct {
		DeadLetters []deadletter.Record `json:"dead_letters"`
	}
	list := func(token string) []string {
		t.Helper()
		res, body := f.do(t, "GET", "/api/v1/dead-letters", token, "")
		var got letters
		if err := json.Unmarshal([]byte(body), &got); err != nil || res.StatusCode != 200 {
			t.Fatalf("list dead letters: %d %v %s", res.StatusCode, err, body)
		}
		var ids []string
		for _, r := range got.DeadLetters {
			ids = append(ids, r.Event.ID)
		}
		return ids
	}
	if res, body := f.do(t, "DELETE", "/api/v1/endpoints/hooks/a1", f.tenA, ""); res.StatusCode != 204 {
		t.Fatalf("A deletes a1: %d %s", res.StatusCode, body)
	}
	if res, body := f.do(t, "POST", "/api/v1/endpoints/hooks", f.tenB, `{"id":"a1","url":"https://b-secret.example/a1"}`); res.StatusCode != 201 {
		t.Fatalf("B makes a1: %d %s", res.StatusCode, body)
	}
	if got := list(f.tenB); !slices.Equal(got, []string{"evt-b"}) {
		t.Errorf("tenant B lists dead letters %v, want its own evt-b only", got)
	}
	if got := list(f.tenA); !slices.Equal(got, []string{"evt-a"}) {
		t.Errorf("tenant A lists dead letters %v, want its evt-a, of its deleted endpoint", got)
	}
	if got := list(f.op); !slices.Equal(got, []string{"evt-a", "evt-b"}) {
		t.Errorf("the operator lists dead letters %v, want both", got)
	}
	if res, body := f.do(t, "POST", "/api/v1/dead-letters/replay", f.tenB, `{"ids":["1"]}`); res.StatusCode != 404 || strings.Contains(body, "evt-a") {
		t.Errorf("B replays A's dead letter: %d %s", res.StatusCode, body)
	}
	for who, token := range map[string]string{"A": f.tenA, "the operator": f.op} {
		res, body := f.do(t, "POST", "/api/v1/dead-letters/replay", token, `{"ids":["1"]}`)
		isProblem(t, who+" replays A's dead letter to B's a1", res, body, http.StatusConflict)
		if strings.Contains(body, `"B"`) || strings.Contains(body, "tenant B") {
			t.Errorf("the refusal names who has the endpoint now: %s", body)
		}
	}
	// A's attempt: not B's to see, and not sent to B's a1 by anyone.
	if res, body := f.do(t, "GET", "/api/v1/attempts?endpoint=a1", f.tenB, ""); res.StatusCode != 200 || strings.Contains(body, "evt-a") {
		t.Errorf("B lists a1's attempts: %d %s", res.StatusCode, body)
	}
	for who, token := range map[string]string{"A": f.tenA, "the operator": f.op} {
		res, body := f.do(t, "POST", fmt.Sprintf("/api/v1/attempts/%d/resend", f.attemptA), token, "")
		isProblem(t, who+" resends A's attempt to B's a1", res, body, http.StatusNotFound)
	}
	if len(f.relay.calls) > 0 {
		t.Errorf("the relay was asked %v", f.relay.calls)
	}
	// A purges its record; B cannot.
	if res, body := f.do(t, "POST", "/api/v1/dead-letters/purge", f.tenB, `{"ids":["1"]}`); res.StatusCode != 404 {
		t.Errorf("B purges A's dead letter: %d %s", res.StatusCode, body)
	}
	if res, body := f.do(t, "POST", "/api/v1/dead-letters/purge", f.tenA, `{"ids":["1"]}`); res.StatusCode != 200 || !strings.Contains(body, `"purged":1`) {
		t.Errorf("A purges its dead letter: %d %s", res.StatusCode, body)
	}
	if got := list(f.op); !slices.Equal(got, []string{"evt-b"}) {
		t.Errorf("after A's purge the operator lists %v, want evt-b only", got)
	}
}

// A dead letter stored before records kept their tenant is the
// operator's: no tenant lists it, even one whose endpoint it names.
func TestARecordOfNoTenantIsTheOperatorsOnly(t *testing.T) {
	f := newFixture(t)
	dl := f.s.o.DeadLetters
	_ = dl.Put(context.Background(), deadletter.Letter{Sink: "hooks/a1", Event: &event.Event{ID: "evt-old"}, Reason: "gave up"})
	if _, body := f.do(t, "GET", "/api/v1/dead-letters", f.tenA, ""); strings.Contains(body, "evt-old") {
		t.Errorf("tenant A lists a record of no tenant: %s", body)
	}
	if _, body := f.do(t, "GET", "/api/v1/dead-letters", f.op, ""); !strings.Contains(body, "evt-old") {
		t.Errorf("the operator does not list a record of no tenant: %s", body)
	}
}
