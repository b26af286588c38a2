package metrics

// This file owns Metrics itself: every series family (Names), their
// registration (New, Register, Unregister), the reason classes of a failure,
// and the per-sink facts the observers (observers.go) record and the
// scrape-time gauges and readiness (ready.go) are computed from.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Namespace prefixes every metric of outbox-relay (outbox_relay_…), those
// the packages that produce them register with Register too.
const Namespace = "outbox_relay"

const namespace = Namespace

// LatencyBuckets are the delivery latency histogram's upper bounds, in
// seconds: 1 ms to 10 minutes. The commit timestamp has 1 s resolution, so the
// buckets below 1 s only fill when the relay is fast and the commit happened
// late in its second; they are kept so that sub-second sinks are visible at
// all.
var LatencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// Reason classes, the values of the reason label. A small fixed set: the
// error text itself never becomes a label.
const (
	// ReasonPermanent: the sink marked the failure permanent (the event goes
	// to the dead-letter store).
	ReasonPermanent = "permanent"
	// ReasonBackoff: the destination asked to be retried later (429,
	// Retry-After, broker throttling).
	ReasonBackoff = "backoff"
	// ReasonTimeout: the attempt timed out.
	ReasonTimeout = "timeout"
	// ReasonConnection: the destination could not be reached or dropped the
	// connection (refused, reset, closed mid-request, DNS).
	ReasonConnection = "connection"
	// ReasonRetriable: any other retriable failure.
	ReasonRetriable = "retriable"
)

var retriableReasons = []string{ReasonBackoff, ReasonTimeout, ReasonConnection, ReasonRetriable}

// Reason returns the reason class of a sink failure.
func Reason(err error, permanent bool) string {
	var ne net.Error
	var oe *net.OpError
	switch {
	case permanent || sink.IsPermanent(err):
		return ReasonPermanent
	case func() bool { _, ok := sink.RetryAfter(err); return ok }():
		return ReasonBackoff
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return ReasonTimeout
	case retry.IsConnectionError(err), errors.As(err, &oe):
		return ReasonConnection
	}
	return ReasonRetriable
}

// Names lists every metric family the relay exposes (besides the Go and
// process collectors of its default registry). docs/operations.md's metric
// table, the Grafana dashboard and the alert rules use exactly these.
var Names = []string{
	"outbox_relay_build_info",
	"outbox_relay_binlog_events_total",
	"outbox_relay_source_heartbeats_total",
	"outbox_relay_outbox_events_total",
	"outbox_relay_traceparent_malformed_total",
	"outbox_relay_source_reconnects_total",
	"outbox_relay_source_connected",
	"outbox_relay_source_server",
	"outbox_relay_source_failovers_total",
	"outbox_relay_replication_lag_seconds",
	"outbox_relay_events_delivered_total",
	"outbox_relay_events_failed_total",
	"outbox_relay_events_retried_total",
	"outbox_relay_events_dead_lettered_total",
	"outbox_relay_dead_letter_waiting_events",
	"outbox_relay_delivery_latency_seconds",
	"outbox_relay_oldest_unacked_age_seconds",
	"outbox_relay_in_flight_events",
	"outbox_relay_in_flight_bytes",
	"outbox_relay_checkpoint_saves_total",
	"outbox_relay_events_skipped_on_resume_total",
	"outbox_relay_events_resent_total",
	"outbox_relay_readback_fallbacks_total",
	"outbox_relay_readback_foreign_total",
	"outbox_relay_checkpoint_last_save_timestamp_seconds",
	"outbox_relay_sink_up",
	"outbox_relay_checkpoint_binlog_purge_margin_files",
	"outbox_relay_checkpoint_binlog_behind_files",
	"outbox_relay_source_binary_logs",
}

