package prune

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/metrics"
)

// MetricNames lists the metric families of the prune schedule. They are not
// in metrics.Names: they exist only once prune.schedule is set and this
// relay is the active one (NewMetrics).
var MetricNames = []string{
	"outbox_relay_prune_rows_deleted_total",
	"outbox_relay_prune_partitions_dropped_total",
	"outbox_relay_prune_partitions_created_total",
	"outbox_relay_prune_runs_total",
	"outbox_relay_prune_last_success_timestamp_seconds",
	"outbox_relay_outbox_table_rows",
	"outbox_relay_outbox_table_bytes",
	"outbox_relay_outbox_oldest_row_age_seconds",
}

// Metrics records what prune does as metrics; it implements Observer. Its
// methods are safe for concurrent use.
type Metrics struct {
	m                  *metrics.Metrics
	rows, dropped, crt *prometheus.CounterVec
	runs               *prometheus.CounterVec
	lastOK             prometheus.Gauge
	tableRows, bytes   *prometheus.GaugeVec
	ageDesc            *prometheus.Desc

	mu     sync.Mutex
	oldest map[string]time.Time // per table; zero: empty
}

// NewMetrics registers prune's metrics on m and returns their observer.
func NewMetrics(m *metrics.Metrics) (*Metrics, error) {
	const namespace = metrics.Namespace
	o := &Metrics{m: m, oldest: map[string]time.Time{}}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}
	o.rows = counter("prune_rows_deleted_total", "Outbox rows deleted by prune (acknowledged by every sink and older than the retention).", "table")
	o.dropped = counter("prune_partitions_dropped_total", "Partitions dropped by prune (every row acknowledged by every sink and older than the retention).", "table")
	o.crt = counter("prune_partitions_created_total", "Partitions created ahead of time by prune.", "table")
	o.runs = counter("prune_runs_total", "Prune runs, by result (ok or error).", "result")
	o.lastOK = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "prune_last_success_timestamp_seconds", Help: "Unix time of the last prune run without an error (absent until the first)."})
	o.tableRows = gauge("outbox_table_rows", "Rows in the outbox table (the server's estimate, information_schema.TABLES), as of the last prune run.", "table")
	o.bytes = gauge("outbox_table_bytes", "Data and index bytes of the outbox table (information_schema.TABLES), as of the last prune run.", "table")
	o.ageDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, "", "outbox_oldest_row_age_seconds"),
		"Age of the oldest row of the outbox table (its created_at), as found by the last prune run; 0 when empty.", []string{"table"}, nil)
	if err := m.Register(o.rows, o.dropped, o.crt, o.runs, o.lastOK, o.tableRows, o.bytes, pruneAge{o}); err != nil {
		return nil, err
	}
	return o, nil
}

// Pruned implements Observer.
func (o *Metrics) Pruned(table string, rows int) {
	o.rows.WithLabelValues(table).Add(float64(rows))
}

// PartitionDropped implements Observer.
func (o *Metrics) PartitionDropped(table string) { o.dropped.WithLabelValues(table).Inc() }

// PartitionCreated implements Observer.
func (o *Metrics) PartitionCreated(table string) { o.crt.WithLabelValues(table).Inc() }

// TableStats implements Observer.
func (o *Metrics) TableStats(table string, rows, bytes int64, oldest time.Time) {
	o.tableRows.WithLabelValues(table).Set(float64(rows))
	o.bytes.WithLabelValues(table).Set(float64(bytes))
	o.mu.Lock()
	o.oldest[table] = oldest
	o.mu.Unlock()
}

// Done implements Observer.
func (o *Metrics) Done(at time.Time, err error) {
	if err != nil {
		o.runs.WithLabelValues("error").Inc()
		return
	}
	o.runs.WithLabelValues("ok").Inc()
	o.lastOK.Set(float64(at.Unix()))
}

// pruneAge computes the oldest row's age at scrape time.
type pruneAge struct{ o *Metrics }

func (p pruneAge) Describe(ch chan<- *prometheus.Desc) { ch <- p.o.ageDesc }

func (p pruneAge) Collect(ch chan<- prometheus.Metric) {
	now := p.o.m.Now()
	p.o.mu.Lock()
	defer p.o.mu.Unlock()
	for table, t := range p.o.oldest {
		age := 0.0
		if !t.IsZero() {
			age = max(now.Sub(t).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(p.o.ageDesc, prometheus.GaugeValue, age, table)
	}
}
