package metrics

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/gateway"
)

// TopLaggingEndpoints is how many endpoints of each webhook sink get a
// series of their own in outbox_relay_gateway_endpoint_lag_seconds: the
// ones with the oldest unacknowledged events. Every other per-endpoint
// figure is served as JSON on /endpoints, not as series, so a gateway with
// 10,000 endpoints adds a few dozen series, not hundreds of thousands.
const TopLaggingEndpoints = 10

// Gateway holds the metrics of one webhook sink run as a gateway. The
// sink's series (delivered, failed, latency, in flight, checkpoint saves,
// sink_up) are labeled with the webhook sink's name and sum its endpoints;
// per endpoint there are only outbox_relay_gateway_endpoints (a count per
// state) and the TopLaggingEndpoints lag series.
type Gateway struct {
	m    *Metrics
	name string
	base *PipelineObserver // the sink-level series

	mu            sync.Mutex
	eps           map[string]*endpointStats
	inFlight      int
	inFlightBytes int
}

// EndpointStats is what /endpoints reports of one endpoint.
type EndpointStats struct {
	Endpoint    string `json:"endpoint"`
	State       string `json:"state"`
	Delivered   uint64 `json:"delivered"`
	Failed      uint64 `json:"failed"`
	Retried     uint64 `json:"retried"`
	DeadLetters uint64 `json:"dead_letters"`
	InFlight    int    `json:"in_flight"`
	// LagSeconds is the age of its oldest unacknowledged event (0: none).
	LagSeconds float64 `json:"lag_seconds"`
	// P99Seconds is the 99th percentile of its commit-to-ack latency, from
	// LatencyBuckets (an upper bound), over its life.
	P99Seconds float64   `json:"p99_seconds"`
	LastSave   time.Time `json:"last_checkpoint_save,omitzero"`
	Stopped    string    `json:"stopped,omitempty"`
	// Invalid says why its row of the endpoints table cannot be used
	// (state invalid).
	Invalid string `json:"invalid,omitempty"`
	// Failing is when its current run of failed attempts began (zero: its
	// last attempt succeeded).
	Failing time.Time `json:"failing_since,omitzero"`
}

type endpointStats struct {
	EndpointStats
	bytes   int
	oldest  time.Time
	file    string   // binlog file of its last saved cursor
	latency []uint64 // counts per LatencyBuckets, and one past the last
}

// Gateway returns the metrics of the webhook sink name (the same each call).
func (m *Metrics) Gateway(name string) *Gateway {
	m.mu.Lock()
	g := m.gateways[name]
	m.mu.Unlock()
	if g != nil {
		return g
	}
	g = &Gateway{m: m, name: name, base: m.Pipeline(name), eps: map[string]*endpointStats{}}
	g.base.s.mu.Lock()
	g.base.s.gateway = true
	g.base.s.mu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gateways == nil {
		m.gateways = map[string]*Gateway{}
	}
	if old := m.gateways[name]; old != nil {
		return old
	}
	m.gateways[name] = g
	return g
}

func (g *Gateway) stats(key string) *endpointStats {
	s := g.eps[key]
	if s == nil {
		s = &endpointStats{EndpointStats: EndpointStats{Endpoint: key, State: gateway.Stopped.String()}, latency: make([]uint64, len(LatencyBuckets)+1)}
		g.eps[key] = s
	}
	return s
}

// State records an endpoint's state (a gateway.Observer).
func (g *Gateway) State(key string, st gateway.State) {
	g.mu.Lock()
	s := g.stats(key)
	s.State = st.String()
	if st != gateway.Stopped {
		s.Stopped = "" // running again, or not running for another reason
	}
	if st != gateway.Invalid {
		s.Invalid = ""
	}
	g.mu.Unlock()
}

// Invalid records that key's row of the endpoints table cannot be used,
// and why (state invalid).
func (g *Gateway) Invalid(key string, err error) {
	g.mu.Lock()
	s := g.stats(key)
	s.State, s.Stopped, s.Invalid = gateway.Invalid.String(), "", err.Error()
	g.mu.Unlock()
}

// Forget drops key (its row was deleted): it is no longer listed.
func (g *Gateway) Forget(key string) {
	g.mu.Lock()
	if s := g.eps[key]; s != nil {
		g.inFlight -= s.InFlight
		g.inFlightBytes -= s.bytes
		delete(g.eps, key)
	}
	g.mu.Unlock()
}

// Endpoint returns the pipeline observer of one endpoint.
func (g *Gateway) Endpoint(key string) *GatewayEndpoint {
	g.mu.Lock()
	g.stats(key)
	g.mu.Unlock()
	return &GatewayEndpoint{g: g, key: key}
}

