package attempts_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/metrics"
)

var srv *testserver.Server

func TestMain(m *testing.M) { testserver.Main(m, testserver.Options{NoBinlog: true}, &srv) }

// stores are the two Stores, each opened empty by the conformance suite.
var stores = []struct {
	name string
	open func(t *testing.T) attempts.Store
}{
	{"file", func(t *testing.T) attempts.Store {
		st, err := attempts.OpenFile(filepath.Join(t.TempDir(), "checkpoints.json.attempts"), 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}},
	{"mysql", func(t *testing.T) attempts.Store {
		db := srv.DB(t, srv.NewDatabase(t))
		st, err := attempts.OpenMySQL(context.Background(), db, "")
		if err != nil {
			t.Fatal(err)
		}
		return st
	}},
}

// Every Store passes one suite.
func TestStoreConformance(t *testing.T) {
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			for _, c := range conformance {
				t.Run(c.name, func(t *testing.T) { c.run(t, s.open(t)) })
			}
		})
	}
}

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)

// fixture is ten attempts, stored in this order (ids 1..10 relative to the
// first), across two sinks, three endpoints, two tenants and three events.
func fixture() []attempts.Attempt {
	at := func(min int, sink, ep, tenant, id string, n, status int, class, outcome string) attempts.Attempt {
		return attempts.Attempt{Time: t0.Add(time.Duration(min) * time.Minute), Sink: sink, Endpoint: ep, Tenant: tenant,
			EventID: id, EventType: "order.created", Number: n, Status: status, Class: class, Outcome: outcome,
			Duration: time.Duration(min+1) * time.Millisecond}
	}
	return []attempts.Attempt{
		at(0, "wh", "billing", "acme", "e1", 1, 500, "", attempts.OutcomeRetry),                     // 0
		at(1, "wh", "billing", "acme", "e1", 2, 200, "", attempts.OutcomeDelivered),                 // 1
		at(2, "wh", "crm", "", "e1", 1, 0, attempts.ClassTimeout, attempts.OutcomeRetry),            // 2
		at(3, "wh", "crm", "", "e1", 2, 204, "", attempts.OutcomeDelivered),                         // 3
		at(4, "wh", "billing", "acme", "e2", 1, 200, "", attempts.OutcomeDelivered),                 // 4
		at(5, "wh2", "billing", "globex", "e2", 1, 0, attempts.ClassEgress, attempts.OutcomeFailed), // 5
		at(6, "wh", "crm", "", "e3", 1, 503, "", attempts.OutcomeRetry),                             // 6
		at(7, "wh", "crm", "", "e3", 2, 500, "", attempts.OutcomeFailed),                            // 7
		at(8, "wh2", "ledger", "globex", "e3", 1, 200, "", attempts.OutcomeDelivered),               // 8
		// Stored last, but started before most: ids follow the order of
		// storing, not of time.
		at(-1, "wh", "billing", "acme", "e3", 1, 500, "", attempts.OutcomeRetry), // 9
	}
}

type conformanceCase struct {
	name string
	run  func(t *testing.T, st attempts.Store)
}

var ctx = context.Background()

// indexes returns which fixture attempts recs are (by their ids, first id
// base), in the order returned.
func indexes(recs []attempts.Record, base int64) []int {
	out := []int{}
	for _, r := range recs {
		out = append(out, int(r.ID-base))
	}
	return out
}

