package attempts

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/metrics"
)

// MetricNames lists the metric families of the attempts record. They are
// not in metrics.Names: only a relay with attempts.enabled has them.
var MetricNames = []string{
	"outbox_relay_attempts_recorded_total",
	"outbox_relay_attempts_dropped_total",
	"outbox_relay_attempts_write_errors_total",
	"outbox_relay_attempts_store_seconds",
	"outbox_relay_attempts_pruned_total",
}

// Reasons an attempt is dropped (the label of
// outbox_relay_attempts_dropped_total).
const (
	// ReasonQueueFull: the Writer's queue was full (the store is slower
	// than the attempts come).
	ReasonQueueFull = "queue_full"
	// ReasonWriteFailed: the store failed to take the batch.
	ReasonWriteFailed = "write_failed"
	// ReasonRefused: the store refused this attempt (a value it cannot
	// keep), and took the others of its batch.
	ReasonRefused = "refused"
)

// Metrics counts what a Writer does. A nil *Metrics counts nothing. Its
// methods are safe for concurrent use.
type Metrics struct {
	recorded, writeErrors, pruneCount   prometheus.Counter
	droppedBy                           *prometheus.CounterVec
	queueFull, writeFailed, refusedRows prometheus.Counter
	latency                             prometheus.Histogram

	mu          sync.Mutex
	refusedN    int    // attempts the store refused
	lastRefused string // the last of them, and why
}

// NewMetrics returns the record's metrics, registered on m, and notes on
// its /readyz the attempts the store refused. On an error (its families
// registered already) they are returned anyway, counting but not exposed,
// with the error.
func NewMetrics(m *metrics.Metrics) (*Metrics, error) {
	o := newMetrics()
	m.AddNotes(o.notes)
	return o, m.Register(o.recorded, o.droppedBy, o.writeErrors, o.latency, o.pruneCount)
}

// notes is the line /readyz shows once the store refused an attempt.
func (o *Metrics) notes() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.refusedN == 0 {
		return nil
	}
	return []string{fmt.Sprintf("attempts record: the store refused %d attempts, left out of the record (deliveries went on); the last: %s; "+
		"see outbox_relay_attempts_dropped_total{reason=\"refused\"}, and fix what the store refuses (docs/attempts.md)", o.refusedN, o.lastRefused)}
}

// refused counts the attempts e names and remembers the last.
func (o *Metrics) refused(e *RefusedError) {
	if o == nil {
		return
	}
	o.refusedRows.Add(float64(len(e.Errs)))
	last := slices.Max(slices.Collect(maps.Keys(e.Errs)))
	a := e.Batch[last]
	o.mu.Lock()
	o.refusedN += len(e.Errs)
	o.lastRefused = fmt.Sprintf("attempt %d of event %q at endpoint %s/%s (%s): %v", a.Number, a.EventID, a.Sink, a.Endpoint, a.Time.UTC().Format(time.RFC3339), e.Errs[last])
	o.mu.Unlock()
}

func newMetrics() *Metrics {
	const namespace = metrics.Namespace
	o := &Metrics{
		recorded: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "attempts_recorded_total",
			Help: "Webhook delivery attempts stored in the attempts record."}),
		droppedBy: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "attempts_dropped_total",
			Help: "Webhook delivery attempts left out of the attempts record, by reason: queue_full (the store fell behind; deliveries never wait for it) write_failed (the store failed to take a batch) or refused (the store refused this attempt, a value it cannot keep, and took the rest of its batch)."}, []string{"reason"}),
		writeErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "attempts_write_errors_total",
			Help: "Writes of a batch to the attempts record that failed."}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "attempts_store_seconds",
			Help:    "Time one batch of attempts took to store.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}}),
		pruneCount: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "attempts_pruned_total",
			Help: "Attempts removed from the record by its retention (attempts.max_age, attempts.max_rows)."}),
	}
	o.queueFull = o.droppedBy.WithLabelValues(ReasonQueueFull)
	o.writeFailed = o.droppedBy.WithLabelValues(ReasonWriteFailed)
	o.refusedRows = o.droppedBy.WithLabelValues(ReasonRefused)
	return o
}

func (o *Metrics) dropped(reason string, n int) {
	if o == nil {
		return
	}
	if reason == ReasonQueueFull {
		o.queueFull.Add(float64(n))
	} else {
		o.writeFailed.Add(float64(n))
	}
}

func (o *Metrics) stored(d time.Duration, n int, err error) {
	if o == nil {
		return
	}
	o.latency.Observe(d.Seconds())
	if err != nil {
		o.writeErrors.Inc()
		return
	}
	o.recorded.Add(float64(n))
}

func (o *Metrics) pruned(n int64) {
	if o == nil {
		return
	}
	o.pruneCount.Add(float64(n))
}
