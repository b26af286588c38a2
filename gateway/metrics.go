package gateway

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/paging"
	"github.com/outbox-relay/outbox-relay/metrics"
)

// TopLaggingEndpoints is how many endpoints of each webhook sink get a
// series of their own in outbox_relay_gateway_endpoint_lag_seconds: the
// ones with the oldest unacknowledged events. Every other per-endpoint
// figure is served as JSON on /endpoints, not as series, so a gateway with
// 10,000 endpoints adds a few dozen series, not hundreds of thousands.
const TopLaggingEndpoints = 10

// MetricNames lists the metric families of the gateway (NewMetrics). They
// are not in metrics.Names: only a relay with a webhook sink has series of
// them.
var MetricNames = []string{
	"outbox_relay_gateway_endpoints",
	"outbox_relay_gateway_endpoint_lag_seconds",
	"outbox_relay_gateway_held_cursor_age_seconds",
	"outbox_relay_gateway_awake_endpoints",
	"outbox_relay_gateway_max_awake_waits_total",
	"outbox_relay_gateway_max_awake_wait_seconds_total",
}

// Metrics holds the gateway's metrics of one relay: per webhook sink run as
// a gateway (Sink), the sink's series, summed over its endpoints, in
// package metrics, and the bounded per-endpoint series here. NewMetrics
// registers them on a relay's metrics, serves /endpoints beside /metrics
// and notes on /readyz the endpoints stopped for good.
type Metrics struct {
	m                             *metrics.Metrics
	statesDesc, lagDesc, heldDesc *prometheus.Desc
	// The bound on awake endpoints (AwakeObserver).
	awakeDesc, waitsDesc, waitedDesc *prometheus.Desc

	mu    sync.Mutex
	sinks map[string]*SinkMetrics
}

// NewMetrics registers the gateway's metrics on m (call it before
// metrics.Handler, which then serves /endpoints).
func NewMetrics(m *metrics.Metrics) (*Metrics, error) {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "", name), help, labels, nil)
	}
	gm := &Metrics{m: m, sinks: map[string]*SinkMetrics{},
		statesDesc: desc("gateway_endpoints", "Endpoints of a webhook sink by state: attached (fed by the shared stream), waiting (detached, waiting for room or a catch-up stream), catching_up (reading a stream of its own), disabled (by the relay: failed without a break for webhook.gateway.disable_after, or answered 410 Gone; waits to be enabled), off (its table row has enabled = 0), invalid (its table row cannot be used), stopped (its pipeline stopped on an error).", "sink", "state"),
		lagDesc:    desc("gateway_endpoint_lag_seconds", fmt.Sprintf("Age of the oldest unacknowledged event of the %d endpoints of a webhook sink with the oldest ones (only those: /endpoints lists every endpoint).", TopLaggingEndpoints), "sink", "endpoint"),
		heldDesc: desc("gateway_held_cursor_age_seconds", "Age of the oldest cursor of a webhook sink's endpoints that do not run (disabled, off, invalid, stopped): "+
			"the events committed after it wait for that endpoint and are sent once it runs again; 0 when every endpoint runs. /endpoints shows each one's cursor.", "sink"),
		awakeDesc: desc("gateway_awake_endpoints", "Endpoints of a webhook sink that its shared stream woke for their events and that are on it now, each with a pipeline, a queue and a connection: "+
			"those gateway.max_awake bounds (those whose last attempts failed count here but not toward the bound).", "sink"),
		waitsDesc: desc("gateway_max_awake_waits_total", "Times the shared stream of a webhook sink waited to wake an endpoint because gateway.max_awake endpoints were awake.", "sink"),
		waitedDesc: desc("gateway_max_awake_wait_seconds_total", "Time the shared stream of a webhook sink spent waiting to wake an endpoint because gateway.max_awake endpoints were awake "+
			"(counted while it waits): a rate near 1 means the stream reads no further than its awake endpoints deliver.", "sink"),
	}
	if err := m.Register(collector{gm}); err != nil {
		return nil, err
	}
	m.Handle("GET /endpoints", gm.EndpointsHandler())
	m.AddNotes(gm.stoppedNotes)
	return gm, nil
}

