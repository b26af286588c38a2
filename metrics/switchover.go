package metrics

import "github.com/prometheus/client_golang/prometheus"

// SwitchOverNames lists the metric families of a switch-over from a polling
// worker (tables[].switch_over). They are not in Names: they exist once the
// relay has claimed rows (Metrics.SwitchOver).
var SwitchOverNames = []string{
	"outbox_relay_switchover_claimed_total",
	"outbox_relay_switchover_dropped_total",
}

// SwitchOverObserver counts what the switch-over's claim decided. Its
// methods are safe for concurrent use.
type SwitchOverObserver struct {
	claimed, dropped *prometheus.CounterVec
}

// SwitchOver returns the switch-over's observer, registering its metrics on
// first use.
func (m *Metrics) SwitchOver() *SwitchOverObserver {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.switchOver != nil {
		return m.switchOver
	}
	o := &SwitchOverObserver{
		claimed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "switchover_claimed_total",
			Help: "Rows a sink's pipeline claimed (or found claimed by the relay) and sent, during a switch-over from a polling worker, per sink and table."}, []string{"sink", "table"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "switchover_dropped_total",
			Help: "Rows a sink's pipeline did not send during a switch-over because the polling worker had claimed them, per sink and table."}, []string{"sink", "table"}),
	}
	for _, c := range []prometheus.Collector{o.claimed, o.dropped} {
		if err := m.reg.Register(c); err == nil {
			m.collectors = append(m.collectors, c)
		}
	}
	m.switchOver = o
	return o
}

// Claimed counts n rows of table that sink sent as the relay's.
func (o *SwitchOverObserver) Claimed(sink, table string, n int) {
	if o != nil && n > 0 {
		o.claimed.WithLabelValues(sink, table).Add(float64(n))
	}
}

// Dropped counts n rows of table that sink left to the poller.
func (o *SwitchOverObserver) Dropped(sink, table string, n int) {
	if o != nil && n > 0 {
		o.dropped.WithLabelValues(sink, table).Add(float64(n))
	}
}
