package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/paging"
	"github.com/outbox-relay/outbox-relay/metrics"
	"github.com/outbox-relay/outbox-relay/pipeline"
)

var (
	_ Observer                    = (*SinkMetrics)(nil)
	_ StateShower                 = (*SinkMetrics)(nil)
	_ pipeline.Observer           = (*EndpointMetrics)(nil)
	_ pipeline.ResumeObserver     = (*EndpointMetrics)(nil)
	_ pipeline.DeadLetterObserver = (*EndpointMetrics)(nil)
)

// metricsClock is a settable time source for the scrape-time gauges.
type metricsClock struct{ t time.Time }

func (c *metricsClock) now() time.Time { return c.t }

func newMetricsTest(t *testing.T) (*metrics.Metrics, *Metrics, *prometheus.Registry, *metricsClock) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.New(reg, "v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	c := &metricsClock{t: time.Unix(1_800_000_000, 0)}
	m.SetClock(c.now)
	gm, err := NewMetrics(m)
	if err != nil {
		t.Fatal(err)
	}
	return m, gm, reg, c
}

// withSink adds a webhook sink run as a gateway, with one endpoint.
func withSink(m *metrics.Metrics, gm *Metrics, c *metricsClock) *SinkMetrics {
	m.Source("hooks").Connected()
	g := gm.Sink("hooks")
	g.State("hooks/a", Attached)
	ep := g.Endpoint("hooks/a")
	ep.Delivered(&event.Event{ID: "2", CommitTime: c.t.Add(-time.Second)}, c.t)
	ep.InFlight(1, 100, c.t.Add(-3*time.Second))
	ep.CheckpointSaved(event.Position{File: "bin.000001", Pos: 4}, c.t)
	return g
}

