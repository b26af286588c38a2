package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"strings"
	"time"
)

type reportInput struct {
	rows    int
	live    time.Duration
	table   []backlogRow
	lives   []liveRow
	startup []startupResult
	version string
	took    time.Duration
	machine string
	cpus    int // the machine's cores, against which cores busy is read
	gateway []gatewayRow
}

func rate(r backlogRow) float64 {
	if r.res.Seconds <= 0 {
		return 0
	}
	return float64(r.res.Events) / r.res.Seconds
}

// perMicro is cpu seconds per event in µs, or "–" when not measured.
func perMicro(cpu float64, events int) string {
	if cpu < 0 || events <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", cpu/float64(events)*1e6)
}

// per100k is cpu seconds per 100k of events, or "–" when not measured.
func per100k(cpu float64, events int) string {
	if cpu < 0 || events <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", cpu/float64(events)*100000)
}

// cores is what a row kept busy while it ran: its own, MariaDB's and the
// broker's CPU per event (each 0 when not measured), times its rate. The
// processes share the machine's cores: a row whose total is near their
// number was bound by them, whichever process spent the most.
type cores struct{ own, server, broker float64 }

func coresOf(r backlogRow) cores {
	if r.res.Events <= 0 {
		return cores{}
	}
	per := func(cpu float64) float64 { return max(0, cpu) / float64(r.res.Events) * rate(r) }
	return cores{own: per(r.res.CPU), server: per(r.serverCPU), broker: per(r.brokerCPU)}
}

func (c cores) total() float64 { return c.own + c.server + c.broker }

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000) }

func report(in reportInput) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	server := func() {
		p("Machine: %s. Server: MariaDB %s (private, binlog ROW/FULL/FULL, `innodb_flush_log_at_trx_commit=2`, `sync_binlog=0`, `innodb_buffer_pool_size=%s`). Run took %s.\n\n",
			in.machine, in.version, bufferPool, in.took.Round(time.Second))
	}
	if len(in.table) == 0 && len(in.gateway) > 0 {
		// -only gateway: its rows alone.
		p("## outbox-bench: the gateway at scale\n\n")
		server()
		p("%s", gatewayTables(in.gateway))
		return b.String()
	}
	p("## outbox-bench: %d-row backlog, %s live steps\n\n", in.rows, in.live)
	server()
	p("### Backlog: %d rows committed in transactions of 10 (~100-byte JSON), drained by each in its own process\n\n", in.rows)
	p("| what | events | events/s | × the limit | CPU s per 100k events | peak RSS MB | exec → all s | statements on the source per 1,000 events | same run, CPU s per 100k events: MariaDB · broker or receiver | cores busy |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	limit := 0.0
	if len(in.table) > 0 {
		limit = rate(in.table[0])
	}
	for _, r := range in.table {
		if r.err != nil {
			p("| %s | failed: %v | | | | | | | | |\n", r.name, r.err)
			continue
		}
		x := 0.0
		if limit > 0 {
			x = rate(r) / limit
		}
		cpu := 0.0
		if r.res.Events > 0 {
			cpu = r.res.CPU / float64(r.res.Events) * 100000
		}
		execToAll := "–"
		if r.binary && r.res.ExecToAll > 0 {
			execToAll = fmt.Sprintf("%.2f", r.res.ExecToAll)
		}
		p("| %s | %d | %.0f | %.2f | %.2f | %.0f | %s | %.1f | %s · %s | %.2f |\n", r.name, r.res.Events, rate(r), x, cpu,
			float64(r.res.MaxRSS)/1024, execToAll, float64(r.stmts)/float64(max(1, r.res.Events))*1000,
			per100k(r.serverCPU, r.res.Events), per100k(r.brokerCPU, r.res.Events), coresOf(r).total())
	}
	p("\nEvents/s is clocked where the events arrive, from the first to the last (the relay binary's rows: the bench's end of its stdout pipe, "+
		"the webhook receiver, or the broker, as the sum of the topic's high watermarks polled every %s). "+
		"Exec → all is the time from the relay binary's exec to its last event counted there, its startup included, as a check from outside would time it. "+
		"CPU and peak RSS are each process's whole life. Cores busy is (the row's own + MariaDB's + the broker's CPU per event) × events/s, "+
		"where the webhook rows count the receiver's (the bench's own process, while the row ran) in the broker's place: "+
		"the processes share this machine's %d cores, so a row near %d was bound by the cores, whichever process spent most "+
		"(the bench's own reading of the pipe is in no row; the CPU holds each process's startup and the row's idle ends, which a small -rows "+
		"makes large against the events: judge it at full size).\n", watermarkEvery, in.cpus, in.cpus)
	p("\n%s", readsTable(in.table))
	if len(in.startup) > 0 {
		p("\n%s", startupTable(in.startup))
	}
	if len(in.lives) > 0 {
		p("%s", liveTable(in.lives))
	}
	if len(in.gateway) > 0 {
		p("\n%s", gatewayTables(in.gateway))
	}
	p("\n### Targets (ratios from this run; latencies the medians of its live runs)\n\n")
	for _, t := range targets(in) {
		p("- %s\n", t)
	}
	cfg, which := configOf(in.table, "stdout"), "the stdout run"
	for _, r := range in.startup {
		if cfg == "" && r.target && r.config != "" {
			cfg, which = r.config, "the last quickstart-sized startup run"
		}
	}
	p("\nThe relay ran with its default config except for these lines (source, table, checkpoint, sinks); e.g. %s:\n\n```yaml\n%s```\n", which, cfg)
	return b.String()
}

