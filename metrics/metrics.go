package metrics

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/event"
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

// Source returns the observer of one sink's binlog stream (a canal.Observer).
// tables, if given, are the outbox tables whose counters start at 0.
func (m *Metrics) Source(sinkName string, tables ...string) *SourceObserver {
	o := &SourceObserver{
		m: m, name: sinkName, s: m.state(sinkName),
		binlog:     m.binlogEvents.WithLabelValues(sinkName),
		heartbeats: m.heartbeats.WithLabelValues(sinkName),
		reconnects: m.reconnects.WithLabelValues(sinkName),
		connected:  m.connected.WithLabelValues(sinkName),
	}
	o.connected.Set(0)
	m.failovers.WithLabelValues(sinkName)
	for _, t := range tables {
		m.outboxEvents.WithLabelValues(sinkName, t)
		m.badTrace.WithLabelValues(sinkName, t)
	}
	return o
}

// SourceObserver counts what one binlog stream reads. It satisfies
// canal.Observer.
type SourceObserver struct {
	m                              *Metrics
	name                           string
	s                              *sinkState
	binlog, heartbeats, reconnects prometheus.Counter
	connected                      prometheus.Gauge
}

// BinlogEvent counts one binlog event.
func (o *SourceObserver) BinlogEvent() { o.binlog.Inc() }

// OutboxEvents counts n events extracted from table.
func (o *SourceObserver) OutboxEvents(table string, n int) {
	o.m.outboxEvents.WithLabelValues(o.name, table).Add(float64(n))
}

// TraceParentMalformed counts a row of table whose traceparent was dropped.
func (o *SourceObserver) TraceParentMalformed(table string) {
	o.m.badTrace.WithLabelValues(o.name, table).Inc()
}

// Heartbeat records that the stream was idle: it is caught up.
func (o *SourceObserver) Heartbeat() {
	o.heartbeats.Inc()
	o.s.mu.Lock()
	o.s.caughtUp = true
	o.s.lastHeartbeat = o.m.Now()
	o.s.mu.Unlock()
}

// Reconnect records a reconnect attempt: the stream is down until Connected.
func (o *SourceObserver) Reconnect() {
	o.reconnects.Inc()
	o.connected.Set(0)
	o.s.mu.Lock()
	o.s.connected = false
	o.s.caughtUp = false
	o.s.mu.Unlock()
}

// Server records the source server the stream reads, and a failover.
func (o *SourceObserver) Server(addr string, failover bool) {
	o.s.mu.Lock()
	old := o.s.server
	o.s.server = addr
	o.s.mu.Unlock()
	if old != "" && old != addr {
		o.m.sourceServer.DeleteLabelValues(o.name, old)
	}
	o.m.sourceServer.WithLabelValues(o.name, addr).Set(1)
	if failover {
		o.m.failovers.WithLabelValues(o.name).Inc()
	}
}

// Connected records that the stream delivers events.
func (o *SourceObserver) Connected() {
	o.connected.Set(1)
	o.s.mu.Lock()
	o.s.connected = true
	o.s.mu.Unlock()
}

// Transaction records the commit time of a transaction read, for the lag.
func (o *SourceObserver) Transaction(commit time.Time) {
	o.s.mu.Lock()
	o.s.lastCommit = commit
	o.s.caughtUp = false
	o.s.mu.Unlock()
}

