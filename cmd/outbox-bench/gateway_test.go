package main

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseEndpoints(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     []int
		err      bool
	}{
		{name: "empty is off", in: "", want: nil},
		{name: "the base run of one row is added first", in: "10000,1000", want: []int{1, 1000, 10000}},
		{name: "one row alone is the base", in: "1", want: []int{1}},
		{name: "underscores and repeats are allowed", in: "100_000, 1000,1000", want: []int{1, 1000, 100000}},
		{name: "zero is refused", in: "0", err: true},
		{name: "a word is refused", in: "1000,lots", err: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseEndpoints(c.in)
			if (err != nil) != c.err {
				t.Fatalf("parseEndpoints(%q): error %v, want error %v", c.in, err, c.err)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("parseEndpoints(%q) = %v, want %v", c.in, got, c.want)
			}
		})
	}
}

func TestProcParsers(t *testing.T) {
	status := "Name:\toutbox-relay\nVmPeak:\t  900000 kB\nVmRSS:\t  123456 kB\nThreads:\t9\n"
	if got := parseVmRSS(status); got != 123456*1024 {
		t.Errorf("parseVmRSS = %d, want %d", got, 123456*1024)
	}
	if got := parseVmRSS("Name:\tx\n"); got != 0 {
		t.Errorf("parseVmRSS without VmRSS = %d, want 0", got)
	}
	io := "rchar: 10\nwchar: 2048\nsyscr: 1\nsyscw: 2\nread_bytes: 0\nwrite_bytes: 4096\ncancelled_write_bytes: 0\n"
	if got := parseIO(io); got != (ioCounters{wchar: 2048, writeBytes: 4096}) {
		t.Errorf("parseIO = %+v", got)
	}
}

func TestParseMetricsSumsOverLabels(t *testing.T) {
	page := `# HELP go_goroutines Number of goroutines.
# TYPE go_goroutines gauge
go_goroutines 10018
go_memstats_heap_inuse_bytes 2.04e+08
outbox_relay_checkpoint_saves_total{sink="hooks"} 7
outbox_relay_checkpoint_saves_total{sink="other",x="a b"} 5
`
	m := parseMetrics(page)
	for name, want := range map[string]float64{"go_goroutines": 10018, "go_memstats_heap_inuse_bytes": 2.04e8, "outbox_relay_checkpoint_saves_total": 12} {
		if m[name] != want {
			t.Errorf("%s = %v, want %v", name, m[name], want)
		}
	}
}

func TestPercentileSteadyAndPerEndpoint(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if p50, p99 := percentile(ds, 0.5), percentile(ds, 0.99); p50 != 50*time.Millisecond || p99 != 99*time.Millisecond {
		t.Errorf("p50, p99 of 1..100 ms = %v, %v, want 50ms, 99ms", p50, p99)
	}
	if percentile(nil, 0.99) != 0 {
		t.Error("the percentile of nothing is not 0")
	}
	if !steady([]int64{100, 1000, 1000, 1001, 1005, 1002, 1000}, 6, 0.01) {
		t.Error("six samples within 1 % are not steady")
	}
	if steady([]int64{1000, 1000, 1000, 1000, 1000, 1100}, 6, 0.01) {
		t.Error("a last sample 10 % up is steady")
	}
	if steady([]int64{1000, 1000}, 6, 0.01) {
		t.Error("two samples are steady")
	}
	if got := perEndpoint(363_000_000, 37_000_000, 10_000, 1); got < 32_603 || got > 32_604 {
		t.Errorf("perEndpoint = %v, want about 32,603 bytes", got)
	}
	if perEndpoint(5, 1, 1, 1) != 0 {
		t.Error("the base run has a per-endpoint cost")
	}
}

func TestCheckPageSaysWhenTheAPIDoesNotPage(t *testing.T) {
	page := `{"endpoints": [` + strings.TrimSuffix(strings.Repeat(`{"id":"x"},`, 100), ",") + `]}`
	if got := checkPage([]byte(page)); got != "100 endpoints" {
		t.Errorf("a page of 100: %q", got)
	}
	full := `{"endpoints": [` + strings.TrimSuffix(strings.Repeat(`{"id":"x"},`, 101), ",") + `]}`
	if got := checkPage([]byte(full)); !strings.Contains(got, "limit unknown to the API: the full list, 101 endpoints") {
		t.Errorf("a list of 101 asked with limit=100: %q", got)
	}
}