// Metrics holds every outbox-relay metric of one relay. Create it with New.
type Metrics struct {
	reg        prometheus.Registerer
	collectors []prometheus.Collector
	now        func() time.Time
	started    time.Time

	binlogEvents  *prometheus.CounterVec
	heartbeats    *prometheus.CounterVec
	outboxEvents  *prometheus.CounterVec
	badTrace      *prometheus.CounterVec
	reconnects    *prometheus.CounterVec
	connected     *prometheus.GaugeVec
	sourceServer  *prometheus.GaugeVec
	failovers     *prometheus.CounterVec
	delivered     *prometheus.CounterVec
	failed        *prometheus.CounterVec
	retried       *prometheus.CounterVec
	deadLettered  *prometheus.CounterVec
	dlWaiting     *prometheus.GaugeVec
	latency       *prometheus.HistogramVec
	inFlight      *prometheus.GaugeVec
	inFlightBytes *prometheus.GaugeVec
	saves         *prometheus.CounterVec
	skipped       *prometheus.CounterVec
	resent        *prometheus.CounterVec
	fallbacks     *prometheus.CounterVec
	foreign       *prometheus.CounterVec
	lastSave      *prometheus.GaugeVec
	sinkUp        *prometheus.GaugeVec
	buildInfo     *prometheus.GaugeVec

	lagDesc, oldestDesc, marginDesc, behindDesc, filesDesc *prometheus.Desc

	mu      sync.Mutex
	sinks   map[string]*sinkState
	order   []string
	binlogs []string // the server's binary logs, oldest first; nil until polled
	// notes are the packages' lines for the body of /readyz (AddNotes).
	notes []func() []string
	// routes are the packages' pages served beside /metrics (Handle).
	routes []route
	// standby: this relay waits for the checkpoint lock another holds.
	standby bool
}

type route struct {
	pattern string
	h       http.Handler
}

// StandbyReason is /readyz's reason while this relay is a hot standby.
const StandbyReason = "standby: waiting for the checkpoint lock, which another relay holds; this relay takes over when that one stops (not a fault)"

// Standby says whether this relay is waiting, as a hot standby, for the
// checkpoint lock another relay holds. While it is, Ready is false with
// StandbyReason alone.
func (m *Metrics) Standby(waiting bool) {
	m.mu.Lock()
	m.standby = waiting
	m.mu.Unlock()
}

// sinkState is what the time-dependent gauges and readiness are computed from.
type sinkState struct {
	mu sync.Mutex
	facts
	// waiting are the events whose dead letter the store does not take.
	waiting WaitingDeadLetters
	// derive, for a fan-out sink, gives at scrape time its oldest
	// unacknowledged event and its oldest checkpoint's binlog file, from
	// its endpoints' (PipelineObserver.FanOut).
	derive func() (oldest time.Time, checkpointLog string)
}

// facts are a sink's last reported facts, copied out under sinkState.mu.
type facts struct {
	connected     bool
	lastCommit    time.Time // commit time of the last transaction read
	lastHeartbeat time.Time // when the last heartbeat arrived
	caughtUp      bool      // a heartbeat arrived after the last transaction
	inFlight      int
	oldest        time.Time
	lastSave      time.Time
	checkpointLog string // binlog file of the last saved checkpoint
	server        string // the source server the stream reads ("host:port")
	stopped       string // why the pipeline stopped for good; "" while it runs
	deadLetter    string // waiting.String(); "" when none
	sinkConnected bool   // the sink's Connect succeeded
	sinkErr       string // why its last Connect failed, until one succeeds
	fanOut        bool   // a sink run as a fan-out gateway: its endpoints' trouble is theirs
}

