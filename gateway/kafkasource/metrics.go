package kafkasource

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/metrics"
)

// MetricNames lists the metric families of `outbox-relay gateway`, the
// scaled-out gateway. They are not in metrics.Names: only a gateway replica
// has them (NewMetrics).
var MetricNames = []string{
	"outbox_relay_gateway_partition_assigned",
	"outbox_relay_gateway_partition_lag_records",
	"outbox_relay_gateway_partition_oldest_unacked_seconds",
	"outbox_relay_gateway_partition_committed_offset",
	"outbox_relay_gateway_partition_records_expired_total",
}

// Metrics records what a gateway replica's consumer group does, per
// partition, as metrics; it implements Observer. Its methods are safe for
// concurrent use.
type Metrics struct {
	sink                           string
	assigned, lag, oldest, offsets *prometheus.GaugeVec
	expired                        *prometheus.CounterVec
}

// NewMetrics registers, on m, the metrics of a gateway replica running the
// webhook sink sink, and returns their observer.
func NewMetrics(m *metrics.Metrics, sink string) (*Metrics, error) {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: metrics.Namespace, Name: name, Help: help}, []string{"sink", "topic", "partition"})
	}
	o := &Metrics{sink: sink,
		assigned: gauge("gateway_partition_assigned", "1 while this gateway replica runs the partition (its consumer group assigned it here)."),
		lag:      gauge("gateway_partition_lag_records", "Records of the partition after the last one this replica's shared stream read (high watermark distance); the autoscaler's metric."),
		oldest: gauge("gateway_partition_oldest_unacked_seconds", "Age of the oldest record of the partition that a running endpoint has not acknowledged and saved; 0 when none. "+
			"Computed every commit interval (5 s)."),
		offsets: gauge("gateway_partition_committed_offset", "The consumer group's committed offset of the partition: the least saved cursor of its running endpoints."),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "gateway_partition_records_expired_total",
			Help: "Records of the partition a stream of this replica should have read (from an endpoint's cursor, or the committed offset) that the topic's retention had deleted: their events were not sent to those endpoints."},
			[]string{"sink", "topic", "partition"}),
	}
	if err := m.Register(o.assigned, o.lag, o.oldest, o.offsets, o.expired); err != nil {
		return nil, err
	}
	return o, nil
}

func (o *Metrics) labels(topic string, partition int) []string {
	return []string{o.sink, topic, strconv.Itoa(partition)}
}

// Assigned implements Observer: a partition given up loses its
// series (another replica reports it).
func (o *Metrics) Assigned(topic string, partition int, on bool) {
	l := o.labels(topic, partition)
	if on {
		o.assigned.WithLabelValues(l...).Set(1)
		return
	}
	for _, g := range []*prometheus.GaugeVec{o.assigned, o.lag, o.oldest, o.offsets} {
		g.DeleteLabelValues(l...)
	}
	o.expired.DeleteLabelValues(l...)
}

// Expired implements Observer.
func (o *Metrics) Expired(topic string, partition int, records int64) {
	o.expired.WithLabelValues(o.labels(topic, partition)...).Add(float64(records))
}

// Lag implements Observer.
func (o *Metrics) Lag(topic string, partition int, records int64) {
	o.lag.WithLabelValues(o.labels(topic, partition)...).Set(float64(records))
}

// Oldest implements Observer.
func (o *Metrics) Oldest(topic string, partition int, age time.Duration) {
	o.oldest.WithLabelValues(o.labels(topic, partition)...).Set(age.Seconds())
}

// Committed implements Observer.
func (o *Metrics) Committed(topic string, partition int, offset int64) {
	o.offsets.WithLabelValues(o.labels(topic, partition)...).Set(float64(offset))
}
