package replay

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/metrics"
)

// MetricNames lists the metric families of replay jobs. They are not in
// metrics.Names: they exist once the relay has run a replay job
// (NewMetrics).
var MetricNames = []string{
	"outbox_relay_replay_events_total",
	"outbox_relay_replay_skipped_total",
	"outbox_relay_replays_running",
	"outbox_relay_replay_progress_timestamp_seconds",
	"outbox_relay_replay_until_timestamp_seconds",
}

// Metrics records what replay jobs do. Its methods are safe for
// concurrent use.
type Metrics struct {
	events, skipped *prometheus.CounterVec
	running         prometheus.Gauge
	progress, until *prometheus.GaugeVec
}

// NewMetrics returns the replay jobs' metrics, registered on m. On an
// error (its families registered already) they are returned anyway,
// counting but not exposed, with the error.
func NewMetrics(m *metrics.Metrics) (*Metrics, error) {
	const namespace = metrics.Namespace
	o := &Metrics{
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
	return o, m.Register(o.events, o.skipped, o.running, o.progress, o.until)
}

// Started counts a job as running, up to until (its window's end, zero
// when unknown).
func (o *Metrics) Started(target, job string, until time.Time) {
	o.running.Inc()
	if !until.IsZero() {
		o.until.WithLabelValues(target, job).Set(float64(until.Unix()))
	}
}

// Ended counts a job as no longer running and forgets its gauges.
func (o *Metrics) Ended(target, job string) {
	o.running.Dec()
	o.progress.DeleteLabelValues(target, job)
	o.until.DeleteLabelValues(target, job)
}

// Delivered counts an event of job acknowledged.
func (o *Metrics) Delivered(target, job string) { o.events.WithLabelValues(target, job).Inc() }

// Skipped counts an event of job passed over by its filters.
func (o *Metrics) Skipped(target, job string) { o.skipped.WithLabelValues(target, job).Inc() }

// Progress records the commit time of the last transaction job read.
func (o *Metrics) Progress(target, job string, commit time.Time) {
	if !commit.IsZero() {
		o.progress.WithLabelValues(target, job).Set(float64(commit.Unix()))
	}
}