func TestMetricsPassPromlint(t *testing.T) {
	m, gm, reg, c := newMetricsTest(t)
	withSink(m, gm, c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// A relay with a gateway exposes metrics.Names and MetricNames, no other.
func TestMetricsExposeMetricNames(t *testing.T) {
	m, gm, reg, c := newMetricsTest(t)
	withSink(m, gm, c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		if !slices.Contains(metrics.Names, mf.GetName()) {
			got = append(got, mf.GetName())
		}
	}
	slices.Sort(got)
	if want := slices.Sorted(slices.Values(MetricNames)); !slices.Equal(got, want) {
		t.Fatalf("the gateway's metric families %v, want %v", got, want)
	}
	if _, err := NewMetrics(m); err == nil {
		t.Fatal("the gateway's metrics registered twice on one registry")
	}
}

func TestReadinessOfAGateway(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(m *metrics.Metrics, gm *Metrics, c *metricsClock)
		ready  bool
		reason string
	}{
		{"a webhook endpoint failing for an hour leaves the relay ready", func(m *metrics.Metrics, gm *Metrics, c *metricsClock) {
			m.Source("hooks").Connected()
			g := gm.Sink("hooks")
			g.State("hooks/a", Attached)
			ep := g.Endpoint("hooks/a")
			ep.InFlight(5, 100, c.t)
			ep.Failed(&event.Event{ID: "1"}, errors.New("endpoint answered 503 Service Unavailable"), false)
			c.t = c.t.Add(time.Hour)
		}, true, ""},
		{"a webhook endpoint stopped for good is noted, not a reason", func(m *metrics.Metrics, gm *Metrics, c *metricsClock) {
			m.Source("hooks").Connected()
			gm.Sink("hooks").Endpoint("hooks/a").Stopped(errors.New("event 1 failed permanently"))
		}, true, "endpoint hooks/a: stopped after an error it cannot retry (the relay goes on): event 1 failed permanently"},
		{"more than 20 endpoints stopped: 20 are named, the others counted", func(m *metrics.Metrics, gm *Metrics, c *metricsClock) {
			m.Source("hooks").Connected()
			for i := range 25 {
				gm.Sink("hooks").Endpoint(fmt.Sprintf("hooks/%d", i)).Stopped(errors.New("failed permanently"))
			}
		}, true, "and 5 more webhook endpoints stopped (see /endpoints)"},
		{"a webhook sink whose shared stream is down is not ready", func(m *metrics.Metrics, gm *Metrics, c *metricsClock) {
			m.Source("hooks")
			gm.Sink("hooks")
		}, false, "sink hooks: binlog stream not connected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, gm, _, c := newMetricsTest(t)
			tc.setup(m, gm, c)
			srv := httptest.NewServer(metrics.Handler(m, prometheus.NewRegistry(), 2*time.Minute))
			defer srv.Close()
			code, body := httpGet(t, srv.URL+"/readyz")
			if (code == http.StatusOK) != tc.ready {
				t.Fatalf("/readyz = %d %q, want ready=%v", code, body, tc.ready)
			}
			if !strings.Contains(body, tc.reason) {
				t.Fatalf("/readyz = %d %q, want %q", code, body, tc.reason)
			}
		})
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A gateway of 10,000 endpoints adds a bounded number of series: a count per
// state and the top lagging endpoints; its sink's series sum the endpoints,
// and its purge margin follows the oldest cursor.
func TestGatewayMetricsAreBounded(t *testing.T) {
	m, gm, reg, c := newMetricsTest(t)
	m.SetBinaryLogs([]string{"bin.000001", "bin.000002", "bin.000003"})
	g := gm.Sink("hooks")
	for i := range 10000 {
		key := fmt.Sprintf("hooks/ep%d", i)
		g.State(key, Attached)
		ep := g.Endpoint(key)
		ep.InFlight(1, 10, c.t.Add(-time.Duration(i)*time.Second))
		file := "bin.000003"
		if i == 4242 {
			file = "bin.000002"
		}
		ep.CheckpointSaved(event.Position{File: file, Pos: 4}, c.t)
	}
	g.State("hooks/ep7", Disabled)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := 0
	for _, mf := range mfs {
		series += len(mf.GetMetric())
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "sink" && l.GetValue() != "hooks" {
					t.Errorf("%s has a series of sink %q: endpoints must not be sinks", mf.GetName(), l.GetValue())
				}
			}
		}
		switch mf.GetName() {
		case "outbox_relay_in_flight_events":
			if v := mf.GetMetric()[0].GetGauge().GetValue(); v != 10000 {
				t.Errorf("in_flight_events = %v, want the sum 10000", v)
			}
		case "outbox_relay_gateway_endpoint_lag_seconds":
			if n := len(mf.GetMetric()); n != TopLaggingEndpoints {
				t.Errorf("%d lag series, want %d", n, TopLaggingEndpoints)
			}
		case "outbox_relay_checkpoint_binlog_purge_margin_files":
			if v := mf.GetMetric()[0].GetGauge().GetValue(); v != 1 {
				t.Errorf("purge margin %v, want 1: the oldest cursor is in bin.000002", v)
			}
		case "outbox_relay_gateway_endpoints":
			for _, s := range mf.GetMetric() {
				st := ""
				for _, l := range s.GetLabel() {
					if l.GetName() == "state" {
						st = l.GetValue()
					}
				}
				want := map[string]float64{"attached": 9999, "disabled": 1}[st]
				if v := s.GetGauge().GetValue(); v != want {
					t.Errorf("gateway_endpoints{state=%q} = %v, want %v", st, v, want)
				}
			}
		}
	}
	if series > 200 {
		t.Errorf("%d series for 10,000 endpoints: the label cardinality is not bounded", series)
	}
	if eps := g.Endpoints(); len(eps) != 10000 || eps[0].Endpoint != "hooks/ep9999" {
		t.Errorf("/endpoints lists %d, worst lag first %q; want all 10000, hooks/ep9999 first", len(eps), eps[0].Endpoint)
	}
}