// New creates the metrics and registers them on reg. version is reported by
// outbox_relay_build_info.
func New(reg prometheus.Registerer, version string) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("metrics: a prometheus.Registerer is required")
	}
	m := &Metrics{reg: reg, now: time.Now, sinks: map[string]*sinkState{}}
	m.started = m.now()
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
		m.collectors = append(m.collectors, c)
		return c
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, labels)
		m.collectors = append(m.collectors, g)
		return g
	}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
	}

	m.binlogEvents = counter("binlog_events_total", "Binlog events read from the source, per sink stream (each sink reads its own stream).", "sink")
	m.heartbeats = counter("source_heartbeats_total", "Heartbeats the source sent on an idle binlog, per sink stream.", "sink")
	m.outboxEvents = counter("outbox_events_total", "Outbox events extracted from committed INSERTs, per sink stream and outbox table.", "sink", "table")
	m.badTrace = counter("traceparent_malformed_total", "Outbox rows whose traceparent column held no valid W3C traceparent: delivered without trace context.", "sink", "table")
	m.reconnects = counter("source_reconnects_total", "Reconnect attempts of the binlog stream after an error.", "sink")
	m.connected = gauge("source_connected", "1 while the sink's binlog stream is connected and receiving, 0 otherwise.", "sink")
	m.sourceServer = gauge("source_server", "1 for the source server (host:port) each sink's binlog stream reads now.", "sink", "server")
	m.failovers = counter("source_failovers_total", "Times a sink's binlog stream moved to another of source.servers.", "sink")
	m.delivered = counter("events_delivered_total", "Events acknowledged by the sink.", "sink")
	m.failed = counter("events_failed_total", "Failed delivery attempts of an event, by reason class (permanent, backoff, timeout, connection, retriable).", "sink", "reason")
	m.retried = counter("events_retried_total", "Failed delivery attempts that will be retried, by reason class.", "sink", "reason")
	m.deadLettered = counter("events_dead_lettered_total", "Events written to the dead-letter store, by reason class (always permanent).", "sink", "reason")
	m.dlWaiting = gauge("dead_letter_waiting_events", "Events a sink waits on because the dead-letter store does not take their record (it refuses it, or cannot be written): "+
		"the sink's checkpoint cannot pass them (a webhook sink: the sum over its endpoints). /readyz names the event and the fix.", "sink")
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "delivery_latency_seconds",
		Help: "Time from the source transaction's commit to the sink's acknowledgement. The commit timestamp has 1 s resolution " +
			"(binlog header), so each observation is up to 1 s above the true latency.",
		Buckets: LatencyBuckets,
	}, []string{"sink"})
	m.collectors = append(m.collectors, m.latency)
	m.inFlight = gauge("in_flight_events", "Events read but not yet acknowledged (or dead-lettered) by the sink.", "sink")
	m.inFlightBytes = gauge("in_flight_bytes", "Estimated memory of the events in flight, in bytes.", "sink")
	m.saves = counter("checkpoint_saves_total", "Successful saves of the sink's checkpoint.", "sink")
	m.skipped = counter("events_skipped_on_resume_total", "Events after the checkpoint's position that a restart did not send again: "+
		"by=checkpoint (the checkpoint lists them as acknowledged), by=readback (the sink's destination holds them).", "sink", "by")
	m.resent = counter("events_resent_total", "Events a restart sent that the previous run may have delivered already: "+
		"after the checkpoint's position, not skipped, and within what the previous run had in flight when it last saved.", "sink")
	m.fallbacks = counter("readback_fallbacks_total", "Restarts whose sink could not read back what its destination holds, and so sent again every event after the checkpoint that it does not list.", "sink")
	m.foreign = counter("readback_foreign_total", "Messages a restart's read-back found that claim to be the sink's but prove nothing: "+
		"why=mismatch (not byte for byte the sink's message of the event they name, which is sent again), why=unmatched (no event of their transaction has their id), "+
		"why=oversized (larger than the read-back reads or keeps, or with a longer id or gtid: dropped at once, never held).", "sink", "why")
	m.lastSave = gauge("checkpoint_last_save_timestamp_seconds", "Unix time of the sink's last successful checkpoint save (absent until the first).", "sink")
	m.sinkUp = gauge("sink_up", "1 when the sink's last connect or write attempt succeeded, 0 when it failed.", "sink")
	m.buildInfo = gauge("build_info", "Always 1; the labels say which build is running.", "version", "goversion")
	m.buildInfo.WithLabelValues(version, runtime.Version()).Set(1)

	m.lagDesc = desc("replication_lag_seconds", "Now minus the commit time (1 s resolution) of the last transaction read from the sink's binlog stream; "+
		"0 after a heartbeat (the stream was idle, so caught up) until the next transaction.", "sink")
	m.oldestDesc = desc("oldest_unacked_age_seconds", "Age of the commit time of the oldest event not yet acknowledged by the sink; 0 when none is in flight.", "sink")
	m.marginDesc = desc("checkpoint_binlog_purge_margin_files", "Binary logs on the source older than the one holding the sink's checkpoint: "+
		"how many can be purged before the checkpoint's is. 0: the checkpoint's file is the oldest; -1: it was purged.", "sink")
	m.behindDesc = desc("checkpoint_binlog_behind_files", "Binary logs on the source newer than the one holding the sink's checkpoint (0: the checkpoint is in the newest).", "sink")
	m.filesDesc = desc("source_binary_logs", "Binary log files the source still has (SHOW BINARY LOGS, polled).")
	m.collectors = append(m.collectors, dynamic{m})

	for i, c := range m.collectors {
		if err := reg.Register(c); err != nil {
			for _, done := range m.collectors[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}

// Unregister removes every metric from the Registerer given to New, those
// added with Register included.
func (m *Metrics) Unregister() {
	m.mu.Lock()
	cs := slices.Clone(m.collectors)
	m.mu.Unlock()
	for _, c := range cs {
		m.reg.Unregister(c)
	}
}

// Register registers the collectors of a package that produces figures of
// its own (the gateway, prune, the scaled-out gateway) on the Registerer
// given to New; Unregister removes them with the rest. A collector that
// cannot be registered is an error, and none of cs stays registered.
func (m *Metrics) Register(cs ...prometheus.Collector) error {
	for i, c := range cs {
		if err := m.reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				m.reg.Unregister(done)
			}
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	m.mu.Lock()
	m.collectors = append(m.collectors, cs...)
	m.mu.Unlock()
	return nil
}

// Now is the clock every scrape-time figure is computed with (time.Now
// unless SetClock changed it); a package's own collectors read it too.
func (m *Metrics) Now() time.Time { return m.now() }

// SetClock replaces the clock (Now) and sets the start to its time, for
// tests of the scrape-time figures and of readiness; call it before the
// metrics are used.
func (m *Metrics) SetClock(now func() time.Time) {
	m.now = now
	m.started = now()
}

// AddNotes adds lines for the body of /readyz, after the reasons it is not
// ready: notes never make the relay unready (the gateway names the
// endpoints stopped for good).
func (m *Metrics) AddNotes(notes func() []string) {
	m.mu.Lock()
	m.notes = append(m.notes, notes)
	m.mu.Unlock()
}

// Handle adds a page that Handler serves beside /metrics (the gateway's
// /endpoints). Pages added after Handler was called are not served.
func (m *Metrics) Handle(pattern string, h http.Handler) {
	m.mu.Lock()
	m.routes = append(m.routes, route{pattern, h})
	m.mu.Unlock()
}
func (m *Metrics) state(name string) *sinkState {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sinks[name]
	if s == nil {
		s = &sinkState{}
		m.sinks[name] = s
		m.order = append(m.order, name)
	}
	return s
}

// SetBinaryLogs records the source's binary logs, oldest first (the result of
// SHOW BINARY LOGS), for the checkpoint purge-margin gauges.
func (m *Metrics) SetBinaryLogs(files []string) {
	m.mu.Lock()
	m.binlogs = slices.Clone(files)
	m.mu.Unlock()
}

// dynamic collects the gauges computed at scrape time.
