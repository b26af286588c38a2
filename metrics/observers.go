package metrics

// This file owns the per-sink observers: SourceObserver (the binlog reader's),
// PipelineObserver (the pipeline's) and EndpointObserver (a sink that retries
// by itself). Each method counts or records a fact, and never blocks.

import (
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/event"
)

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
		o.outbox = append(o.outbox, &tableCounter{t, m.outboxEvents.WithLabelValues(sinkName, t)})
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
	// outbox are the outbox_events_total counters of the tables given to
	// Source; last is the one OutboxEvents counted into last. A stream
	// reading one outbox table then counts without the vector's label hash
	// and lookup, and one switching between the tables given allocates
	// nothing. outbox is only read after Source and last is atomic: no
	// lock is taken for a table counted before.
	outbox []*tableCounter
	last   atomic.Pointer[tableCounter]
}

// tableCounter is one table's counter of a metric with the labels sink and
// table.
type tableCounter struct {
	table string
	c     prometheus.Counter
}

// BinlogEvent counts one binlog event.
func (o *SourceObserver) BinlogEvent() { o.binlog.Inc() }

// OutboxEvents counts n events extracted from table. It is safe for
// concurrent use: the counter of the last table counted is kept, and a
// call for another table looks its counter up and keeps that one.
func (o *SourceObserver) OutboxEvents(table string, n int) {
	tc := o.last.Load()
	if tc == nil || tc.table != table {
		tc = o.outboxCounter(table)
		o.last.Store(tc)
	}
	tc.c.Add(float64(n))
}

// outboxCounter is table's outbox_events_total counter: one made by Source
// if table was given to it, else the vector's.
func (o *SourceObserver) outboxCounter(table string) *tableCounter {
	for _, tc := range o.outbox {
		if tc.table == table {
			return tc
		}
	}
	return &tableCounter{table, o.m.outboxEvents.WithLabelValues(o.name, table)}
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