// /endpoints, served by metrics.Handler once NewMetrics added it, gives
// every gateway endpoint's figures as JSON, per webhook sink, worst lag
// first; ?sink= selects one sink.
func TestEndpointsHandlerServesEveryEndpoint(t *testing.T) {
	m, gm, _, c := newMetricsTest(t)
	for _, sink := range []string{"hooks", "other"} {
		g := gm.Sink(sink)
		for i, lag := range []time.Duration{time.Second, 5 * time.Second} {
			key := fmt.Sprintf("%s/ep%d", sink, i)
			g.State(key, Attached)
			g.Endpoint(key).InFlight(1, 10, c.t.Add(-lag))
		}
	}
	srv := httptest.NewServer(metrics.Handler(m, prometheus.NewRegistry(), 0))
	defer srv.Close()
	get := func(q string) map[string][]EndpointStats {
		resp, err := http.Get(srv.URL + "/endpoints" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string][]EndpointStats
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	all := get("")
	if len(all) != 2 || len(all["hooks"]) != 2 || all["hooks"][0].Endpoint != "hooks/ep1" || all["hooks"][0].LagSeconds != 5 || all["hooks"][0].State != "attached" {
		t.Fatalf("/endpoints = %+v", all)
	}
	if one := get("?sink=other"); len(one) != 1 || len(one["other"]) != 2 {
		t.Fatalf("/endpoints?sink=other = %+v", one)
	}
}

// A webhook sink's oldest unacknowledged event is its endpoints' oldest
// now: it moves forward when that endpoint acknowledges, not only when
// nothing at all is in flight.
func TestGatewayOldestUnackedFollowsTheEndpoints(t *testing.T) {
	_, gm, reg, c := newMetricsTest(t)
	g := gm.Sink("hooks")
	a, b := g.Endpoint("hooks/a"), g.Endpoint("hooks/b")
	a.InFlight(1, 10, c.t.Add(-60*time.Second))
	b.InFlight(1, 10, c.t.Add(-5*time.Second))
	age := func() float64 {
		return gathered(t, reg, "outbox_relay_oldest_unacked_age_seconds", nil)
	}
	if got := age(); got != 60 {
		t.Fatalf("age %v, want 60", got)
	}
	a.InFlight(0, 0, time.Time{}) // a acknowledged; b still waits
	if got := age(); got != 5 {
		t.Fatalf("age %v after a acknowledged, want b's 5", got)
	}
}

// An endpoint counts what its restart skips and re-sends on its webhook
// sink's series.
func TestEndpointMetricsCountResumesOnTheSink(t *testing.T) {
	_, gm, reg, _ := newMetricsTest(t)
	ep := gm.Sink("hooks").Endpoint("a")
	ep.Skipped("checkpoint")
	ep.Resent()
	ep.Resent()
	if got := gathered(t, reg, "outbox_relay_events_skipped_on_resume_total", map[string]string{"sink": "hooks", "by": "checkpoint"}); got != 1 {
		t.Errorf("skipped{by=checkpoint} = %v, want 1", got)
	}
	if got := gathered(t, reg, "outbox_relay_events_resent_total", map[string]string{"sink": "hooks"}); got != 2 {
		t.Errorf("resent = %v, want 2", got)
	}
}

// gathered is the value of the one series of family name whose labels
// include labels (a gauge's or a counter's).
func gathered(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, s := range mf.GetMetric() {
			for k, v := range labels {
				if !slices.ContainsFunc(s.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == k && l.GetValue() == v }) {
					continue series
				}
			}
			if s.GetCounter() != nil {
				return s.GetCounter().GetValue()
			}
			return s.GetGauge().GetValue()
		}
	}
	t.Fatalf("no series %s%v gathered", name, labels)
	return 0
}