// Pipeline returns the observer of one sink's pipeline (a pipeline.Observer).
func (m *Metrics) Pipeline(sinkName string) *PipelineObserver {
	o := &PipelineObserver{
		m: m, name: sinkName, s: m.state(sinkName),
		delivered:     m.delivered.WithLabelValues(sinkName),
		latency:       m.latency.WithLabelValues(sinkName),
		inFlight:      m.inFlight.WithLabelValues(sinkName),
		inFlightBytes: m.inFlightBytes.WithLabelValues(sinkName),
		saves:         m.saves.WithLabelValues(sinkName),
		resent:        m.resent.WithLabelValues(sinkName),
		fallbacks:     m.fallbacks.WithLabelValues(sinkName),
		sinkUp:        m.sinkUp.WithLabelValues(sinkName),
		dlWaiting:     m.dlWaiting.WithLabelValues(sinkName),
	}
	// Every series exists from the start, so increase() sees the first one.
	m.failed.WithLabelValues(sinkName, ReasonPermanent)
	for _, r := range retriableReasons {
		m.failed.WithLabelValues(sinkName, r)
		m.retried.WithLabelValues(sinkName, r)
	}
	m.deadLettered.WithLabelValues(sinkName, ReasonPermanent)
	for _, by := range []string{"checkpoint", "readback"} {
		m.skipped.WithLabelValues(sinkName, by)
	}
	for _, why := range []string{"mismatch", "unmatched", "oversized"} {
		m.foreign.WithLabelValues(sinkName, why)
	}
	o.inFlight.Set(0)
	o.inFlightBytes.Set(0)
	o.sinkUp.Set(0)
	o.dlWaiting.Set(0)
	return o
}

// PipelineObserver records what one pipeline delivers. It satisfies
// pipeline.Observer.
type PipelineObserver struct {
	m                       *Metrics
	name                    string
	s                       *sinkState
	delivered, saves        prometheus.Counter
	resent, fallbacks       prometheus.Counter
	latency                 prometheus.Observer
	inFlight, inFlightBytes prometheus.Gauge
	sinkUp, dlWaiting       prometheus.Gauge
}

// Delivered counts an acknowledged event and its commit-to-ack latency.
func (o *PipelineObserver) Delivered(e *event.Event, at time.Time) {
	// The latency first: a scrape that counts an event delivered has its
	// latency too.
	if !e.CommitTime.IsZero() {
		o.latency.Observe(max(at.Sub(e.CommitTime).Seconds(), 0))
	}
	o.delivered.Inc()
}

// Failed counts a failed attempt by its reason class; a retriable one is
// also counted as retried.
func (o *PipelineObserver) Failed(_ *event.Event, err error, permanent bool) {
	r := Reason(err, permanent)
	o.m.failed.WithLabelValues(o.name, r).Inc()
	if r != ReasonPermanent {
		o.m.retried.WithLabelValues(o.name, r).Inc()
	}
}

// DeadLettered counts an event stored as a dead letter. Only permanent
// failures are dead-lettered; reason (free text) is not a label.
func (o *PipelineObserver) DeadLettered(_ *event.Event, _ string) {
	o.m.deadLettered.WithLabelValues(o.name, ReasonPermanent).Inc()
}

// DeadLetterWaiting records that the pipeline waits on e, whose dead
// letter the store does not take (err, nil once it took it), for the
// gauge and /readyz, which names e and fix. With PipelineObserver's other
// methods it satisfies pipeline.DeadLetterObserver.
func (o *PipelineObserver) DeadLetterWaiting(e *event.Event, err error, fix string) {
	o.s.mu.Lock()
	o.s.waiting.Set(e, err, fix)
	o.s.deadLetter = o.s.waiting.String()
	n := len(o.s.waiting)
	o.s.mu.Unlock()
	o.dlWaiting.Set(float64(n))
}

// DeadLettersWaiting sets the gauge of a fan-out sink: how many events its
// endpoints wait on because the dead-letter store does not take their
// record (they report them to the gateway, which notes them on /readyz).
func (o *PipelineObserver) DeadLettersWaiting(n int) { o.dlWaiting.Set(float64(n)) }

// WaitingDeadLetters are the events one pipeline waits on because the
// dead-letter store does not take their record, each with why and the fix,
// by event id (a Submitter sink writes several dead letters at once). Its
// owner locks it.
type WaitingDeadLetters map[string]string

// Set records e as waiting (err) or no longer (nil), and returns by how
// much the count changed.
func (w *WaitingDeadLetters) Set(e *event.Event, err error, fix string) (delta int) {
	_, was := (*w)[e.ID]
	if err == nil {
		delete(*w, e.ID)
		if was {
			return -1
		}
		return 0
	}
	if *w == nil {
		*w = WaitingDeadLetters{}
	}
	(*w)[e.ID] = fmt.Sprintf("waits on event %s (%s): the dead-letter store does not take its record: %v; %s", e.ID, Transaction(e), err, fix)
	if was {
		return 0
	}
	return 1
}

