package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// KafkaGatewayNames lists the metric families of `outbox-relay gateway`,
// the scaled-out gateway (package gateway/kafkasource). They are not in
// Names: only a gateway replica has them (Metrics.KafkaGateway).
var KafkaGatewayNames = []string{
	"outbox_relay_gateway_partition_assigned",
	"outbox_relay_gateway_partition_lag_records",
	"outbox_relay_gateway_partition_oldest_unacked_seconds",
	"outbox_relay_gateway_partition_committed_offset",
}

// KafkaGatewayObserver records what a gateway replica's consumer group
// does, per partition; it implements kafkasource.Observer. Its methods are
// safe for concurrent use.
type KafkaGatewayObserver struct {
	sink                           string
	assigned, lag, oldest, offsets *prometheus.GaugeVec
}

// KafkaGateway returns the observer of a gateway replica running the
// webhook sink sink, registering its metrics on first use.
func (m *Metrics) KafkaGateway(sink string) *KafkaGatewayObserver {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.kgw != nil {
		return m.kgw
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, []string{"sink", "topic", "partition"})
	}
	o := &KafkaGatewayObserver{sink: sink,
		assigned: gauge("gateway_partition_assigned", "1 while this gateway replica runs the partition (its consumer group assigned it here)."),
		lag:      gauge("gateway_partition_lag_records", "Records of the partition after the last one this replica's shared stream read (high watermark distance); the autoscaler's metric."),
		oldest: gauge("gateway_partition_oldest_unacked_seconds", "Age of the oldest record of the partition that a running endpoint has not acknowledged and saved; 0 when none. "+
			"Computed every commit interval (5 s)."),
		offsets: gauge("gateway_partition_committed_offset", "The consumer group's committed offset of the partition: the least saved cursor of its running endpoints."),
	}
	for _, c := range []prometheus.Collector{o.assigned, o.lag, o.oldest, o.offsets} {
		if err := m.reg.Register(c); err == nil {
			m.collectors = append(m.collectors, c)
		}
	}
	m.kgw = o
	return o
}

func (o *KafkaGatewayObserver) labels(topic string, partition int) []string {
	return []string{o.sink, topic, strconv.Itoa(partition)}
}

// Assigned implements kafkasource.Observer: a partition given up loses its
// series (another replica reports it).
func (o *KafkaGatewayObserver) Assigned(topic string, partition int, on bool) {
	l := o.labels(topic, partition)
	if on {
		o.assigned.WithLabelValues(l...).Set(1)
		return
	}
	for _, g := range []*prometheus.GaugeVec{o.assigned, o.lag, o.oldest, o.offsets} {
		g.DeleteLabelValues(l...)
	}
}

// Lag implements kafkasource.Observer.
func (o *KafkaGatewayObserver) Lag(topic string, partition int, records int64) {
	o.lag.WithLabelValues(o.labels(topic, partition)...).Set(float64(records))
}

// Oldest implements kafkasource.Observer.
func (o *KafkaGatewayObserver) Oldest(topic string, partition int, age time.Duration) {
	o.oldest.WithLabelValues(o.labels(topic, partition)...).Set(age.Seconds())
}

// Committed implements kafkasource.Observer.
func (o *KafkaGatewayObserver) Committed(topic string, partition int, offset int64) {
	o.offsets.WithLabelValues(o.labels(topic, partition)...).Set(float64(offset))
}
