package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ReplayNames lists the metric families of replay jobs. They are not in
// Names: they exist once the relay has run a replay job (Metrics.Replay).
var ReplayNames = []string{
	"outbox_relay_replay_events_total",
	"outbox_relay_replay_skipped_total",
	"outbox_relay_replays_running",
	"outbox_relay_replay_progress_timestamp_seconds",
	"outbox_relay_replay_until_timestamp_seconds",
}

// ReplayObserver records what replay jobs do. Its methods are safe for
// concurrent use.
type ReplayObserver struct {
	events, skipped *prometheus.CounterVec
	running         prometheus.Gauge
	progress, until *prometheus.GaugeVec
}

// Replay returns the replay jobs' observer, registering its metrics on
// first use.
func (m *Metrics) Replay() *ReplayObserver {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.replay != nil {
		return m.replay
	}
	o := &ReplayObserver{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "replay_events_total",
			Help: "Events a replay job sent again and its target acknowledged, per target (sink or sink/endpoint) and job."}, []string{"sink", "job"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "replay_skipped_total",
			Help: "Events of a replay job's window its --type filters (or its endpoint's filter) passed over."}, []string{"sink", "job"}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "replays_running",
			Help: "Replay jobs this relay runs now."}),
		progress: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "replay_progress_timestamp_seconds",
			Help: "Commit time (Unix seconds) of the last transaction of its window a running replay job has read (its events are sent, or in flight): its progress through the window."}, []string{"sink", "job"}),
		until: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "replay_until_timestamp_seconds",
			Help: "Commit time (Unix seconds) up to which a running replay job sends (its --until, or when it was made): with replay_progress_timestamp_seconds, what is left."}, []string{"sink", "job"}),
	}
	for _, c := range []prometheus.Collector{o.events, o.skipped, o.running, o.progress, o.until} {
		if err := m.reg.Register(c); err == nil {
			m.collectors = append(m.collectors, c)
		}
	}
	m.replay = o
	return o
}

// Started counts a job as running, up to until (its window's end, zero
// when unknown).
func (o *ReplayObserver) Started(target, job string, until time.Time) {
	o.running.Inc()
	if !until.IsZero() {
		o.until.WithLabelValues(target, job).Set(float64(until.Unix()))
	}
}

// Ended counts a job as no longer running and forgets its gauges.
func (o *ReplayObserver) Ended(target, job string) {
	o.running.Dec()
	o.progress.DeleteLabelValues(target, job)
	o.until.DeleteLabelValues(target, job)
}

// Delivered counts an event of job acknowledged.
func (o *ReplayObserver) Delivered(target, job string) { o.events.WithLabelValues(target, job).Inc() }

// Skipped counts an event of job passed over by its filters.
func (o *ReplayObserver) Skipped(target, job string) { o.skipped.WithLabelValues(target, job).Inc() }

// Progress records the commit time of the last transaction job read.
func (o *ReplayObserver) Progress(target, job string, commit time.Time) {
	if !commit.IsZero() {
		o.progress.WithLabelValues(target, job).Set(float64(commit.Unix()))
	}
}