// String names the first event waiting (by id) and counts the others; ""
// when none waits.
func (w WaitingDeadLetters) String() string {
	if len(w) == 0 {
		return ""
	}
	first := slices.Min(slices.Collect(maps.Keys(w)))
	if len(w) == 1 {
		return w[first]
	}
	return fmt.Sprintf("%s (and %d more events)", w[first], len(w)-1)
}

// Transaction names e's transaction: "GTID g" or "binlog file:pos".
func Transaction(e *event.Event) string {
	if e.Source.GTID != "" {
		return "GTID " + e.Source.GTID
	}
	return fmt.Sprintf("binlog %s:%d", e.Source.File, e.Source.Pos)
}

// InFlight records the unacknowledged events, their bytes and the commit
// time of the oldest.
func (o *PipelineObserver) InFlight(events, bytes int, oldest time.Time) {
	o.inFlight.Set(float64(events))
	o.inFlightBytes.Set(float64(bytes))
	o.s.mu.Lock()
	o.s.inFlight = events
	o.s.oldest = oldest
	o.s.mu.Unlock()
}

// CheckpointSaved counts a save and remembers when and in which binlog file.
func (o *PipelineObserver) CheckpointSaved(pos event.Position, at time.Time) {
	o.saves.Inc()
	o.m.lastSave.WithLabelValues(o.name).Set(float64(at.UnixNano()) / 1e9)
	o.s.mu.Lock()
	if at.After(o.s.lastSave) {
		o.s.lastSave = at
	}
	if pos.File != "" {
		o.s.checkpointLog = pos.File
	}
	o.s.mu.Unlock()
}

// Skipped counts an event a restart did not send again, by why
// ("checkpoint" or "readback"). With Resent and RecoverFellBack it
// satisfies pipeline.ResumeObserver.
func (o *PipelineObserver) Skipped(by string) { o.m.skipped.WithLabelValues(o.name, by).Inc() }

// Resent counts an event a restart sent that may have been delivered before.
func (o *PipelineObserver) Resent() { o.resent.Inc() }

// RecoverFellBack counts a restart whose sink could not read back.
func (o *PipelineObserver) RecoverFellBack() { o.fallbacks.Inc() }

// Foreign counts a message read back that claims to be the sink's but
// proves nothing, by why ("mismatch", "unmatched" or "oversized").
func (o *PipelineObserver) Foreign(why string) { o.m.foreign.WithLabelValues(o.name, why).Inc() }

// Stopped records that the pipeline stopped for good with err (the other
// sinks go on): its stream and sink read as down, and /readyz says why.
func (o *PipelineObserver) Stopped(err error) {
	o.sinkUp.Set(0)
	o.m.connected.WithLabelValues(o.name).Set(0)
	o.s.mu.Lock()
	o.s.stopped = err.Error()
	o.s.connected = false
	o.s.mu.Unlock()
}

// SinkConnected records the result of a connect attempt of the sink, for
// /readyz (the sink_up gauge follows SinkUp).
func (o *PipelineObserver) SinkConnected(err error) {
	o.s.mu.Lock()
	o.s.sinkConnected = err == nil
	o.s.sinkErr = ""
	if err != nil {
		o.s.sinkErr = err.Error()
	}
	o.s.mu.Unlock()
}

// SinkUp records whether the sink's last attempt succeeded.
func (o *PipelineObserver) SinkUp(up bool) {
	if up {
		o.sinkUp.Set(1)
	} else {
		o.sinkUp.Set(0)
	}
}

// FanOut marks the sink as run as a fan-out gateway whose endpoints are
// pipelines of their own: their trouble (failing, stopped, disabled) is
// theirs, so the sink's connect and checkpoint age do not make the relay
// unready. derive gives, at each scrape, the oldest unacknowledged event of
// any endpoint (zero: none) and the binlog file of the oldest endpoint's
// saved checkpoint ("": none yet), for the sink's oldest-unacked age and
// purge margin; the endpoints report InFlight and CheckpointSaved here
// with neither (a zero time, an empty position).
func (o *PipelineObserver) FanOut(derive func() (oldest time.Time, checkpointLog string)) {
	o.s.mu.Lock()
	o.s.fanOut = true
	o.s.derive = derive
	o.s.mu.Unlock()
}