func appendFixture(t *testing.T, st attempts.Store) (base int64) {
	t.Helper()
	if err := st.Append(ctx, fixture()); err != nil {
		t.Fatal(err)
	}
	all, err := st.Search(ctx, attempts.Query{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 10 {
		t.Fatalf("search of everything: %d records, want 10", len(all))
	}
	return all[len(all)-1].ID
}

var conformance = []conformanceCase{
	{"an empty store finds nothing", func(t *testing.T, st attempts.Store) {
		recs, err := st.Search(ctx, attempts.Query{EventID: "e1"})
		if err != nil || len(recs) != 0 {
			t.Fatalf("Search = %v, %v; want none", recs, err)
		}
		if n, err := st.Prune(ctx, time.Now(), 1); err != nil || n != 0 {
			t.Fatalf("Prune = %d, %v; want 0", n, err)
		}
	}},
	{"every field of an attempt is kept", func(t *testing.T, st attempts.Store) {
		a := attempts.Attempt{Time: t0, Sink: "wh", Endpoint: "billing", Tenant: "acme", EventID: "e-1", EventType: "order.paid",
			Number: 3, Status: 500, Error: "endpoint answered 500 Internal Server Error", Outcome: attempts.OutcomeRetry,
			Duration: 1234567 * time.Nanosecond, Answer: bytes.Repeat([]byte("é\x00x"), 300), Replay: "job-7",
			Committed: t0.Add(-time.Second), GTID: "0-1-42", File: "mysql-bin.000003", Pos: 4242}
		if err := st.Append(ctx, []attempts.Attempt{a}); err != nil {
			t.Fatal(err)
		}
		recs, err := st.Search(ctx, attempts.Query{})
		if err != nil || len(recs) != 1 {
			t.Fatalf("Search = %v, %v", recs, err)
		}
		want := a
		want.Time = t0.Truncate(time.Microsecond)
		want.Committed = want.Time.Add(-time.Second)
		want.Answer = a.Answer[:attempts.AnswerLimit]
		got := recs[0].Attempt
		if !bytes.Equal(got.Answer, want.Answer) {
			t.Errorf("answer: got %d bytes %q…, want the first %d", len(got.Answer), got.Answer[:min(len(got.Answer), 16)], attempts.AnswerLimit)
		}
		got.Answer, want.Answer = nil, nil
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got  %+v\nwant %+v", got, want)
		}
		if recs[0].ID <= 0 {
			t.Errorf("id %d, want > 0", recs[0].ID)
		}
	}},
	{"two tenants longer than the column, alike in their first bytes, are kept apart", func(t *testing.T, st attempts.Store) {
		long := strings.Repeat("é", 200) // 400 bytes
		batch := []attempts.Attempt{
			{Time: t0, Sink: "wh", Endpoint: "billing", Tenant: long + "a", EventID: "e-a", Outcome: attempts.OutcomeFailed},
			{Time: t0, Sink: "wh", Endpoint: "billing", Tenant: long + "b", EventID: "e-b", Outcome: attempts.OutcomeFailed},
		}
		if err := st.Append(ctx, batch); err != nil {
			t.Fatal(err)
		}
		for _, want := range batch {
			recs, err := st.Search(ctx, attempts.Query{Tenant: want.Tenant})
			if err != nil || len(recs) != 1 || recs[0].EventID != want.EventID {
				t.Errorf("tenant …%s finds %+v (%v), want its own one attempt", want.Tenant[len(want.Tenant)-1:], recs, err)
			}
			if len(recs) == 1 && recs[0].Tenant != attempts.TenantKey(want.Tenant) {
				t.Errorf("its record's tenant is %q, want its TenantKey", recs[0].Tenant)
			}
		}
	}},
	{"keys longer than their column are kept as their start, '#' and 16 hex digits, and found by the whole key", func(t *testing.T, st attempts.Store) {
		long := strings.Repeat("é", 150) // 300 bytes
		batch := []attempts.Attempt{
			{Time: t0, Sink: "wh" + long, Endpoint: "billing" + long + "a", EventID: "e" + long + "a", Replay: "r" + long + "a", Outcome: attempts.OutcomeFailed},
			{Time: t0, Sink: "wh" + long, Endpoint: "billing" + long + "b", EventID: "e" + long + "b", Replay: "r" + long + "b", Outcome: attempts.OutcomeFailed},
		}
		if err := st.Append(ctx, batch); err != nil {
			t.Fatal(err)
		}
		fit := regexp.MustCompile(`^(.*)#[0-9a-f]{16}$`)
		for _, want := range batch {
			for _, q := range []attempts.Query{{Sink: want.Sink, Endpoint: want.Endpoint}, {EventID: want.EventID}} {
				recs, err := st.Search(ctx, q)
				if err != nil || len(recs) != 1 {
					t.Errorf("Search(%.40q…) = %d records, %v; want its one attempt", fmt.Sprint(q), len(recs), err)
					continue
				}
				got := recs[0].Attempt
				for _, k := range []struct{ got, whole string }{{got.Sink, want.Sink}, {got.Endpoint, want.Endpoint}, {got.EventID, want.EventID}, {got.Replay, want.Replay}} {
					m := fit.FindStringSubmatch(k.got)
					if len(k.got) != 255 || m == nil || !strings.HasPrefix(k.whole, m[1]) || len(m[1]) != 255-17 || k.got != checkpoint.FitKey(k.whole, 255) {
						t.Errorf("a key of %d bytes is kept as %d bytes %q; want its first 238 bytes, '#' and 16 hex digits of its hash (checkpoint.FitKey)", len(k.whole), len(k.got), k.got)
					}
				}
			}
		}
	}},
	{"each query field selects its attempts, newest stored first", func(t *testing.T, st attempts.Store) {
		base := appendFixture(t, st)
		for _, c := range []struct {
			name string
			q    attempts.Query
			want []int
		}{
			{"everything", attempts.Query{}, []int{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}},
			{"a limit keeps the newest", attempts.Query{Limit: 3}, []int{9, 8, 7}},
			{"by sink", attempts.Query{Sink: "wh2"}, []int{8, 5}},
			{"by sink and endpoint", attempts.Query{Sink: "wh", Endpoint: "billing"}, []int{9, 4, 1, 0}},
			{"an endpoint's name in every sink", attempts.Query{Endpoint: "billing"}, []int{9, 5, 4, 1, 0}},
			{"by tenant", attempts.Query{Tenant: "globex"}, []int{8, 5}},
			{"a tenant and an endpoint of another tenant", attempts.Query{Tenant: "globex", Sink: "wh", Endpoint: "billing"}, []int{}},
			{"by event id", attempts.Query{EventID: "e1"}, []int{3, 2, 1, 0}},
			{"by event id at one endpoint", attempts.Query{EventID: "e3", Sink: "wh", Endpoint: "crm"}, []int{7, 6}},
			{"by status", attempts.Query{Status: 500}, []int{9, 7, 0}},
			{"by status 0: any", attempts.Query{Status: 0, Sink: "wh", Endpoint: "crm"}, []int{7, 6, 3, 2}},
			{"failed ones", attempts.Query{Failed: true}, []int{9, 7, 6, 5, 2, 0}},
			{"failed ones of an endpoint", attempts.Query{Failed: true, Sink: "wh", Endpoint: "crm"}, []int{7, 6, 2}},
			{"since a time (inclusive)", attempts.Query{Since: t0.Add(6 * time.Minute)}, []int{8, 7, 6}},
			{"until a time (exclusive)", attempts.Query{Until: t0.Add(2 * time.Minute)}, []int{9, 1, 0}},
			{"within a window", attempts.Query{Since: t0.Add(2 * time.Minute), Until: t0.Add(5 * time.Minute)}, []int{4, 3, 2}},
			{"a window, newest stored first, limited", attempts.Query{Until: t0.Add(5 * time.Minute), Limit: 2}, []int{9, 4}},
			{"a window and an event", attempts.Query{EventID: "e3", Since: t0}, []int{8, 7, 6}},
			{"a window and a status", attempts.Query{Status: 200, Until: t0.Add(5 * time.Minute)}, []int{4, 1}},
			{"a window and a failing status", attempts.Query{Status: 500, Since: t0}, []int{7, 0}},
			{"a window and an endpoint's name", attempts.Query{Endpoint: "billing", Since: t0.Add(time.Minute)}, []int{5, 4, 1}},
			{"a window and a sink", attempts.Query{Sink: "wh2", Until: t0.Add(6 * time.Minute)}, []int{5}},
			{"before a cursor", attempts.Query{Before: base + 4}, []int{3, 2, 1, 0}},
			{"before a cursor, by endpoint", attempts.Query{Sink: "wh", Endpoint: "billing", Before: base + 4}, []int{1, 0}},
			{"before a cursor, by time", attempts.Query{Since: t0, Before: base + 9}, []int{8, 7, 6, 5, 4, 3, 2, 1, 0}},
			{"before a cursor, failed", attempts.Query{Failed: true, Before: base + 6}, []int{5, 2, 0}},
			{"nothing matches", attempts.Query{EventID: "e9"}, []int{}},
			{"an unknown sink", attempts.Query{Sink: "w"}, []int{}},
		} {
			t.Run(c.name, func(t *testing.T) {
				recs, err := st.Search(ctx, c.q)
				if err != nil {
					t.Fatal(err)
				}
				if got := indexes(recs, base); !slices.Equal(got, c.want) {
					t.Errorf("got %v, want %v", got, c.want)
				}
				fx := fixture()
				for _, r := range recs {
					if i := r.ID - base; i >= 0 && i < 10 && (r.EventID != fx[i].EventID || r.Status != fx[i].Status || r.Duration != fx[i].Duration) {
						t.Errorf("record %d is %+v, want %+v", r.ID, r.Attempt, fx[i])
					}
				}
			})
		}
	}},
	{"a cursor pages through everything once, newest first", func(t *testing.T, st attempts.Store) {
		var batch []attempts.Attempt
		for i := range 25 {
			batch = append(batch, attempts.Attempt{Time: t0.Add(time.Duration(i) * time.Second), Sink: "wh", Endpoint: "e",
				EventID: fmt.Sprint("ev", i), Number: 1, Status: 200, Outcome: attempts.OutcomeDelivered})
		}
		if err := st.Append(ctx, batch); err != nil {
			t.Fatal(err)
		}
		for _, q := range []attempts.Query{{}, {Sink: "wh", Endpoint: "e"}, {Since: t0}, {Status: 200}} {
			var seen []string
			q.Limit = 7
			for pages := 0; ; pages++ {
				if pages > 5 {
					t.Fatalf("%+v: more than 5 pages", q)
				}
				recs, err := st.Search(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range recs {
					seen = append(seen, r.EventID)
				}
				if len(recs) < q.Limit {
					break
				}
				q.Before = recs[len(recs)-1].ID
			}
			var want []string
			for i := 24; i >= 0; i-- {
				want = append(want, fmt.Sprint("ev", i))
			}
			if !slices.Equal(seen, want) {
				t.Errorf("%+v: paged %v, want %v", q, seen, want)
			}
		}
	}},
	{"prune removes the attempts older than a time", func(t *testing.T, st attempts.Store) {
		base := appendFixture(t, st)
		n, err := st.Prune(ctx, t0.Add(4*time.Minute), 0)
		if err != nil || n != 5 {
			t.Fatalf("Prune = %d, %v; want 5", n, err)
		}
		recs, _ := st.Search(ctx, attempts.Query{})
		if got := indexes(recs, base); !slices.Equal(got, []int{8, 7, 6, 5, 4}) {
			t.Errorf("left %v", got)
		}
		// Nothing of the pruned ones is found by any index.
		for _, q := range []attempts.Query{{EventID: "e1"}, {Sink: "wh", Endpoint: "billing"}, {Status: 500}, {Failed: true}, {Tenant: "acme"}, {Until: t0.Add(4 * time.Minute)}} {
			recs, err := st.Search(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				if r.Time.Before(t0.Add(4 * time.Minute).Truncate(time.Microsecond)) {
					t.Errorf("%+v finds pruned %+v", q, r)
				}
			}
		}
	}},
	{"prune keeps the newest rows beyond a count", func(t *testing.T, st attempts.Store) {
		base := appendFixture(t, st)
		n, err := st.Prune(ctx, time.Time{}, 4)
		if err != nil || n != 6 {
			t.Fatalf("Prune = %d, %v; want 6", n, err)
		}
		recs, _ := st.Search(ctx, attempts.Query{})
		if got := indexes(recs, base); !slices.Equal(got, []int{9, 8, 7, 6}) {
			t.Errorf("left %v", got)
		}
		if n, err := st.Prune(ctx, time.Time{}, 4); err != nil || n != 0 {
			t.Errorf("a second Prune = %d, %v; want 0", n, err)
		}
		// Both bounds at once, and a store that keeps counting right
		// after a prune.
		if err := st.Append(ctx, fixture()[:3]); err != nil {
			t.Fatal(err)
		}
		if err := st.Append(ctx, fixture()[7:9]); err != nil {
			t.Fatal(err)
		}
		n, err = st.Prune(ctx, t0.Add(7*time.Minute), 2)
		if err != nil || n != 7 {
			t.Fatalf("Prune = %d, %v; want 7 (5 older than 7m, then 2 beyond 2 rows)", n, err)
		}
		recs, _ = st.Search(ctx, attempts.Query{})
		if got := indexes(recs, base); !slices.Equal(got, []int{14, 13}) {
			t.Errorf("left %v", got)
		}
	}},
	{"prune removes more than one chunk", func(t *testing.T, st attempts.Store) {
		batch := make([]attempts.Attempt, 12000)
		for i := range batch {
			batch[i] = attempts.Attempt{Time: t0.Add(time.Duration(i) * time.Millisecond), Sink: "wh", Endpoint: "e", EventID: fmt.Sprint(i), Outcome: attempts.OutcomeDelivered, Status: 200}
		}
		if err := st.Append(ctx, batch); err != nil {
			t.Fatal(err)
		}
		if n, err := st.Prune(ctx, time.Time{}, 10); err != nil || n != 11990 {
			t.Fatalf("Prune = %d, %v; want 11990", n, err)
		}
		recs, _ := st.Search(ctx, attempts.Query{Limit: 100})
		if len(recs) != 10 || recs[0].EventID != "11999" || recs[9].EventID != "11990" {
			t.Errorf("left %d, from %s", len(recs), recs[0].EventID)
		}
	}},
	{"appends and searches run concurrently", func(t *testing.T, st attempts.Store) {
		const writers, batches, per = 4, 10, 20
		var wg sync.WaitGroup
		errs := make(chan error, writers*batches*2)
		for w := range writers {
			wg.Go(func() {
				for b := range batches {
					batch := make([]attempts.Attempt, per)
					for i := range batch {
						batch[i] = attempts.Attempt{Time: t0, Sink: "wh", Endpoint: fmt.Sprint("ep", w), EventID: fmt.Sprint(w, "-", b, "-", i),
							Number: 1, Status: 200, Outcome: attempts.OutcomeDelivered}
					}
					if err := st.Append(ctx, batch); err != nil {
						errs <- err
					}
				}
			})
			wg.Go(func() {
				for range batches {
					recs, err := st.Search(ctx, attempts.Query{Sink: "wh", Endpoint: fmt.Sprint("ep", w), Limit: 1000})
					if err != nil {
						errs <- err
						continue
					}
					if !slices.IsSortedFunc(recs, func(a, b attempts.Record) int { return int(b.ID - a.ID) }) {
						errs <- fmt.Errorf("search of ep%d is not newest first", w)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		recs, err := st.Search(ctx, attempts.Query{Limit: attempts.MaxLimit})
		if err != nil {
			t.Fatal(err)
		}
		ids := map[int64]bool{}
		for _, r := range recs {
			ids[r.ID] = true
		}
		if len(recs) != writers*batches*per || len(ids) != len(recs) {
			t.Errorf("%d records, %d distinct ids; want %d", len(recs), len(ids), writers*batches*per)
		}
		// A batch's ids grow in its order.
		for w := range writers {
			recs, _ := st.Search(ctx, attempts.Query{Sink: "wh", Endpoint: fmt.Sprint("ep", w), Limit: 1000})
			for i := 1; i < len(recs); i++ {
				if a, b := recs[i-1].EventID, recs[i].EventID; a < b && len(a) == len(b) && a[:len(a)-1] == b[:len(b)-1] {
					t.Errorf("%s stored before %s", a, b)
				}
			}
		}
	}},
}

// The file has one writer: another opener waits, then is told who holds it
// and what to do; a reader opens a missing file as empty, creating nothing.
func TestFileIsOpenedByOneProcessAndReadOnlyCreatesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.json.attempts")
	ro, err := attempts.OpenFileReadOnly(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if recs, err := ro.Search(ctx, attempts.Query{}); err != nil || len(recs) != 0 {
		t.Fatalf("read-only Search of a missing file = %v, %v", recs, err)
	}
	if err := ro.Append(ctx, fixture()); !errors.Is(err, attempts.ErrReadOnly) {
		t.Errorf("read-only Append = %v, want ErrReadOnly", err)
	}
	ro.Close()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a read-only open made the file: %v", err)
	}

	st, err := attempts.OpenFile(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Append(ctx, fixture()); err != nil {
		t.Fatal(err)
	}
	for _, open := range []func(string, time.Duration) (*attempts.File, error){attempts.OpenFile, attempts.OpenFileReadOnly} {
		_, err := open(path, 50*time.Millisecond)
		if !errors.Is(err, attempts.ErrLocked) || !strings.Contains(err.Error(), "--url") {
			t.Errorf("open while the relay has it = %v, want ErrLocked saying to ask the relay (--url)", err)
		}
	}
	st.Close()
	ro, err = attempts.OpenFileReadOnly(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if recs, err := ro.Search(ctx, attempts.Query{EventID: "e1"}); err != nil || len(recs) != 4 {
		t.Errorf("read-only Search = %d records, %v; want 4", len(recs), err)
	}
}

// A read-only MySQL store creates no table and finds nothing without one.
func TestMySQLReadOnlyCreatesNothing(t *testing.T) {
	db := srv.DB(t, srv.NewDatabase(t))
	st, err := attempts.OpenMySQLReadOnly(db, "")
	if err != nil {
		t.Fatal(err)
	}
	if recs, err := st.Search(ctx, attempts.Query{}); err != nil || len(recs) != 0 {
		t.Fatalf("Search = %v, %v", recs, err)
	}
	if err := st.Append(ctx, fixture()); !errors.Is(err, attempts.ErrReadOnly) {
		t.Errorf("Append = %v, want ErrReadOnly", err)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()").Scan(&n); err != nil || n != 0 {
		t.Errorf("%d tables, %v; want none", n, err)
	}
	if _, err := attempts.OpenMySQL(ctx, db, "bad-name"); err == nil || !strings.Contains(err.Error(), "letters, digits") {
		t.Errorf("a bad table name: %v", err)
	}
}

// BenchmarkAppendMySQL is the MySQL store's share of a batch of 500
// attempts, per attempt (the private server of the tests, on this machine).
func BenchmarkAppendMySQL(b *testing.B) {
	db := srv.DB(b, srv.NewDatabase(b))
	st, err := attempts.OpenMySQL(context.Background(), db, "")
	if err != nil {
		b.Fatal(err)
	}
	const batch = 500
	all := make([]attempts.Attempt, batch)
	for i := range all {
		all[i] = attempts.Attempt{Time: time.Now(), Sink: "hooks", Endpoint: fmt.Sprint("endpoint-", i%20), EventID: fmt.Sprint("0190a3f2-7b1c-7def-8000-", i),
			EventType: "order.created", Number: 1, Status: 204, Outcome: attempts.OutcomeDelivered, Duration: 3 * time.Millisecond}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		if err := st.Append(context.Background(), all[:min(batch, b.N-i)]); err != nil {
			b.Fatal(err)
		}
	}
}

// latin1Database returns a connection to a new database in latin1, as
// MariaDB creates them by default until 11.6.
func latin1Database(t *testing.T) *sql.DB {
	t.Helper()
	name := srv.NewDatabase(t)
	srv.Exec(t, "ALTER DATABASE "+name+" CHARACTER SET latin1")
	return srv.DB(t, name)
}

// A checkpoint database in latin1 refused a receiver's answer in an
// attempt's error ("refusé ✓": error 1366 for the ✓; MariaDB's latin1 is
// cp1252, which has "é" and the curly apostrophe, kept here too), and with
// it the whole batch, other tenants' attempts included. The table is
// utf8mb4 whatever the database's default, and text that is not UTF-8 is
// kept with U+FFFD in place of its bad bytes.
func TestMySQLInALatin1DatabaseKeepsEveryAnswer(t *testing.T) {
	st, err := attempts.OpenMySQL(ctx, latin1Database(t), "")
	if err != nil {
		t.Fatal(err)
	}
	batch := []attempts.Attempt{
		{Time: t0, Sink: "hooks", Endpoint: "ok", Tenant: "acme", EventID: "e1", EventType: "order.created", Number: 1, Status: 204, Outcome: attempts.OutcomeDelivered},
		{Time: t0, Sink: "hooks", Endpoint: "bad", Tenant: "globex", EventID: "e2", EventType: "commande.créée", Number: 1, Status: 400, Outcome: attempts.OutcomeFailed,
			Error: "endpoint rejected the event with 400 Bad Request: refusé ✓", Answer: []byte("refusé ✓")},
		{Time: t0, Sink: "hooks", Endpoint: "bad", Tenant: "globex", EventID: "e3", EventType: "order.created", Number: 1, Status: 422, Outcome: attempts.OutcomeFailed,
			Error: "endpoint rejected the event with 422 Unprocessable Entity: it’s not an order \xff", Answer: []byte("it’s not an order \xff")},
		{Time: t0, Sink: "hooks", Endpoint: "ok", Tenant: "initech", EventID: "e4", EventType: "order.created", Number: 1, Status: 204, Outcome: attempts.OutcomeDelivered},
	}
	if err := st.Append(ctx, batch); err != nil {
		t.Fatalf("Append: %v", err)
	}
	recs, err := st.Search(ctx, attempts.Query{})
	if err != nil || len(recs) != len(batch) {
		t.Fatalf("Search = %d records, %v; want %d", len(recs), err, len(batch))
	}
	for _, r := range recs {
		var want attempts.Attempt
		for _, a := range batch {
			if a.EventID == r.EventID {
				want = a
			}
		}
		if r.EventType != want.EventType || r.Error != strings.ToValidUTF8(want.Error, "\uFFFD") || !bytes.Equal(r.Answer, want.Answer) || r.Tenant != want.Tenant {
			t.Errorf("event %s: type %q error %q answer %q tenant %q; want %q %q %q %q", r.EventID, r.EventType, r.Error, r.Answer, r.Tenant,
				want.EventType, strings.ToValidUTF8(want.Error, "\uFFFD"), want.Answer, want.Tenant)
		}
	}
}

// An attempt the store still refuses (here a trigger on the table refuses
// it, as a constraint or a value too large would) is left out alone: the
// other attempts of its batch, other tenants' among them, are stored, and
// Append names the one in a *RefusedError. Through a Writer it is counted
// (dropped, reason refused), logged at ERROR and named on /readyz.
func TestMySQLStoresABatchButTheAttemptTheStoreRefuses(t *testing.T) {
	db := latin1Database(t)
	st, err := attempts.OpenMySQL(ctx, db, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TRIGGER refuse BEFORE INSERT ON outbox_relay_attempts FOR EACH ROW " +
		"IF NEW.event_id = 'refuse-me' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by a trigger'; END IF"); err != nil {
		t.Fatal(err)
	}
	batch := func(tag string) []attempts.Attempt {
		return []attempts.Attempt{
			{Time: t0, Sink: "hooks", Endpoint: "a", Tenant: "acme", EventID: tag + "1", Number: 1, Status: 204, Outcome: attempts.OutcomeDelivered},
			{Time: t0, Sink: "hooks", Endpoint: "b", Tenant: "globex", EventID: "refuse-me", Number: 2, Status: 400, Outcome: attempts.OutcomeFailed, Error: "refusé ✓"},
			{Time: t0, Sink: "hooks", Endpoint: "c", Tenant: "initech", EventID: tag + "3", Number: 1, Status: 204, Outcome: attempts.OutcomeDelivered},
		}
	}
	err = st.Append(ctx, batch("s"))
	var refused *attempts.RefusedError
	if !errors.As(err, &refused) || len(refused.Errs) != 1 || refused.Errs[1] == nil {
		t.Fatalf("Append = %v; want a *RefusedError naming attempt 1 alone", err)
	}
	for _, id := range []string{"s1", "s3"} {
		if recs, err := st.Search(ctx, attempts.Query{EventID: id}); err != nil || len(recs) != 1 {
			t.Errorf("attempt %s of the batch: %d stored, %v; want it stored", id, len(recs), err)
		}
	}

	// Through a Writer.
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, "test")
	if err != nil {
		t.Fatal(err)
	}
	m.Pipeline("hooks") // a relay with a sink: /readyz has its notes
	am, err := attempts.NewMetrics(m)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	w := attempts.NewWriter(st, attempts.WriterOptions{Metrics: am, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for _, a := range batch("w") {
		w.Record(a)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := counterValue(t, reg, "outbox_relay_attempts_dropped_total", "refused"); got != 1 {
		t.Errorf("dropped_total{reason=refused} = %v, want 1", got)
	}
	if got := counterValue(t, reg, "outbox_relay_attempts_recorded_total", ""); got != 2 {
		t.Errorf("recorded_total = %v, want 2", got)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "refuse-me") {
		t.Errorf("no ERROR line naming the refused attempt:\n%s", logs.String())
	}
	_, _, notes := m.Ready(time.Minute)
	if !slices.ContainsFunc(notes, func(n string) bool {
		return strings.Contains(n, `event "refuse-me" at endpoint hooks/b`) && strings.Contains(n, "refused by a trigger")
	}) {
		t.Errorf("/readyz notes %q do not name the refused attempt", notes)
	}
}

// counterValue is the value of the counter family name (with the label
// value label, when not ""), gathered from reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label == "" || slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetValue() == label }) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