// SinkMetrics holds the metrics of one webhook sink run as a gateway. The
// sink's series (delivered, failed, latency, in flight, checkpoint saves,
// sink_up) are labeled with the webhook sink's name and sum its endpoints;
// per endpoint there are only outbox_relay_gateway_endpoints (a count per
// state) and the TopLaggingEndpoints lag series.
type SinkMetrics struct {
	gm      *Metrics
	name    string
	base    *metrics.PipelineObserver // the sink-level series
	retries *metrics.EndpointObserver // the sink-level count of endpoints' own retries

	// The bound on awake endpoints, as the sink's hubs report it
	// (AwakeObserver): endpoints awake, waits at max_awake and their time.
	awake, waits, waitedNanos atomic.Int64

	mu sync.Mutex
	// states is every endpoint's state, by key, and counts how many are
	// in each: all an endpoint that never delivered, failed or was held
	// costs here. figs are the figures of those that have any.
	states        map[string]State
	counts        [numStates]int
	figs          map[string]*endpointStats
	inFlight      int
	inFlightBytes int
	dlWaiting     int // events its endpoints wait on (their waiting)
}

// EndpointStats is what /endpoints reports of one endpoint.
type EndpointStats struct {
	Endpoint string `json:"endpoint"`
	State    string `json:"state"`
	// The counts and figures below are left out of the JSON when zero
	// (an idle endpoint that never failed is its name and its state).
	Delivered   uint64 `json:"delivered,omitempty"`
	Failed      uint64 `json:"failed,omitempty"`
	Retried     uint64 `json:"retried,omitempty"`
	DeadLetters uint64 `json:"dead_letters,omitempty"`
	InFlight    int    `json:"in_flight,omitempty"`
	// LagSeconds is the age of its oldest unacknowledged event (0: none).
	LagSeconds float64 `json:"lag_seconds,omitempty"`
	// P99Seconds is the 99th percentile of its commit-to-ack latency, from
	// metrics.LatencyBuckets (an upper bound), over its life.
	P99Seconds float64   `json:"p99_seconds,omitempty"`
	LastSave   time.Time `json:"last_checkpoint_save,omitzero"`
	Stopped    string    `json:"stopped,omitempty"`
	// Invalid says why its row of the endpoints table cannot be used
	// (state invalid).
	Invalid string `json:"invalid,omitempty"`
	// Failing is when its current run of failed attempts began (zero: its
	// last attempt succeeded).
	Failing time.Time `json:"failing_since,omitzero"`
	// Cursor, for an endpoint that does not run (stopped, disabled, off,
	// invalid), is its cursor: what it holds back. Its events after it
	// wait and are sent once it runs again (on the binlog, the cursor also
	// holds back prune and the binlog retention the sink needs; on Kafka,
	// the topic's retention deletes by time whatever it says).
	Cursor string `json:"cursor,omitempty"`
	// HeldSince is since when those events wait: the commit time of the
	// last transaction its cursor covers (when it was saved, without one);
	// HeldSeconds is its age.
	HeldSince   time.Time `json:"held_since,omitzero"`
	HeldSeconds float64   `json:"held_seconds,omitempty"`
	// DeadLetterWaiting names the event it waits on because the
	// dead-letter store does not take its record, why, and the fix.
	DeadLetterWaiting string `json:"dead_letter_waiting,omitempty"`
}