// dynamic collects the gauges computed at scrape time.
type dynamic struct{ m *Metrics }

func (d dynamic) Describe(ch chan<- *prometheus.Desc) {
	ch <- d.m.lagDesc
	ch <- d.m.oldestDesc
	ch <- d.m.marginDesc
	ch <- d.m.behindDesc
	ch <- d.m.filesDesc
}

func (d dynamic) Collect(ch chan<- prometheus.Metric) {
	m := d.m
	now := m.Now()
	m.mu.Lock()
	names := slices.Clone(m.order)
	states := make([]*sinkState, len(names))
	for i, n := range names {
		states[i] = m.sinks[n]
	}
	binlogs := m.binlogs
	m.mu.Unlock()

	if binlogs != nil {
		ch <- prometheus.MustNewConstMetric(m.filesDesc, prometheus.GaugeValue, float64(len(binlogs)))
	}
	for i, name := range names {
		s := states[i]
		s.mu.Lock()
		st, derive := s.facts, s.derive
		s.mu.Unlock()
		if derive != nil {
			oldest, file := derive()
			s.mu.Lock()
			s.oldest = oldest
			if file != "" {
				s.checkpointLog = file
			}
			st = s.facts
			s.mu.Unlock()
		}
		if lag, ok := replicationLag(&st, now); ok {
			ch <- prometheus.MustNewConstMetric(m.lagDesc, prometheus.GaugeValue, lag, name)
		}
		age := 0.0
		if st.inFlight > 0 && !st.oldest.IsZero() {
			age = max(now.Sub(st.oldest).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(m.oldestDesc, prometheus.GaugeValue, age, name)
		if binlogs != nil && st.checkpointLog != "" {
			margin, behind := purgeMargin(binlogs, st.checkpointLog)
			ch <- prometheus.MustNewConstMetric(m.marginDesc, prometheus.GaugeValue, float64(margin), name)
			ch <- prometheus.MustNewConstMetric(m.behindDesc, prometheus.GaugeValue, float64(behind), name)
		}
	}
}

// replicationLag is now minus the last commit read, 0 when a heartbeat came
// after it; ok is false before the stream read anything.
func replicationLag(s *facts, now time.Time) (float64, bool) {
	switch {
	case s.caughtUp:
		return 0, true
	case s.lastCommit.IsZero() && s.lastHeartbeat.IsZero():
		return 0, false
	}
	// Disconnected after only heartbeats: behind since the last heartbeat.
	since := s.lastCommit
	if s.lastHeartbeat.After(since) {
		since = s.lastHeartbeat
	}
	return max(now.Sub(since).Seconds(), 0), true
}

// purgeMargin counts the binary logs older and newer than file. margin is -1
// when file is older than every log the server has (purged).
func purgeMargin(logs []string, file string) (margin, behind int) {
	for _, l := range logs {
		switch c := compareLogs(l, file); {
		case c < 0:
			margin++
		case c > 0:
			behind++
		}
	}
	if len(logs) > 0 && compareLogs(file, logs[0]) < 0 {
		return -1, behind
	}
	return margin, behind
}

// compareLogs orders binlog file names: same base name, a numeric suffix that
// may grow past six digits.
func compareLogs(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

// Reading lists, per sink in order, "sink NAME reads HOST:PORT" (for /readyz).
func (m *Metrics) Reading() []string {
	m.mu.Lock()
	names := slices.Clone(m.order)
	states := make([]*sinkState, len(names))
	for i, n := range names {
		states[i] = m.sinks[n]
	}
	m.mu.Unlock()
	var out []string
	for i, name := range names {
		states[i].mu.Lock()
		server := states[i].server
		states[i].mu.Unlock()
		if server != "" {
			out = append(out, fmt.Sprintf("sink %s reads %s", name, server))
		}
	}
	return out
}

// Ready reports whether the relay is ready: every sink's pipeline runs,
// its sink is connected and its binlog stream is connected to the source,
// and — for a sink other than a webhook sink — its checkpoint was saved
// within maxAge or nothing is in flight, and it waits on no event whose
// dead letter the store does not take. Each reason names a sink and what
// of it is not ready. A webhook endpoint's trouble (failing, stopped,
// disabled) never makes the relay unready: it is that endpoint's, shown by
// its state (/endpoints, outbox_relay_gateway_endpoints) and its log lines;
// notes name the endpoints stopped for good, for the body of /readyz. With
// no sinks yet it is not ready; a standby (see Standby) is not ready, and
// says so as its only reason.
func (m *Metrics) Ready(maxAge time.Duration) (ready bool, reasons, notes []string) {
	now := m.Now()
	m.mu.Lock()
	if m.standby {
		m.mu.Unlock()
		return false, []string{StandbyReason}, nil
	}
	names := slices.Clone(m.order)
	states := make([]*sinkState, len(names))
	for i, n := range names {
		states[i] = m.sinks[n]
	}
	m.mu.Unlock()
	if len(names) == 0 {
		return false, []string{"no pipeline is running yet"}, nil
	}
	for i, name := range names {
		s := states[i]
		s.mu.Lock()
		st := s.facts
		s.mu.Unlock()
		if st.stopped != "" {
			reasons = append(reasons, fmt.Sprintf("sink %s: stopped after an error it cannot retry: %s", name, st.stopped))
			continue
		}
		if st.deadLetter != "" && !st.fanOut {
			reasons = append(reasons, fmt.Sprintf("sink %s: %s", name, st.deadLetter))
		}
		if !st.fanOut && !st.sinkConnected {
			if st.sinkErr != "" {
				reasons = append(reasons, fmt.Sprintf("sink %s: not connected (retrying): %s", name, st.sinkErr))
			} else {
				reasons = append(reasons, fmt.Sprintf("sink %s: not connected yet", name))
			}
		}
		if !st.connected {
			reasons = append(reasons, fmt.Sprintf("sink %s: binlog stream not connected to the source", name))
			continue
		}
		if st.fanOut || !st.sinkConnected {
			continue
		}
		since := st.lastSave
		if since.IsZero() || m.started.After(since) {
			since = m.started
		}
		if st.inFlight > 0 && now.Sub(since) > maxAge {
			reasons = append(reasons, fmt.Sprintf("sink %s: %d events in flight and the checkpoint has not advanced for %s",
				name, st.inFlight, now.Sub(since).Round(time.Second)))
		}
	}
	// What the packages note (AddNotes) is not a reason.
	m.mu.Lock()
	fs := slices.Clone(m.notes)
	m.mu.Unlock()
	for _, f := range fs {
		notes = append(notes, f()...)
	}
	return len(reasons) == 0, reasons, notes
}

// Endpoint returns an observer for a sink that runs its own retries (a
// webhook endpoint, a sink.Submitter), which the pipeline never sees: each
// scheduled retry counts as a failed and a retried attempt of its reason
// class. Acknowledgements and permanent failures are not counted here; the
// pipeline reports those. It satisfies webhook.Observer.
func (m *Metrics) Endpoint(sinkName string) *EndpointObserver {
	return &EndpointObserver{m: m, name: sinkName}
}

// EndpointObserver counts the retries of a sink that retries by itself.
type EndpointObserver struct {
	m    *Metrics
	name string
}

// Attempt is not counted: outcomes are counted by Retry and the pipeline.
func (o *EndpointObserver) Attempt(status int, dur time.Duration) {}

// Retry counts a failed attempt that will be retried, by the class of err.
func (o *EndpointObserver) Retry(err error) { o.m.retry(o.name, err) }

// retry counts a failed attempt of sink name that will be retried.
func (m *Metrics) retry(name string, err error) {
	r := Reason(err, false)
	m.failed.WithLabelValues(name, r).Inc()
	m.retried.WithLabelValues(name, r).Inc()
}

// Delivered is counted by the pipeline.
func (o *EndpointObserver) Delivered(latency time.Duration) {}

// Failed is counted by the pipeline.
func (o *EndpointObserver) Failed(reason string) {}