// An endpoint that does not run shows its cursor and since when its events
// wait on /endpoints, and the oldest such cursor's age is the sink's
// held-cursor gauge; an endpoint that runs again shows none, and a late
// report of its old cursor does not bring it back.
func TestHeldCursorsShowOnEndpointsAndTheGauge(t *testing.T) {
	_, gm, reg, c := newMetricsTest(t)
	g := gm.Sink("hooks")
	held := func() float64 {
		return gathered(t, reg, "outbox_relay_gateway_held_cursor_age_seconds", map[string]string{"sink": "hooks"})
	}
	g.State("hooks/a", Attached)
	if got := held(); got != 0 {
		t.Fatalf("held cursor age %v with every endpoint running, want 0", got)
	}
	g.Invalid("hooks/bad", errors.New("url refused"))
	g.Held("hooks/bad", event.Position{File: "bin.000002", Pos: 4}, c.t.Add(-90*time.Second))
	g.State("hooks/off", Off)
	g.Held("hooks/off", event.Position{File: "bin.000003", Pos: 4}, c.t.Add(-30*time.Second))
	g.Held("hooks/a", event.Position{File: "bin.000001", Pos: 4}, c.t.Add(-time.Hour)) // runs: ignored
	if got := held(); got != 90 {
		t.Fatalf("held cursor age %v, want the oldest held cursor's 90", got)
	}
	byKey := map[string]EndpointStats{}
	for _, e := range g.Endpoints() {
		byKey[e.Endpoint] = e
	}
	if e := byKey["hooks/bad"]; e.State != "invalid" || e.Cursor != "bin.000002:4" || e.HeldSeconds != 90 || !e.HeldSince.Equal(c.t.Add(-90*time.Second)) {
		t.Errorf("/endpoints hooks/bad = %+v, want invalid, its cursor and 90 s held", e)
	}
	if e := byKey["hooks/a"]; e.Cursor != "" || e.HeldSeconds != 0 {
		t.Errorf("/endpoints hooks/a, which runs, = %+v: shows a held cursor", e)
	}
	g.State("hooks/bad", CatchingUp) // fixed: it runs
	if got := held(); got != 30 {
		t.Fatalf("held cursor age %v once hooks/bad runs, want hooks/off's 30", got)
	}
	g.Forget("hooks/off")
	if got := held(); got != 0 {
		t.Fatalf("held cursor age %v once none is held, want 0", got)
	}
}

// A sink's endpoints are counted as they report their states (the
// console's list of sinks): an endpoint that never delivered costs its
// state and is listed with its state only, one forgotten is no longer
// counted, and the failing and the lag come from those with figures.
func TestEndpointsAreCountedAsTheyReportTheirStates(t *testing.T) {
	m, gm, _, c := newMetricsTest(t)
	g := withSink(m, gm, c) // hooks/a: attached, delivered, one event in flight for 3 s
	g.Endpoint("hooks/idle")
	g.State("hooks/idle", Attached)
	g.State("hooks/off", Off)
	g.Invalid("hooks/bad", errors.New("url refused"))
	g.State("hooks/gone", Off)
	g.Forget("hooks/gone")
	g.Endpoint("hooks/failing").Failed(&event.Event{ID: "9"}, errors.New("503"), false)

	got, ok := gm.Counts("hooks")
	want := EndpointCounts{Endpoints: 5, States: map[string]int{"attached": 2, "off": 1, "invalid": 1, "stopped": 1}, Failing: 1, LagSeconds: 3}
	if !ok || !reflect.DeepEqual(got, want) {
		t.Errorf("Counts(hooks) = %+v, %v; want %+v", got, ok, want)
	}
	if _, ok := gm.Counts("nope"); ok {
		t.Error("Counts of a sink that is not there says it is")
	}
	idle, ok := gm.Endpoint("hooks", "hooks/idle")
	if !ok || !reflect.DeepEqual(idle, EndpointStats{Endpoint: "hooks/idle", State: "attached"}) {
		t.Errorf("an endpoint without figures shows %+v, %v; want its key and state only", idle, ok)
	}
	if n := len(g.figs); n != 3 {
		t.Errorf("%d endpoints have figures, want 3 (a, bad, failing): the idle and the off ones cost their state only", n)
	}
}