// endpointStats are the figures of one endpoint that has any: what
// EndpointStats shows of it that is not worked out when it is read (its
// name and state are SinkMetrics.states', its lag, p99 and held seconds
// are read from oldest, latency and HeldSince). Every endpoint that has
// delivered keeps one (BenchmarkEndpointFiguresMemory).
type endpointStats struct {
	Delivered, Failed, Retried, DeadLetters uint64
	InFlight                                int
	LastSave, Failing, HeldSince            time.Time
	Stopped, Invalid, Cursor                string
	DeadLetterWaiting                       string

	waiting metrics.WaitingDeadLetters
	bytes   int
	oldest  time.Time
	file    string // binlog file of its last saved cursor
	// latency counts per metrics.LatencyBuckets, and one past the last
	// (in place: no allocation of its own).
	latency [numLatency]uint32
}

// numLatency is how many counts an endpoint's latency has: one per
// metrics.LatencyBuckets, and one past the last
// (TestLatencyCountsMatchTheBuckets).
const numLatency = 19

// Sink returns the metrics of the webhook sink name (the same each call).
func (gm *Metrics) Sink(name string) *SinkMetrics {
	gm.mu.Lock()
	defer gm.mu.Unlock()
	if g := gm.sinks[name]; g != nil {
		return g
	}
	g := &SinkMetrics{gm: gm, name: name, base: gm.m.Pipeline(name), retries: gm.m.Endpoint(name),
		states: map[string]State{}, figs: map[string]*endpointStats{}}
	g.base.FanOut(g.derive)
	gm.sinks[name] = g
	return g
}

// numStates is how many States there are.
const numStates = int(Invalid) + 1

// stats returns key's figures, made when it has none: it is listed from
// then on (in state stopped, until it reports one).
func (g *SinkMetrics) stats(key string) *endpointStats {
	g.known(key)
	s := g.figs[key]
	if s == nil {
		s = &endpointStats{}
		g.figs[key] = s
	}
	return s
}

// known lists key, in state stopped until it reports one.
func (g *SinkMetrics) known(key string) {
	if _, ok := g.states[key]; !ok {
		g.setState(key, Stopped)
	}
}

// setState sets key's state, counted.
func (g *SinkMetrics) setState(key string, st State) {
	if old, ok := g.states[key]; ok {
		g.counts[old]--
	}
	g.states[key] = st
	g.counts[st]++
}

// State records an endpoint's state (an Observer).
func (g *SinkMetrics) State(key string, st State) {
	g.mu.Lock()
	g.setState(key, st)
	if s := g.figs[key]; s != nil {
		if st.Running() {
			s.Cursor, s.HeldSince = "", time.Time{} // it runs: its cursor moves
		}
		if st != Stopped {
			s.Stopped = "" // running again, or not running for another reason
		}
		if st != Invalid {
			s.Invalid = ""
		}
	}
	g.mu.Unlock()
}

// Held records the cursor of key, an endpoint that does not run (an
// Observer): its events after cursor, committed since since, wait for it.
// Ignored once it runs again.
func (g *SinkMetrics) Held(key string, cursor event.Position, since time.Time) {
	g.mu.Lock()
	if st, ok := g.states[key]; !ok || !st.Running() {
		s := g.stats(key)
		s.Cursor, s.HeldSince = cursor.String(), since
		if cursor.File != "" {
			s.file = cursor.File // the sink's binlog retention counts it
		}
	}
	g.mu.Unlock()
}

// Awake counts the endpoints the sink's hubs woke and hold awake (an
// AwakeObserver).
func (g *SinkMetrics) Awake(delta int) { g.awake.Add(int64(delta)) }

// AwakeWait counts the shared stream's waits at max_awake and their time
// (an AwakeObserver).
func (g *SinkMetrics) AwakeWait(began bool, d time.Duration) {
	if began {
		g.waits.Add(1)
	}
	g.waitedNanos.Add(int64(d))
}

// Invalid records that key's row of the endpoints table cannot be used,
// and why (state invalid).
func (g *SinkMetrics) Invalid(key string, err error) {
	g.mu.Lock()
	s := g.stats(key)
	g.setState(key, Invalid)
	s.Stopped, s.Invalid = "", err.Error()
	g.mu.Unlock()
}

