package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
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

// BenchmarkAPIPage serves pages of 100 through the console's handler over
// a private MariaDB holding rows endpoint rows (one tenant each, as a
// SaaS gateway's), as many attempts and as many dead letters: a page of
// endpoints (the operator's, from the middle of the table, and a
// tenant's), one endpoint, and the attempts and dead letters of one
// endpoint, and a page of all dead letters. Each reports its p99 besides
// the mean: the bar is 10 ms p99, the same at every size.
//
//	go test -run '^$' -bench APIPage -benchtime 200x ./console/
func BenchmarkAPIPage(b *testing.B) {
	srv := testserver.Start(b, testserver.Options{NoBinlog: true})
	for _, rows := range []int{1000, 100_000} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			benchAPIPages(b, srv, rows)
		})
	}
}

func benchAPIPages(b *testing.B, srv *testserver.Server, rows int) {
	ctx := context.Background()
	dbname := srv.NewDatabase(b)
	db := srv.DB(b, dbname)
	mustExec := func(q string, args ...any) {
		b.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			b.Fatal(err)
		}
	}
	mustExec(webhook.EndpointsTableSchema)
	mustExec(fmt.Sprintf("INSERT INTO outbox_endpoints (id, url, secrets, tenant) SELECT CONCAT('ep', LPAD(seq, 6, '0')), 'https://r.example/hook', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', CONCAT('t', seq) FROM seq_1_to_%d", rows))
	sc := config.Sink{Name: "hooks", Type: "webhook", Config: &webhook.SinkConfig{
		EndpointsTable: &webhook.TableConfig{Table: dbname + ".outbox_endpoints", TenantHeader: "tenant"}}}
	fo, _ := gateway.FanOutFor(sc)
	ta, err := fo.Admin(sc.Name, sc.Config, db)
	if err != nil {
		b.Fatal(err)
	}
	at, err := attempts.OpenMySQL(ctx, db, "")
	if err != nil {
		b.Fatal(err)
	}
	dl, err := deadletter.OpenMySQL(ctx, db, "")
	if err != nil {
		b.Fatal(err)
	}
	// Attempts and dead letters: one of each per endpoint row, stored in
	// batches.
	const batch = 1000
	for i := 0; i < rows; i += batch {
		var as []attempts.Attempt
		var vals []string
		var args []any
		for j := i; j < min(i+batch, rows); j++ {
			ep, tenant := fmt.Sprintf("ep%06d", j+1), fmt.Sprintf("t%d", j+1)
			as = append(as, attempts.Attempt{Time: time.Now(), Sink: "hooks", Endpoint: ep, Tenant: attempts.TenantKey(tenant), EventID: fmt.Sprint("evt-", j), Number: 1, Status: 500, Outcome: attempts.OutcomeFailed})
			id := fmt.Sprintf("20261207T000000.%09dZ-%06d", j, j%1000000)
			rec := deadletter.Record{ID: id, Sink: "hooks/" + ep, Tenant: tenant, Event: &event.Event{ID: fmt.Sprint("evt-", j)}, Reason: "gave up", Attempts: 5, Stored: time.Now().UTC()}
			blob, _ := json.Marshal(rec)
			vals = append(vals, "(?,?,?,?,'',?,5,NOW(6),NOW(6),NOW(6),?)")
			args = append(args, id, rec.Sink, tenant, rec.Event.ID, rec.Reason, blob)
		}
		if err := at.Append(ctx, as); err != nil {
			b.Fatal(err)
		}
		mustExec("INSERT INTO "+config.DefaultDeadLetterTable+" (id, sink, tenant, event_id, aggregate_id, reason, attempts, first_failed, last_failed, stored, record) VALUES "+strings.Join(vals, ","), args...)
	}

	op, hop := NewToken()
	ten, hten := NewToken()
	mid := fmt.Sprintf("ep%06d", rows/2)
	tenant := fmt.Sprintf("t%d", rows/2)
	cc := config.Console{Listen: "127.0.0.1:0", LinkKeyEnv: "K", RateLimit: 1e9, Session: time.Hour, Tokens: []config.ConsoleToken{
		{Name: "ops", Hash: hop}, {Name: "tenant", Hash: hten, Tenant: tenant}}}
	s, err := New(Options{Config: cc, Key: []byte(strings.Repeat("k", 32)), Sinks: []Sink{{Name: "hooks", Table: ta}},
		Stat: func(string, string) (gateway.EndpointStats, bool) {
			return gateway.EndpointStats{State: "attached"}, true
		},
		Attempts: at, DeadLetters: dl})
	if err != nil {
		b.Fatal(err)
	}
	h := s.Handler()
	var dlMid string
	_ = db.QueryRow("SELECT id FROM "+config.DefaultDeadLetterTable+" ORDER BY id LIMIT 1 OFFSET ?", rows/2).Scan(&dlMid)
	for _, c := range []struct {
		name, token, path string
		n                 int // the items the page must hold
	}{
		{"endpoints page", op, "/api/v1/endpoints?limit=100&iterator=" + url.QueryEscape(endpointKey{"hooks", 1, mid}.cursor()), 100},
		{"tenant's endpoints", ten, "/api/v1/endpoints?limit=100", 1},
		{"one endpoint", op, "/api/v1/endpoints/hooks/" + mid, -1},
		{"attempts of one endpoint", op, "/api/v1/attempts?limit=100&sink=hooks&endpoint=" + mid, 1},
		{"dead letters of one endpoint", op, "/api/v1/dead-letters?limit=100&sink=hooks/" + mid, 1},
		{"dead letters page", op, "/api/v1/dead-letters?limit=100&iterator=" + url.QueryEscape(paging.EncodeCursor(cursorDeadLetters, dlMid)), 100},
		{"attempts page", op, "/api/v1/attempts?limit=100&iterator=" + url.QueryEscape(paging.EncodeCursor(cursorAttempts, fmt.Sprint(rows/2))), 100},
	} {
		b.Run(strings.ReplaceAll(c.name, " ", "_"), func(b *testing.B) {
			get := func() string {
				r := httptest.NewRequest("GET", c.path, nil)
				r.Header.Set("Authorization", "Bearer "+c.token)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("GET %s: %d %s", c.path, w.Code, w.Body.String())
				}
				return w.Body.String()
			}
			if c.n >= 0 {
				var doc map[string][]json.RawMessage
				_ = json.Unmarshal([]byte(get()), &doc)
				got := 0
				for _, v := range doc {
					got += len(v)
				}
				if got != c.n {
					b.Fatalf("GET %s holds %d items, want %d", c.path, got, c.n)
				}
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				get()
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