// /endpoints pages with limit and iterator (package paging's cursor): the
// pages of a walk hold every endpoint that exists throughout it exactly
// once, in key order, whatever is added and forgotten meanwhile; state
// selects, in a page and in the whole answer; a bad state, limit or
// iterator is a 400 that says why.
func TestEndpointsPagesAreCompleteAndStable(t *testing.T) {
	m, gm, _, c := newMetricsTest(t)
	want := map[string]bool{} // endpoints there throughout
	disabled := map[string]bool{}
	for _, sink := range []string{"hooks", "other"} {
		g := gm.Sink(sink)
		for i := range 120 {
			key := fmt.Sprintf("%s/ep%03d", sink, i)
			st := Attached
			if i%7 == 3 {
				st = Disabled
				disabled[key] = true
			}
			g.State(key, st)
			if i%2 == 0 {
				g.Endpoint(key).Delivered(&event.Event{ID: "x", CommitTime: c.t.Add(-time.Second)}, c.t)
			}
			if i%5 != 1 {
				want[key] = true
			} // the others are forgotten during the walk
		}
	}
	srv := httptest.NewServer(metrics.Handler(m, prometheus.NewRegistry(), 0))
	defer srv.Close()
	get := func(q string, out any) int {
		t.Helper()
		resp, err := http.Get(srv.URL + "/endpoints" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode
	}
	type page struct {
		Endpoints []EndpointStats `json:"endpoints"`
		Done      bool            `json:"done"`
		Next      string          `json:"next"`
	}
	walk := func(q string, during func(n int)) []string {
		var got []string
		it := ""
		for n := 0; ; n++ {
			var p page
			if code := get(q+"&iterator="+url.QueryEscape(it), &p); code != http.StatusOK {
				t.Fatalf("page %d of %s: %d", n, q, code)
			}
			for _, e := range p.Endpoints {
				got = append(got, e.Endpoint)
			}
			if p.Done != (p.Next == "") {
				t.Fatalf("page %d: done %v, next %q", n, p.Done, p.Next)
			}
			if p.Done {
				return got
			}
			it = p.Next
			during(n)
		}
	}
	got := walk("?limit=7", func(n int) {
		// Meanwhile: endpoints forgotten, and others added.
		for _, sink := range []string{"hooks", "other"} {
			g := gm.Sink(sink)
			g.Forget(fmt.Sprintf("%s/ep%03d", sink, 5*n+1))
			delete(disabled, fmt.Sprintf("%s/ep%03d", sink, 5*n+1))
			g.State(fmt.Sprintf("%s/new%03d", sink, n), Attached)
		}
	})
	if !slices.IsSortedFunc(got, func(a, b string) int { return strings.Compare(a, b) }) {
		t.Errorf("the pages are not in key order: %v", got)
	}
	seen := map[string]int{}
	for _, k := range got {
		seen[k]++
	}
	for k := range want {
		if seen[k] != 1 {
			t.Errorf("%s, there throughout the walk, is on %d pages, want 1", k, seen[k])
		}
	}
	for k, n := range seen {
		if n > 1 {
			t.Errorf("%s is on %d pages", k, n)
		}
	}

	got = walk("?sink=hooks&state=disabled&limit=3", func(int) {})
	for _, k := range got {
		if !disabled[k] || !strings.HasPrefix(k, "hooks/") {
			t.Errorf("state=disabled&sink=hooks lists %s", k)
		}
	}
	n := 0
	for k := range disabled {
		if strings.HasPrefix(k, "hooks/") {
			n++
		}
	}
	if len(got) != n {
		t.Errorf("state=disabled&sink=hooks lists %d endpoints, want %d", len(got), n)
	}
	var all map[string][]EndpointStats
	if get("?state=disabled", &all); len(all["hooks"])+len(all["other"]) != len(disabled) {
		t.Errorf("/endpoints?state=disabled (every endpoint, no limit) lists %d, want %d", len(all["hooks"])+len(all["other"]), len(disabled))
	}
	for _, q := range []string{"?state=asleep", "?limit=0", "?limit=1001", "?iterator=abc", "?iterator=" + url.QueryEscape(paging.EncodeCursor('e', "hooks", "0", "x"))} {
		if code := get(q, &all); code != http.StatusBadRequest {
			t.Errorf("/endpoints%s: %d, want 400", q, code)
		}
	}
}

// An endpoint's figures on /endpoints leave out what is zero: an idle one
// that never had an event is its name and its state.
func TestEndpointFiguresLeaveOutZeros(t *testing.T) {
	b, err := json.Marshal(EndpointStats{Endpoint: "hooks/ep1", State: "attached"})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != `{"endpoint":"hooks/ep1","state":"attached"}` {
		t.Errorf("an idle endpoint's figures: %s", got)
	}
}

// BenchmarkEndpointsAt100000 serves /endpoints of 100,000 endpoints that
// each delivered one event and saved a cursor (as after one event to
// every endpoint): the whole answer (B/endpoint) and a page of 100 of them
// (ns/op per page, B/page).
func BenchmarkEndpointsAt100000(b *testing.B) {
	const n = 100_000
	gm, g := benchSink(b)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("hooks/ep%06d", i)
		g.State(keys[i], Attached)
	}
	deliverOnce(g, keys)
	h := gm.EndpointsHandler()
	serve := func(q string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/endpoints"+q, nil))
		if rec.Code != http.StatusOK {
			b.Fatalf("%s: %d %s", q, rec.Code, rec.Body)
		}
		return rec.Body.Len()
	}
	all := serve("")
	var size int
	b.ResetTimer()
	for b.Loop() {
		size = serve("?limit=100&iterator=" + paging.EncodeCursor(cursorFigures, "hooks", "hooks/ep050000"))
	}
	b.ReportMetric(float64(all)/n, "B/endpoint")
	b.ReportMetric(float64(size), "B/page")
}