// Forget drops key (its row was deleted): it is no longer listed.
func (g *SinkMetrics) Forget(key string) {
	g.mu.Lock()
	if s := g.figs[key]; s != nil {
		g.inFlight -= s.InFlight
		g.inFlightBytes -= s.bytes
		g.dlWaiting -= len(s.waiting)
		delete(g.figs, key)
	}
	if st, ok := g.states[key]; ok {
		g.counts[st]--
		delete(g.states, key)
	}
	n := g.dlWaiting
	g.mu.Unlock()
	g.base.DeadLettersWaiting(n)
}

// Endpoint returns the pipeline observer of one endpoint.
func (g *SinkMetrics) Endpoint(key string) *EndpointMetrics {
	g.mu.Lock()
	g.known(key)
	g.mu.Unlock()
	return &EndpointMetrics{g: g, key: key}
}

// EndpointMetrics observes one endpoint's pipeline (a pipeline.Observer,
// ResumeObserver and DeadLetterObserver).
type EndpointMetrics struct {
	g   *SinkMetrics
	key string
}

func (o *EndpointMetrics) with(f func(s *endpointStats)) {
	o.g.mu.Lock()
	f(o.g.stats(o.key))
	o.g.mu.Unlock()
}

// Delivered counts an acknowledged event.
func (o *EndpointMetrics) Delivered(e *event.Event, at time.Time) {
	o.g.base.Delivered(e, at)
	o.with(func(s *endpointStats) {
		s.Delivered++
		s.Failing = time.Time{}
		if !e.CommitTime.IsZero() {
			d := max(at.Sub(e.CommitTime).Seconds(), 0)
			i, _ := slices.BinarySearch(metrics.LatencyBuckets, d)
			if s.latency[i] < math.MaxUint32 {
				s.latency[i]++
			}
		}
	})
}

// Failed counts a failed attempt.
func (o *EndpointMetrics) Failed(e *event.Event, err error, permanent bool) {
	o.g.base.Failed(e, err, permanent)
	o.with(func(s *endpointStats) {
		s.Failed++
		if !permanent {
			s.Retried++
		}
		if s.Failing.IsZero() {
			s.Failing = o.g.gm.m.Now()
		}
	})
}

// Retries returns the endpoint's webhook.Observer: the webhook endpoint
// runs its own retries, which the pipeline never sees.
func (o *EndpointMetrics) Retries() EndpointRetries { return EndpointRetries{o} }

// EndpointRetries counts the retries a webhook endpoint schedules itself (a
// webhook.Observer).
type EndpointRetries struct{ o *EndpointMetrics }

// Attempt is not counted.
func (EndpointRetries) Attempt(int, time.Duration) {}

// Delivered is counted by the pipeline.
func (EndpointRetries) Delivered(time.Duration) {}

// Failed is counted by the pipeline.
func (EndpointRetries) Failed(string) {}

// Retry counts a failed attempt that will be retried, by the class of err.
func (r EndpointRetries) Retry(err error) {
	o := r.o
	o.g.retries.Retry(err)
	o.with(func(s *endpointStats) {
		s.Failed++
		s.Retried++
		if s.Failing.IsZero() {
			s.Failing = o.g.gm.m.Now()
		}
	})
}

// DeadLetterWaiting records that the endpoint waits on e, whose dead
// letter the store does not take (err; nil once it took it): /endpoints
// and /readyz's notes name it, and the sink's gauge counts it with the
// other endpoints'.
func (o *EndpointMetrics) DeadLetterWaiting(e *event.Event, err error, fix string) {
	g := o.g
	g.mu.Lock()
	s := g.stats(o.key)
	g.dlWaiting += s.waiting.Set(e, err, fix)
	s.DeadLetterWaiting = s.waiting.String()
	n := g.dlWaiting
	g.mu.Unlock()
	g.base.DeadLettersWaiting(n)
}

// DeadLettered counts a dead letter.
func (o *EndpointMetrics) DeadLettered(e *event.Event, reason string) {
	o.g.base.DeadLettered(e, reason)
	o.with(func(s *endpointStats) { s.DeadLetters++ })
}