// GatewayEndpoint observes one endpoint's pipeline (a pipeline.Observer).
type GatewayEndpoint struct {
	g   *Gateway
	key string
}

func (o *GatewayEndpoint) with(f func(s *endpointStats)) {
	o.g.mu.Lock()
	f(o.g.stats(o.key))
	o.g.mu.Unlock()
}

// Delivered counts an acknowledged event.
func (o *GatewayEndpoint) Delivered(e *event.Event, at time.Time) {
	o.g.base.Delivered(e, at)
	o.with(func(s *endpointStats) {
		s.Delivered++
		s.Failing = time.Time{}
		if !e.CommitTime.IsZero() {
			d := max(at.Sub(e.CommitTime).Seconds(), 0)
			i, _ := slices.BinarySearch(LatencyBuckets, d)
			s.latency[i]++
		}
	})
}

// Failed counts a failed attempt.
func (o *GatewayEndpoint) Failed(e *event.Event, err error, permanent bool) {
	o.g.base.Failed(e, err, permanent)
	o.with(func(s *endpointStats) {
		s.Failed++
		if !permanent {
			s.Retried++
		}
		if s.Failing.IsZero() {
			s.Failing = o.g.m.now()
		}
	})
}

// Retries returns the endpoint's webhook.Observer: the webhook endpoint
// runs its own retries, which the pipeline never sees.
func (o *GatewayEndpoint) Retries() EndpointRetries { return EndpointRetries{o} }

// EndpointRetries counts the retries a webhook endpoint schedules itself (a
// webhook.Observer).
type EndpointRetries struct{ o *GatewayEndpoint }

// Attempt is not counted.
func (EndpointRetries) Attempt(int, time.Duration) {}

// Delivered is counted by the pipeline.
func (EndpointRetries) Delivered(time.Duration) {}

// Failed is counted by the pipeline.
func (EndpointRetries) Failed(string) {}

// Retry counts a failed attempt that will be retried, by the class of err.
func (r EndpointRetries) Retry(err error) {
	o := r.o
	o.g.m.retry(o.g.name, err)
	o.with(func(s *endpointStats) {
		s.Failed++
		s.Retried++
		if s.Failing.IsZero() {
			s.Failing = o.g.m.now()
		}
	})
}

// DeadLettered counts a dead letter.
func (o *GatewayEndpoint) DeadLettered(e *event.Event, reason string) {
	o.g.base.DeadLettered(e, reason)
	o.with(func(s *endpointStats) { s.DeadLetters++ })
}

// InFlight records the endpoint's unacknowledged events; the sink's gauges
// are the sum over its endpoints.
func (o *GatewayEndpoint) InFlight(events, bytes int, oldest time.Time) {
	g := o.g
	g.mu.Lock()
	s := g.stats(o.key)
	g.inFlight += events - s.InFlight
	g.inFlightBytes += bytes - s.bytes
	s.InFlight, s.bytes, s.oldest = events, bytes, oldest
	total, totalBytes := g.inFlight, g.inFlightBytes
	g.mu.Unlock()
	g.base.inFlight.Set(float64(total))
	g.base.inFlightBytes.Set(float64(totalBytes))
	st := g.base.s
	st.mu.Lock()
	st.inFlight = total // its oldest is derived at collect, over the endpoints
	st.mu.Unlock()
}

// CheckpointSaved counts a save of the endpoint's cursor. The sink's
// binlog purge margin is its oldest cursor's (collect sets it).
func (o *GatewayEndpoint) CheckpointSaved(pos event.Position, at time.Time) {
	b := o.g.base
	b.saves.Inc()
	b.m.lastSave.WithLabelValues(b.name).Set(float64(at.UnixNano()) / 1e9)
	b.s.mu.Lock()
	if at.After(b.s.lastSave) {
		b.s.lastSave = at
	}
	b.s.mu.Unlock()
	o.with(func(s *endpointStats) {
		s.LastSave = at
		if pos.File != "" {
			s.file = pos.File
		}
	})
}

// SinkUp is the sink's: up when any endpoint's last attempt succeeded.
func (o *GatewayEndpoint) SinkUp(up bool) {
	if up {
		o.g.base.SinkUp(true)
	}
}

// SinkConnected is not recorded: a webhook endpoint connects nothing (its
// Connect starts its workers), and its trouble is its own (Ready).
func (o *GatewayEndpoint) SinkConnected(error) {}

// Stopped records that the endpoint stopped for good; the sink goes on.
func (o *GatewayEndpoint) Stopped(err error) {
	o.with(func(s *endpointStats) {
		s.Stopped = err.Error()
		s.State = gateway.Stopped.String()
	})
}