// liveTable is the live rows' table; over several live runs each latency
// is the median of the runs', with its spread (min–max) beside it.
func liveTable(lives []liveRow) string {
	var b strings.Builder
	runs := 1
	for _, l := range lives {
		runs = max(runs, l.runs)
	}
	if runs == 1 {
		b.WriteString("\n### Live: single-row transactions at a steady rate; latency from the INSERT being sent to the event being seen (ms)\n\n")
		b.WriteString("| rate asked | achieved/s | observer | seen | p50 | p99 | max | CPU µs per event (its process) |\n|---|---:|---|---:|---:|---:|---:|---:|\n")
		for _, l := range lives {
			if l.idle > 0 {
				fmt.Fprintf(&b, "| idle %s | – | %s | – | – | – | – | %s |\n", l.idle, l.observer, idleCell(l))
				continue
			}
			fmt.Fprintf(&b, "| %s | %.0f | %s | %d/%d | %s | %s | %s | %s |\n", l.rate, l.achieved, l.observer, l.got, l.n, ms(l.p50), ms(l.p99), ms(l.max), cpuCell(l))
		}
		return b.String()
	}
	fmt.Fprintf(&b, "\n### Live: single-row transactions at a steady rate; latency from the INSERT being sent to the event being seen (ms), the median of %d runs and the spread (min–max)\n\n", runs)
	b.WriteString("| rate asked | achieved/s (median) | observer | seen, all runs | p50 | p50 min–max | p99 | p99 min–max | max of all runs | CPU µs per event (its process, median) |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, l := range lives {
		if l.idle > 0 {
			fmt.Fprintf(&b, "| idle %s | – | %s | – | – | – | – | – | – | %s |\n", l.idle, l.observer, idleCell(l))
			continue
		}
		_, lo50, hi50 := spread(l.p50s)
		_, lo99, hi99 := spread(l.p99s)
		fmt.Fprintf(&b, "| %s | %.0f | %s | %d/%d | %s | %s–%s | %s | %s–%s | %s | %s |\n", l.rate, l.achieved, l.observer, l.got, l.n,
			ms(l.p50), ms(lo50), ms(hi50), ms(l.p99), ms(lo99), ms(hi99), ms(l.max), cpuCell(l))
	}
	return b.String()
}

// cpuCell is a live row's CPU per event in µs, "–" when not measured.
func cpuCell(l liveRow) string {
	if pe := l.cpuPerEvent(); pe >= 0 {
		return fmt.Sprintf("%.1f", pe)
	}
	return "–"
}

// idleCell is an idle row's CPU, as a share of one core, and its writes.
func idleCell(l liveRow) string {
	return fmt.Sprintf("%.2f %% of a core; wrote %d B (%d B to disk)", l.cpu/l.idle.Seconds()*100, l.wrote, l.diskWrote)
}

func configOf(rows []backlogRow, sub string) string {
	for _, r := range rows {
		if strings.Contains(r.name, sub) && r.config != "" {
			return r.config
		}
	}
	return ""
}