// InFlight records the endpoint's unacknowledged events; the sink's gauges
// are the sum over its endpoints (its oldest is derived at scrape time).
func (o *EndpointMetrics) InFlight(events, bytes int, oldest time.Time) {
	g := o.g
	g.mu.Lock()
	if g.figs[o.key] == nil && events == 0 && bytes == 0 {
		g.mu.Unlock() // nothing in flight, as it had: no figures to make
		return
	}
	s := g.stats(o.key)
	g.inFlight += events - s.InFlight
	g.inFlightBytes += bytes - s.bytes
	s.InFlight, s.bytes, s.oldest = events, bytes, oldest
	total, totalBytes := g.inFlight, g.inFlightBytes
	g.mu.Unlock()
	g.base.InFlight(total, totalBytes, time.Time{})
}

// CheckpointSaved counts a save of the endpoint's cursor. The sink's
// binlog purge margin is its oldest cursor's (derived at scrape time).
func (o *EndpointMetrics) CheckpointSaved(pos event.Position, at time.Time) {
	o.g.base.CheckpointSaved(event.Position{}, at)
	o.with(func(s *endpointStats) {
		s.LastSave = at
		if pos.File != "" {
			s.file = pos.File
		}
	})
}

// SinkUp is the sink's: up when any endpoint's last attempt succeeded.
func (o *EndpointMetrics) SinkUp(up bool) {
	if up {
		o.g.base.SinkUp(true)
	}
}

// SinkConnected is not recorded: a webhook endpoint connects nothing (its
// Connect starts its workers), and its trouble is its own (Ready).
func (o *EndpointMetrics) SinkConnected(error) {}

// Stopped records that the endpoint stopped for good; the sink goes on.
func (o *EndpointMetrics) Stopped(err error) {
	o.g.mu.Lock()
	o.g.stats(o.key).Stopped = err.Error()
	o.g.setState(o.key, Stopped)
	o.g.mu.Unlock()
}

// Skipped counts, on the webhook sink's series, an event the endpoint's
// restart did not send again (pipeline.ResumeObserver).
func (o *EndpointMetrics) Skipped(by string) { o.g.base.Skipped(by) }

// Resent counts, on the webhook sink's series, an event the endpoint's
// restart sent that may have been delivered before.
func (o *EndpointMetrics) Resent() { o.g.base.Resent() }

// RecoverFellBack counts, on the webhook sink's series, a restart that could
// not read back (webhooks never can; kept for the interface).
func (o *EndpointMetrics) RecoverFellBack() { o.g.base.RecoverFellBack() }

// Foreign counts, on the webhook sink's series, a foreign message read back
// (webhooks are never read back; kept for the interface).
func (o *EndpointMetrics) Foreign(why string) { o.g.base.Foreign(why) }

// Stopped records that the whole sink stopped (its shared stream failed for good).
func (g *SinkMetrics) Stopped(err error) { g.base.Stopped(err) }

// Endpoints returns every endpoint's figures, oldest unacknowledged first.
func (g *SinkMetrics) Endpoints() []EndpointStats { return g.endpoints(nil) }

// endpoints is Endpoints of those whose state keep selects (nil: all).
func (g *SinkMetrics) endpoints(keep func(State) bool) []EndpointStats {
	now := g.gm.m.Now()
	g.mu.Lock()
	out := make([]EndpointStats, 0, len(g.states))
	for key, st := range g.states {
		if keep == nil || keep(st) {
			out = append(out, g.endpointLocked(key, st, now))
		}
	}
	g.mu.Unlock()
	sortByLag(out)
	return out
}

// sortByLag orders figures oldest unacknowledged first, then by endpoint.
func sortByLag(out []EndpointStats) {
	slices.SortFunc(out, func(a, b EndpointStats) int {
		if c := cmp.Compare(b.LagSeconds, a.LagSeconds); c != 0 {
			return c
		}
		return cmp.Compare(a.Endpoint, b.Endpoint)
	})
}