// Stopped records that the whole sink stopped (its shared stream failed for good).
func (g *Gateway) Stopped(err error) { g.base.Stopped(err) }

// Endpoints returns every endpoint's figures, oldest unacknowledged first.
func (g *Gateway) Endpoints() []EndpointStats {
	now := g.m.now()
	g.mu.Lock()
	out := make([]EndpointStats, 0, len(g.eps))
	for _, s := range g.eps {
		e := s.EndpointStats
		if s.InFlight > 0 && !s.oldest.IsZero() {
			e.LagSeconds = max(now.Sub(s.oldest).Seconds(), 0)
		}
		e.P99Seconds = quantile(s.latency, 0.99)
		out = append(out, e)
	}
	g.mu.Unlock()
	slices.SortFunc(out, func(a, b EndpointStats) int {
		if c := cmp.Compare(b.LagSeconds, a.LagSeconds); c != 0 {
			return c
		}
		return cmp.Compare(a.Endpoint, b.Endpoint)
	})
	return out
}

// quantile reads q from per-bucket counts (upper bounds; +Inf past the last).
func quantile(counts []uint64, q float64) float64 {
	var n uint64
	for _, c := range counts {
		n += c
	}
	if n == 0 {
		return 0
	}
	rank := uint64(q*float64(n-1)) + 1
	var seen uint64
	for i, c := range counts {
		seen += c
		if seen >= rank {
			if i < len(LatencyBuckets) {
				return LatencyBuckets[i]
			}
			break
		}
	}
	return LatencyBuckets[len(LatencyBuckets)-1]
}

// collect emits the bounded per-endpoint series, and derives the sink's
// facts from its endpoints': the oldest unacknowledged event of any, and
// the oldest cursor's binlog file (the binlog retention the sink needs).
func (g *Gateway) collect(ch chan<- prometheus.Metric, m *Metrics) {
	g.mu.Lock()
	file := ""
	var oldest time.Time
	for _, s := range g.eps {
		if s.file != "" && (file == "" || compareLogs(s.file, file) < 0) {
			file = s.file
		}
		if s.InFlight > 0 && !s.oldest.IsZero() && (oldest.IsZero() || s.oldest.Before(oldest)) {
			oldest = s.oldest
		}
	}
	g.mu.Unlock()
	g.base.s.mu.Lock()
	if file != "" {
		g.base.s.checkpointLog = file
	}
	g.base.s.oldest = oldest
	g.base.s.mu.Unlock()
	all := g.Endpoints()
	states := map[string]int{}
	for _, s := range gateway.States {
		states[s.String()] = 0
	}
	for _, e := range all {
		states[e.State]++
	}
	for st, n := range states {
		ch <- prometheus.MustNewConstMetric(m.gwStatesDesc, prometheus.GaugeValue, float64(n), g.name, st)
	}
	for _, e := range all[:min(len(all), TopLaggingEndpoints)] {
		if e.LagSeconds > 0 {
			ch <- prometheus.MustNewConstMetric(m.gwLagDesc, prometheus.GaugeValue, e.LagSeconds, g.name, e.Endpoint)
		}
	}
}

// EndpointsHandler serves every gateway endpoint's figures as JSON
// (/endpoints; ?sink=NAME for one webhook sink).
func EndpointsHandler(m *Metrics) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want := r.URL.Query().Get("sink")
		m.mu.Lock()
		gws := make(map[string]*Gateway, len(m.gateways))
		for k, g := range m.gateways {
			if want == "" || k == want {
				gws[k] = g
			}
		}
		m.mu.Unlock()
		out := map[string][]EndpointStats{}
		for k, g := range gws {
			out[k] = g.Endpoints()
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
}

// Skipped counts, on the webhook sink's series, an event the endpoint's
// restart did not send again (pipeline.ResumeObserver).
func (o *GatewayEndpoint) Skipped(by string) { o.g.base.Skipped(by) }

// Resent counts, on the webhook sink's series, an event the endpoint's
// restart sent that may have been delivered before.
func (o *GatewayEndpoint) Resent() { o.g.base.Resent() }

// RecoverFellBack counts, on the webhook sink's series, a restart that could
// not read back (webhooks never can; kept for the interface).
func (o *GatewayEndpoint) RecoverFellBack() { o.g.base.RecoverFellBack() }

// Foreign counts, on the webhook sink's series, a foreign message read back
// (webhooks are never read back; kept for the interface).
func (o *GatewayEndpoint) Foreign(why string) { o.g.base.Foreign(why) }