// BenchmarkEndpointFiguresMemory reports the heap an endpoint's figures
// take once it has delivered an event and saved its cursor (what every
// endpoint of a gateway keeps after one event to each), over 100,000
// endpoints: beyond its state, which every endpoint has.
func BenchmarkEndpointFiguresMemory(b *testing.B) {
	const n = 100_000
	var per float64
	for b.Loop() {
		_, g := benchSink(b)
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("hooks/ep%06d", i)
			g.State(keys[i], Attached)
		}
		before := liveHeap()
		deliverOnce(g, keys)
		per = float64(liveHeap()-before) / n
		runtime.KeepAlive(g)
	}
	b.ReportMetric(per, "B/endpoint")
}

// An endpoint's latency counts are one per metrics.LatencyBuckets, and one
// past the last.
func TestLatencyCountsMatchTheBuckets(t *testing.T) {
	if numLatency != len(metrics.LatencyBuckets)+1 {
		t.Fatalf("numLatency is %d; metrics.LatencyBuckets has %d buckets: make it %d", numLatency, len(metrics.LatencyBuckets), len(metrics.LatencyBuckets)+1)
	}
}

// benchSink returns a gateway's metrics and its webhook sink hooks, for a
// benchmark.
func benchSink(b *testing.B) (*Metrics, *SinkMetrics) {
	m, err := metrics.New(prometheus.NewRegistry(), "v1")
	if err != nil {
		b.Fatal(err)
	}
	gm, err := NewMetrics(m)
	if err != nil {
		b.Fatal(err)
	}
	return gm, gm.Sink("hooks")
}

// deliverOnce has each endpoint of keys deliver an event (20 ms after its
// commit) and save its cursor.
func deliverOnce(g *SinkMetrics, keys []string) {
	now := time.Now()
	for i, key := range keys {
		ep := g.Endpoint(key)
		ep.Delivered(&event.Event{ID: "x", CommitTime: now.Add(-20 * time.Millisecond)}, now)
		ep.CheckpointSaved(event.Position{GTIDSet: "0-1-" + strconv.Itoa(i)}, now)
	}
}