// endpointLocked is what /endpoints reports of key, in state st, at now.
func (g *SinkMetrics) endpointLocked(key string, st State, now time.Time) EndpointStats {
	s := g.figs[key]
	if s == nil {
		return EndpointStats{Endpoint: key, State: st.String()}
	}
	e := EndpointStats{Endpoint: key, State: st.String(),
		Delivered: s.Delivered, Failed: s.Failed, Retried: s.Retried, DeadLetters: s.DeadLetters, InFlight: s.InFlight,
		LastSave: s.LastSave, Stopped: s.Stopped, Invalid: s.Invalid, Failing: s.Failing,
		Cursor: s.Cursor, HeldSince: s.HeldSince, DeadLetterWaiting: s.DeadLetterWaiting}
	if s.InFlight > 0 && !s.oldest.IsZero() {
		e.LagSeconds = max(now.Sub(s.oldest).Seconds(), 0)
	}
	e.P99Seconds = quantile(s.latency[:], 0.99)
	if e.Cursor != "" && !e.HeldSince.IsZero() {
		e.HeldSeconds = max(now.Sub(e.HeldSince).Seconds(), 0)
	}
	return e
}

// quantile reads q from per-bucket counts (upper bounds; +Inf past the last).
func quantile(counts []uint32, q float64) float64 {
	buckets := metrics.LatencyBuckets
	var n uint64
	for _, c := range counts {
		n += uint64(c)
	}
	if n == 0 {
		return 0
	}
	rank := uint64(q*float64(n-1)) + 1
	var seen uint64
	for i, c := range counts {
		seen += uint64(c)
		if seen >= rank {
			if i < len(buckets) {
				return buckets[i]
			}
			break
		}
	}
	return buckets[len(buckets)-1]
}

// derive gives the sink's facts from its endpoints' (metrics'
// PipelineObserver.FanOut): the oldest unacknowledged event of any, and the
// oldest cursor's binlog file (the binlog retention the sink needs).
func (g *SinkMetrics) derive() (oldest time.Time, file string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.figs {
		if s.file != "" && (file == "" || compareLogs(s.file, file) < 0) {
			file = s.file
		}
		if s.InFlight > 0 && !s.oldest.IsZero() && (oldest.IsZero() || s.oldest.Before(oldest)) {
			oldest = s.oldest
		}
	}
	return oldest, file
}

// compareLogs orders binlog file names: same base name, a numeric suffix that
// may grow past six digits.
func compareLogs(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return cmp.Compare(a, b)
}

// collector emits the bounded per-endpoint series of every sink.
type collector struct{ gm *Metrics }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.gm.statesDesc
	ch <- c.gm.lagDesc
	ch <- c.gm.heldDesc
	ch <- c.gm.awakeDesc
	ch <- c.gm.waitsDesc
	ch <- c.gm.waitedDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, g := range c.gm.all() {
		counts, busy := g.summary()
		held := 0.0
		for _, e := range busy {
			if e.Cursor != "" {
				held = max(held, e.HeldSeconds)
			}
		}
		ch <- prometheus.MustNewConstMetric(c.gm.heldDesc, prometheus.GaugeValue, held, g.name)
		ch <- prometheus.MustNewConstMetric(c.gm.awakeDesc, prometheus.GaugeValue, float64(g.awake.Load()), g.name)
		ch <- prometheus.MustNewConstMetric(c.gm.waitsDesc, prometheus.CounterValue, float64(g.waits.Load()), g.name)
		ch <- prometheus.MustNewConstMetric(c.gm.waitedDesc, prometheus.CounterValue, time.Duration(g.waitedNanos.Load()).Seconds(), g.name)
		for _, st := range States {
			ch <- prometheus.MustNewConstMetric(c.gm.statesDesc, prometheus.GaugeValue, float64(counts[st]), g.name, st.String())
		}
		for _, e := range busy[:min(len(busy), TopLaggingEndpoints)] {
			if e.LagSeconds > 0 {
				ch <- prometheus.MustNewConstMetric(c.gm.lagDesc, prometheus.GaugeValue, e.LagSeconds, g.name, e.Endpoint)
			}
		}
	}
}

