package main

import (
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

func TestMergeLiveRunsTakesEachLatencysMedianOverTheRuns(t *testing.T) {
	ms := func(x float64) time.Duration { return time.Duration(x * float64(time.Millisecond)) }
	row := func(observer string, achieved float64, p50, p99, mx float64, got int) liveRow {
		return liveRow{rate: "2000/s", achieved: achieved, observer: observer, n: 100, got: got, p50: ms(p50), p99: ms(p99), max: ms(mx)}
	}
	const reader, relay, floor = "Kafka run: bare go-mysql reader", "Kafka run: relay → Kafka, consumed", "Kafka run: bare reader → bare producer → consumed (the Kafka floor)"
	runs := [][]liveRow{
		{row(reader, 1990, 1.0, 6.0, 9, 100), row(relay, 1990, 3.0, 20.0, 30, 100), row(floor, 1990, 2.0, 8.0, 9, 100)},
		{row(reader, 2000, 1.4, 5.0, 7, 100), row(relay, 2000, 2.0, 9.0, 12, 99), row(floor, 2000, 2.2, 9.5, 9, 100)},
		{row(reader, 1980, 1.2, 7.0, 8, 100), row(relay, 1980, 2.5, 11.0, 40, 100), row(floor, 1980, 2.1, 8.5, 9, 100)},
	}
	got := mergeLiveRuns(runs)
	if len(got) != 3 || got[0].observer != reader || got[1].observer != relay || got[2].observer != floor {
		t.Fatalf("rows %+v, want the reader, the relay and the floor, in that order", got)
	}
	k := got[1]
	if k.runs != 3 || k.p50 != ms(2.5) || k.p99 != ms(11) || k.max != ms(40) || k.n != 300 || k.got != 299 || k.achieved != 1990 {
		t.Errorf("Kafka row %+v: want 3 runs, p50 2.5 ms, p99 11 ms (the medians, not the 20 ms outlier), max 40 ms, 299/300 seen, 1990/s", k)
	}
	if f := got[0]; f.p50 != ms(1.2) || f.p99 != ms(6) {
		t.Errorf("floor row: p50 %v p99 %v, want 1.2 ms and 6 ms", f.p50, f.p99)
	}
	table := liveTable(got)
	for _, want := range []string{"the median of 3 runs", "| 2000/s | 1990 | Kafka run: relay → Kafka, consumed | 299/300 | 2.5 | 2.0–3.0 | 11.0 | 9.0–20.0 | 40.0 |"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	// The target line judges the medians, and says so.
	lines := strings.Join(targets(reportInput{table: []backlogRow{{name: "(the limit)", res: result{Events: 1, Seconds: 1}}}, lives: got}), "\n")
	if !strings.Contains(lines, "commit → Kafka at 2,000/s (a relay with that sink alone): p50 ≤ bare reader's + 1 ms: 2.5 vs 1.2 ms — **not met**; p99 ≤ bare reader's + 3 ms: 11.0 vs 6.0 ms — **not met**") ||
		!strings.Contains(lines, "Kafka's floor (the bare reader handing each row to a bare client) p50 2.1, p99 8.5 ms: the relay +0.4 and +2.5 ms over it") ||
		!strings.Contains(lines, "medians of 3 runs") {
		t.Errorf("targets:\n%s", lines)
	}
}

func TestOneLiveRunKeepsTheSingleRunTable(t *testing.T) {
	one := mergeLiveRuns([][]liveRow{{{rate: "500/s", achieved: 500, observer: "floor", n: 10, got: 10, p50: time.Millisecond, p99: 2 * time.Millisecond, max: 3 * time.Millisecond}}})
	table := liveTable(one)
	if strings.Contains(table, "min–max") || !strings.Contains(table, "| 500/s | 500 | floor | 10/10 | 1.0 | 2.0 | 3.0 |") {
		t.Errorf("one run's table:\n%s", table)
	}
}

func TestMergeLiveRunsTakesTheMedianCPUPerEventAndIdleShare(t *testing.T) {
	row := func(n int, cpu float64) liveRow {
		return liveRow{rate: "2000/s", achieved: 2000, observer: "stdout run: relay → stdout, read from its pipe", n: n, got: n, cpu: cpu}
	}
	idle := func(cpu float64, wrote int64) liveRow {
		return liveRow{rate: "idle", observer: "stdout run: relay, no traffic", cpu: cpu, idle: 10 * time.Second, wrote: wrote}
	}
	// Per event: 100, 50 (the median) and 30 µs.
	got := mergeLiveRuns([][]liveRow{
		{idle(0.02, 0), row(1000, 0.1)},
		{idle(0.01, 0), row(2000, 0.1)},
		{idle(0.5, 300), row(1000, 0.03)},
	})
	if len(got) != 2 {
		t.Fatalf("rows %+v, want the idle row and the 2000/s row", got)
	}
	if pe := got[1].cpuPerEvent(); pe < 49.9 || pe > 50.1 {
		t.Errorf("CPU per event %.2f µs, want 50 (the median of 100, 50 and 30)", pe)
	}
	if got[0].cpuPerEvent() != -1 {
		t.Errorf("the idle row has a CPU per event %.2f; it has no events", got[0].cpuPerEvent())
	}
	table := liveTable(got)
	for _, want := range []string{"| 50.0 |", "| idle 10s | – | stdout run: relay, no traffic | – | – | – | – | – | – | 0.20 % of a core; wrote 300 B (0 B to disk) |"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

func TestStaticEndpointsConfigHasNDistinctEndpointsAndItsOwnCheckpoint(t *testing.T) {
	const n = 1000
	first := liveHead("127.0.0.1", 3306, 7, "/tmp/run", "0-1-5") + "sinks: [{name: hook, type: webhook, webhook: {endpoints: [{name: recv, url: \"http://127.0.0.1:1/hook\"}]}}]\n"
	second := liveHead("127.0.0.1", 3306, 8, "/tmp/run", "0-1-5") + staticEndpointsSink("http://127.0.0.1:1/count/idle", n)
	a, err := config.Parse([]byte(first))
	if err != nil {
		t.Fatalf("the first relay's config: %v", err)
	}
	b, err := config.Parse([]byte(second))
	if err != nil {
		t.Fatalf("the %d endpoints' config: %v", n, err)
	}
	if a.Checkpoint.Path == b.Checkpoint.Path {
		t.Errorf("both relays checkpoint into %s", a.Checkpoint.Path)
	}
	if b.Source.ServerID == a.Source.ServerID {
		t.Errorf("both relays read as server_id %d", b.Source.ServerID)
	}
	if len(b.Sinks) != 1 {
		t.Fatalf("%d sinks, want 1", len(b.Sinks))
	}
	wh, ok := b.Sinks[0].Config.(*webhook.SinkConfig)
	if !ok {
		t.Fatalf("sink config %T, want the webhook's", b.Sinks[0].Config)
	}
	names, urls := map[string]bool{}, map[string]bool{}
	for _, ep := range wh.Endpoints {
		names[ep.Name], urls[ep.URL] = true, true
		if !strings.HasPrefix(ep.URL, "http://127.0.0.1:1/count/idle/") {
			t.Errorf("endpoint %s posts to %s, not below the receiver's /count/idle/", ep.Name, ep.URL)
		}
	}
	if len(wh.Endpoints) != n || len(names) != n || len(urls) != n {
		t.Errorf("%d endpoints, %d names, %d URLs; want %d distinct of each", len(wh.Endpoints), len(names), len(urls), n)
	}
}

func TestGroupedPutsCommasBetweenThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 100000: "100,000", 1234567: "1,234,567", -1000: "-1,000"} {
		if got := grouped(n); got != want {
			t.Errorf("grouped(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestMergeLiveRunsKeepsTheTwoIdleRowsOfTheWebhookRunApart(t *testing.T) {
	const one, many = "webhook run: relay, no traffic", "webhook run: relay with 1,000 static endpoints, no traffic"
	idle := func(observer string, cpu float64, disk int64) liveRow {
		return liveRow{rate: "idle", observer: observer, cpu: cpu, idle: 10 * time.Second, diskWrote: disk}
	}
	// One endpoint: 0.1, 0.2 (the median) and 0.3 % of a core; 1,000:
	// 0.4 (the median), 0.3 and 0.9 %, one run writing 4 KiB.
	got := mergeLiveRuns([][]liveRow{
		{idle(one, 0.01, 0), idle(many, 0.04, 0)},
		{idle(one, 0.02, 0), idle(many, 0.03, 4096)},
		{idle(one, 0.03, 0), idle(many, 0.09, 0)},
	})
	if len(got) != 2 || got[0].observer != one || got[1].observer != many {
		t.Fatalf("rows %+v, want the one endpoint's idle row, then the 1,000 endpoints'", got)
	}
	table := liveTable(got)
	for _, want := range []string{
		"| idle 10s | – | " + one + " | – | – | – | – | – | – | 0.20 % of a core; wrote 0 B (0 B to disk) |",
		"| idle 10s | – | " + many + " | – | – | – | – | – | – | 0.40 % of a core; wrote 0 B (4096 B to disk) |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}