func find(rows []backlogRow, sub string) (backlogRow, bool) {
	for _, r := range rows {
		if strings.Contains(r.name, sub) && r.err == nil {
			return r, true
		}
	}
	return backlogRow{}, false
}

func findLive(rows []liveRow, rate, sub string) (liveRow, bool) {
	for _, r := range rows {
		if r.rate == rate && strings.Contains(r.observer, sub) {
			return r, true
		}
	}
	return liveRow{}, false
}

// overMS is d in ms to one decimal, for "%+.1f": a difference that rounds
// to nothing reads +0.0, not -0.0.
func overMS(d time.Duration) float64 {
	x := math.Round(d.Seconds()*1e4) / 10
	if x == 0 {
		return 0
	}
	return x
}

func met(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**not met**"
}

func targets(in reportInput) []string {
	var out []string
	limit, ok := find(in.table, "the limit")
	if !ok {
		return []string{"no limit measured"}
	}
	L := rate(limit)
	if r, ok := find(in.table, "stdout"); ok {
		x := rate(r) / L
		out = append(out, fmt.Sprintf("relay, stdout sink ≥ 0.8× the bare decode rate: %.2f× — %s", x, met(x >= 0.8)))
		extra := (r.res.CPU - limit.res.CPU) / float64(r.res.Events) * 1e6
		out = append(out, fmt.Sprintf("relay CPU per event beyond go-mysql's decoding ≤ 3 µs: %.2f µs (stdout run CPU − bare decode CPU, per event) — %s", extra, met(extra <= 3)))
		if in.rows >= 1000000 {
			mb := float64(r.res.MaxRSS) / 1024
			out = append(out, fmt.Sprintf("peak RSS ≤ 150 MB on %d rows: %.0f MB — %s", in.rows, mb, met(mb <= 150)))
		} else {
			out = append(out, fmt.Sprintf("peak RSS ≤ 150 MB on 1M rows: not measured at this size (%.0f MB on %d rows; run with -rows 1000000)", float64(r.res.MaxRSS)/1024, in.rows))
		}
	}
	poll, havePoll := find(in.table, "1 worker")
	if r, ok := find(in.table, kafka6); ok && r.res.Events > 0 {
		x := rate(r) / L
		c := coresOf(r)
		// Below 0.8×, the target says the row was bound by the
		// machine's cores (the relay, the broker and MariaDB together
		// kept ≥ 90 % of them busy), with the figures that show it.
		verdict := met(x >= 0.8)
		if x < 0.8 && in.cpus > 0 && c.total() >= 0.9*float64(in.cpus) {
			verdict = fmt.Sprintf("**not met as a ratio: bound by the cores** (%.2f of the %d busy)", c.total(), in.cpus)
		}
		out = append(out, fmt.Sprintf("relay → Kafka, 6 partitions ≥ 0.8× the bare decoder, or bound by the broker or the cores: %.2f× — %s; cores busy %.2f of %d: relay %.2f + broker %.2f + MariaDB %.2f (%.0f/s × CPU per event: relay %.1f µs, broker %s µs, MariaDB %s µs)",
			x, verdict, c.total(), in.cpus, c.own, c.broker, c.server, rate(r),
			r.res.CPU/float64(r.res.Events)*1e6, perMicro(r.brokerCPU, r.res.Events), perMicro(r.serverCPU, r.res.Events)))
		for _, o := range []struct{ name, what string }{{kafka1, "1 partition"}, {kafka6Blackhole, "6 partitions, into a broker that stores nothing"}} {
			if one, ok := find(in.table, o.name); ok && one.res.Events > 0 {
				c1 := coresOf(one)
				out = append(out, fmt.Sprintf("(no target) relay → Kafka, %s: %.2f× the bare decoder; CPU per event: relay %.1f µs, broker %s µs, MariaDB %s µs; cores busy %.2f of %d",
					o.what, rate(one)/L, one.res.CPU/float64(one.res.Events)*1e6, perMicro(one.brokerCPU, one.res.Events), perMicro(one.serverCPU, one.res.Events), c1.total(), in.cpus))
			}
		}
		cpu, lim := r.res.CPU/float64(r.res.Events)*1e6, limit.res.CPU/float64(max(1, limit.res.Events))*1e6
		out = append(out, fmt.Sprintf("relay process CPU per event to Kafka ≤ the bare decoder's + 2 µs: %.2f µs vs %.2f + 2 µs (whole processes; the relay's startup included) — %s",
			cpu, lim, met(cpu <= lim+2)))
		if havePoll {
			y := rate(r) / rate(poll)
			out = append(out, fmt.Sprintf("relay → Kafka ≥ 10× the 1-worker poller: %.1f× (%.0f/s against %.0f/s) — %s", y, rate(r), rate(poll), met(y >= 10)))
		}
	}
	if r, ok := find(in.table, kafka6Delay); ok {
		out = append(out, fmt.Sprintf("relay → Kafka through +2 ms round trip ≥ 100k events/s: %.0f/s — %s", rate(r), met(rate(r) >= 100000)))
	}
	if f, ok := find(in.table, "HTTP floor"); ok && f.res.Events > 0 {
		F := rate(f)
		floorCPU := f.res.CPU / float64(f.res.Events) * 1e6
		if r, ok := find(in.table, "webhook, 1 endpoint"); ok && r.res.Events > 0 {
			x := rate(r) / F
			cr, cf := coresOf(r), coresOf(f)
			out = append(out, fmt.Sprintf("relay → webhook, 1 endpoint ≥ 0.8× the HTTP floor: %.2f× (%.0f/s against the floor's own %.0f/s at %d connections) — %s; cores busy %.2f of %d (relay %.2f + receiver %.2f + MariaDB %.2f) against the floor's %.2f (client %.2f + receiver %.2f)",
				x, rate(r), F, floorConcurrency, met(x >= 0.8), cr.total(), in.cpus, cr.own, cr.broker, cr.server, cf.total(), cf.own, cf.broker))
			cpu := r.res.CPU / float64(r.res.Events) * 1e6
			out = append(out, fmt.Sprintf("relay CPU per webhook delivered ≤ the floor client's + 10 µs: %.1f µs vs %.1f + 10 µs (whole processes, per request) — %s",
				cpu, floorCPU, met(cpu <= floorCPU+10)))
		}
		if r, ok := find(in.table, "endpoints on one stream"); ok && r.res.Events > 0 {
			// At the same total concurrency as the floor, when it was measured.
			G, at := F, floorConcurrency
			if g, ok := find(in.table, "gateway row's total concurrency"); ok && g.res.Events > 0 {
				G, at = rate(g), tenants
			}
			x := rate(r) / G
			out = append(out, fmt.Sprintf("relay → webhook, %d endpoints on one stream ≥ 0.6× the HTTP floor at the same total concurrency: %.2f× the floor at %d connections (%.0f/s against the floor's own %.0f/s; %.2f× the floor at %d) — %s",
				tenants, x, at, rate(r), G, rate(r)/F, floorConcurrency, met(x >= 0.6)))
		}
	}
	if t := startupLine(in.startup); t != "" {
		out = append(out, t)
	}
	// Each sink's relay run has its own bare reader and floor (live.go).
	for _, sk := range []string{"Kafka", "webhook"} {
		f, ok1 := findLive(in.lives, "2000/s", sk+" run: bare go-mysql reader")
		l, ok2 := findLive(in.lives, "2000/s", sk+" run: relay")
		if !ok1 || !ok2 {
			continue
		}
		of := ""
		if l.runs > 1 {
			of = fmt.Sprintf("; medians of %d runs, the bare reader's and the floor's from the same runs", l.runs)
		}
		bound := ""
		if fl, ok := findLive(in.lives, "2000/s", sk+" run: bare reader →"); ok {
			bound = fmt.Sprintf("; %s's floor (the bare reader handing each row to a bare client) p50 %s, p99 %s ms: the relay %+.1f and %+.1f ms over it",
				sk, ms(fl.p50), ms(fl.p99), overMS(l.p50-fl.p50), overMS(l.p99-fl.p99))
		}
		out = append(out, fmt.Sprintf("commit → %s at 2,000/s (a relay with that sink alone): p50 ≤ bare reader's + 1 ms: %s vs %s ms — %s; p99 ≤ bare reader's + 3 ms: %s vs %s ms — %s%s%s",
			sk, ms(l.p50), ms(f.p50), met(l.got == l.n && l.p50 <= f.p50+time.Millisecond),
			ms(l.p99), ms(f.p99), met(l.got == l.n && l.p99 <= f.p99+3*time.Millisecond), bound, of))
	}
	return out
}