// The receiver counts per endpoint: the first request of each endpoint
// reaches it, later ones are duplicates, an event of another tenant's is
// misrouted, and endpoint 0 answers 400 (its event is a dead letter).
func TestGatewayReceiverCountsPerEndpoint(t *testing.T) {
	r := newGWReceiver()
	defer r.srv.Close()
	r.expect(3)
	post := func(path, id string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, r.srv.URL+path, strings.NewReader("{}"))
		req.Header.Set("webhook-id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := post("/gw/0", "b-0"); st != http.StatusBadRequest {
		t.Errorf("endpoint 0 answered %d, want 400", st)
	}
	post("/gw/1", "b-1")
	post("/gw/1", "b-1")
	select {
	case <-r.done:
		t.Fatal("done before every endpoint was reached")
	default:
	}
	post("/gw/2", "b-1") // endpoint 1's event at endpoint 2
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("not done once each endpoint was reached")
	}
	if got := r.extra.Load(); got != 1 {
		t.Errorf("duplicates: %d, want 1", got)
	}
	if got := r.misrouted.Load(); got != 1 {
		t.Errorf("misrouted: %d, want 1", got)
	}
	if st := post("/gw/new", "new-1"); st != http.StatusNoContent {
		t.Errorf("the new endpoint answered %d", st)
	}
	select {
	case <-r.newAt:
	default:
		t.Error("the new endpoint's request was not noted")
	}
}

func TestGatewayTablesShowWhatAnIdleEndpointCosts(t *testing.T) {
	base := gatewayRow{endpoints: 1, ready: 300 * time.Millisecond, idleWindow: 10 * time.Second,
		idle:  memReading{rss: 37_000_000, heap: 8_000_000, stacks: 1_000_000, goroutines: 25},
		after: memReading{rss: 40_000_000}, config: "source: {}\n",
		api: []apiLatency{{what: "one endpoint", n: 200, p50: time.Millisecond, p99: 4 * time.Millisecond, bytes: 471}}}
	big := base
	big.endpoints = 10_001
	big.idle = memReading{rss: 37_000_000 + 10_000*33_000, heap: 8_000_000 + 10_000*20_000, stacks: 1_000_000 + 10_000*8192, goroutines: 10_025}
	big.api = []apiLatency{{what: "one page of endpoints", n: 5, p50: 500 * time.Millisecond, p99: 600 * time.Millisecond, bytes: 8_000_000,
		note: "limit unknown to the API: the full list, 10001 endpoints"}}
	failed := gatewayRow{endpoints: 100_000, err: errString("not ready within 15m0s")}
	out := gatewayTables([]gatewayRow{base, big, failed})
	for _, want := range []string{
		"| 10001 | 33000 | 20000 | 8192 | 1.00 |", // per idle endpoint over the base, in bytes
		"| 10001 | 300 ms | 367 MB | 32.2 KB | 10025 (1.00 per row) |",
		"500.0 / 600.0 ms (8.0 MB, 5 requests): limit unknown to the API: the full list",
		"| 100000 | failed: not ready within 15m0s |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the tables lack %q:\n%s", want, out)
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestCountRewritesSeesAFileReplaced(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cp.json")
	if err := os.WriteFile(path, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi0, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := countRewrites(path, fi0, time.Millisecond, 20*time.Millisecond); err == nil {
		t.Error("a file never replaced: no error")
	}
	// Replaced as the file store saves: a temporary file renamed over it.
	if err := os.WriteFile(path+".tmp", []byte(`{"a":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	n, err := countRewrites(path, fi0, 10*time.Millisecond, time.Minute)
	if err != nil || n != 1 {
		t.Errorf("countRewrites after one rename = %d, %v; want 1", n, err)
	}
}