// summary returns how many endpoints are in each state, and the figures
// of those that have any (the others have no lag, cursor or failure),
// ordered as Endpoints orders them: a scrape reads the few endpoints with
// figures, not every endpoint.
func (g *SinkMetrics) summary() (counts map[State]int, busy []EndpointStats) {
	now := g.gm.m.Now()
	g.mu.Lock()
	counts = make(map[State]int, numStates)
	for st, n := range g.counts {
		counts[State(st)] = n
	}
	busy = make([]EndpointStats, 0, len(g.figs))
	for key := range g.figs {
		busy = append(busy, g.endpointLocked(key, g.states[key], now))
	}
	g.mu.Unlock()
	sortByLag(busy)
	return counts, busy
}

// all returns every sink's metrics.
func (gm *Metrics) all() map[string]*SinkMetrics {
	gm.mu.Lock()
	defer gm.mu.Unlock()
	out := make(map[string]*SinkMetrics, len(gm.sinks))
	for k, g := range gm.sinks {
		out[k] = g
	}
	return out
}

// Stats returns every gateway endpoint's figures by webhook sink (what
// /endpoints serves without a limit); sink, when set, selects one sink.
func (gm *Metrics) Stats(sink string) map[string][]EndpointStats {
	return gm.stats(sink, nil)
}

// stats is Stats of the endpoints whose state keep selects (nil: all).
func (gm *Metrics) stats(sink string, keep func(State) bool) map[string][]EndpointStats {
	out := map[string][]EndpointStats{}
	for k, g := range gm.all() {
		if sink == "" || k == sink {
			out[k] = g.endpoints(keep)
		}
	}
	return out
}

// figuresKey is an endpoint's place in a paged /endpoints: its webhook
// sink, then its key.
type figuresKey struct{ sink, key string }

// cursorFigures is the letter of /endpoints' cursors (paging.EncodeCursor).
const cursorFigures = 'g'