// writeChart draws, without text, the backlog rates relative to the limit
// (one bar per table row, in order: the limit dark grey, the relay blue, a
// baseline build light blue, the poller orange; grey lines at 0.5× and
// 0.8×) and, for the 2,000/s live step, p50 (dark) and p99 (light) of the
// bare reader, the relay's webhook and its Kafka sink (grey line: the bare
// reader's p99 + 3 ms).
func writeChart(path string, table []backlogRow, lives []liveRow) error {
	const w, h, pad = 900, 420, 20
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	fill := func(x0, y0, x1, y1 int, c color.Color) {
		for y := max(0, y0); y < min(h, y1); y++ {
			for x := max(0, x0); x < min(w, x1); x++ {
				img.Set(x, y, c)
			}
		}
	}
	fill(0, 0, w, h, color.White)
	grey := color.RGBA{160, 160, 160, 255}
	// Left panel: rates.
	limit := 0.0
	if len(table) > 0 {
		limit = rate(table[0])
	}
	left := w/2 - pad
	base := h - pad
	top := pad
	scale := func(x float64) int { return base - int(x*float64(base-top)/1.2) }
	fill(pad, scale(0.8), left, scale(0.8)+1, grey)
	fill(pad, scale(0.5), left, scale(0.5)+1, grey)
	if limit > 0 && len(table) > 0 {
		bw := (left - pad) / len(table)
		for i, r := range table {
			x := rate(r) / limit
			c := color.RGBA{40, 110, 200, 255}
			if i == 0 {
				c = color.RGBA{90, 90, 90, 255}
			}
			if strings.Contains(r.name, "poller") {
				c = color.RGBA{220, 120, 40, 255}
			}
			if strings.HasPrefix(r.name, "baseline") {
				c = color.RGBA{170, 190, 220, 255}
			}
			fill(pad+i*bw+4, scale(min(x, 1.2)), pad+(i+1)*bw-4, base, c)
		}
	}
	// Right panel: latencies at 2,000/s.
	var at []liveRow
	for _, l := range lives {
		if l.rate == "2000/s" && !strings.Contains(l.observer, "poller") {
			at = append(at, l)
		}
	}
	if len(at) > 0 {
		maxD := time.Millisecond
		for _, l := range at {
			maxD = max(maxD, l.p99)
		}
		x0 := w/2 + pad
		bw := (w - pad - x0) / len(at)
		ly := func(d time.Duration) int { return base - int(float64(d)/float64(maxD)*float64(base-top)) }
		if f, ok := findLive(at, "2000/s", "bare go-mysql reader"); ok {
			fill(x0, ly(f.p99+3*time.Millisecond), w-pad, ly(f.p99+3*time.Millisecond)+1, grey)
		}
		for i, l := range at {
			fill(x0+i*bw+4, ly(l.p99), x0+(i+1)*bw-4, base, color.RGBA{150, 200, 240, 255})
			fill(x0+i*bw+4, ly(l.p50), x0+(i+1)*bw-4, base, color.RGBA{30, 80, 160, 255})
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return png.Encode(f, img)
}

// readsTable is what each backlog row cost the source in rows read: the
// server's InnoDB rows read and handler reads (Handler_read_*), per event,
// with its CPU, beside the table above.
func readsTable(rows []backlogRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Reads on the source while each row ran, per event (global status deltas: `Innodb_rows_read`, which MariaDB 10.6 and later no longer count, MDEV-28539; `Handler_read_*`, their sum and each kind of at least 0.001 per event):\n\n")
	fmt.Fprintf(&b, "| what | InnoDB rows read per event | handler reads per event | statements per 1,000 events | MariaDB CPU s per 100k events |\n|---|---:|---|---:|---:|\n")
	for _, r := range rows {
		if r.err != nil || r.res.Events <= 0 {
			continue
		}
		n := float64(r.res.Events)
		fmt.Fprintf(&b, "| %s | %.2f | %s | %.1f | %s |\n", r.name, float64(r.reads.innodb)/n, r.reads.perEvent(r.res.Events),
			float64(r.stmts)/n*1000, per100k(r.serverCPU, r.res.Events))
	}
	return b.String()
}