// page returns a page of the endpoints' figures, by sink (sink, when set,
// selects one) then key, after after: at most limit of those whose state
// keep selects (nil: all), and, when there are more, the key the next
// page starts after. A page costs a pass over the endpoints' states (no
// sort of them all) and the figures of its own endpoints only.
func (gm *Metrics) page(sink string, keep func(State) bool, after figuresKey, limit int) ([]EndpointStats, figuresKey, bool, error) {
	sinks := gm.all()
	names := make([]string, 0, len(sinks))
	for n := range sinks {
		if (sink == "" || n == sink) && n >= after.sink {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	type item struct {
		sink string
		e    EndpointStats
	}
	read := func(after figuresKey, n int) ([]item, error) {
		var out []item
		for _, name := range names {
			if name < after.sink {
				continue
			}
			from := ""
			if name == after.sink {
				from = after.key
			}
			for _, e := range sinks[name].after(from, keep, n-len(out)) {
				out = append(out, item{name, e})
			}
			if len(out) == n {
				break
			}
		}
		return out, nil
	}
	key := func(x item) figuresKey { return figuresKey{x.sink, x.e.Endpoint} }
	items, next, more, err := paging.Fill(limit, after, read, key, func(item) bool { return true })
	page := make([]EndpointStats, len(items))
	for i, x := range items {
		page[i] = x.e
	}
	return page, next, more, err
}

// after returns the figures of at most n endpoints with a key above from
// whose state keep selects (nil: all), in key order.
func (g *SinkMetrics) after(from string, keep func(State) bool, n int) []EndpointStats {
	now := g.gm.m.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	// The n least keys above from, kept sorted: one pass over the states.
	var least []string
	for key, st := range g.states {
		if key <= from || keep != nil && !keep(st) {
			continue
		}
		if len(least) == n && key >= least[n-1] {
			continue
		}
		i, _ := slices.BinarySearch(least, key)
		least = slices.Insert(least, i, key)
		if len(least) > n {
			least = least[:n]
		}
	}
	out := make([]EndpointStats, len(least))
	for i, key := range least {
		out[i] = g.endpointLocked(key, g.states[key], now)
	}
	return out
}

// stateFilter reads /endpoints' state: one of the States, or running
// (attached, waiting or catching_up); "" keeps all (nil).
func stateFilter(q string) (func(State) bool, error) {
	if q == "" {
		return nil, nil
	}
	if q == "running" {
		return State.Running, nil
	}
	names := []string{"running"}
	for _, st := range States {
		if st.String() == q {
			return func(s State) bool { return s == st }, nil
		}
		names = append(names, st.String())
	}
	return nil, fmt.Errorf("state %q: use one of %s", q, strings.Join(names, ", "))
}

// EndpointsHandler serves gateway endpoints' figures as JSON
// (/endpoints). ?sink=NAME selects one webhook sink, ?state=STATE the
// endpoints in that state (or running). Without limit or iterator: every
// endpoint selected, by sink, worst lag first. With either: a page of at
// most limit (paging.Limit) in the order of their keys,
// {"endpoints": [...], "done": bool, "next": iterator}, the next page
// asked for with ?iterator=next (and the same sink and state).
func (gm *Metrics) EndpointsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := r.URL.Query()
		bad := func(err error) { http.Error(w, err.Error(), http.StatusBadRequest) }
		keep, err := stateFilter(v.Get("state"))
		if err != nil {
			bad(err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if !v.Has("limit") && !v.Has("iterator") {
			_ = json.NewEncoder(w).Encode(gm.stats(v.Get("sink"), keep))
			return
		}
		limit, err := paging.Limit(v)
		if err != nil {
			bad(err)
			return
		}
		var after figuresKey
		if it := v.Get("iterator"); it != "" {
			f, err := paging.DecodeCursor(cursorFigures, it, 2)
			if err != nil {
				bad(err)
				return
			}
			after = figuresKey{f[0], f[1]}
		}
		page, next, more, _ := gm.page(v.Get("sink"), keep, after, limit)
		_ = json.NewEncoder(w).Encode(paging.Answer("endpoints", page, paging.EncodeCursor(cursorFigures, next.sink, next.key), more))
	})
}

// maxStoppedNamed caps the stopped gateway endpoints /readyz names.
const maxStoppedNamed = 20

// stoppedNotes are /readyz's lines of the endpoints stopped for good, and
// of those waiting on a dead letter the store does not take (at most
// maxStoppedNamed of each; the others are counted): notes, never a reason
// the relay is not ready.
func (gm *Metrics) stoppedNotes() (notes []string) {
	named, more := 0, 0
	waiting, moreWaiting := 0, 0
	for _, g := range gm.all() {
		_, busy := g.summary() // an endpoint without figures neither stopped nor waits
		for _, e := range busy {
			if e.DeadLetterWaiting != "" {
				if waiting < maxStoppedNamed {
					notes = append(notes, fmt.Sprintf("endpoint %s: %s (the other endpoints go on)", e.Endpoint, e.DeadLetterWaiting))
					waiting++
				} else {
					moreWaiting++
				}
			}
			if e.Stopped == "" {
				continue
			}
			if named < maxStoppedNamed {
				notes = append(notes, fmt.Sprintf("endpoint %s: stopped after an error it cannot retry (the relay goes on): %s", e.Endpoint, e.Stopped))
				named++
			} else {
				more++
			}
		}
	}
	if more > 0 {
		notes = append(notes, fmt.Sprintf("and %d more webhook endpoints stopped (see /endpoints)", more))
	}
	if moreWaiting > 0 {
		notes = append(notes, fmt.Sprintf("and %d more webhook endpoints wait on a dead letter the store does not take (see /endpoints)", moreWaiting))
	}
	return notes
}
