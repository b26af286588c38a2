package kafkasource_test

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/gateway/kafkasource"
	"github.com/outbox-relay/outbox-relay/metrics"
)

// A gateway replica exposes exactly MetricNames for the partitions it runs,
// and drops a partition's series when it gives the partition up.
func TestMetricsExposeMetricNamesPerPartition(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, "test")
	if err != nil {
		t.Fatal(err)
	}
	o, err := kafkasource.NewMetrics(m, "hooks")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kafkasource.NewMetrics(m, "hooks"); err == nil {
		t.Fatal("the gateway replica's metrics registered twice on one registry")
	}
	for _, p := range []int{0, 1} {
		o.Assigned("orders", p, true)
		o.Lag("orders", p, 12)
		o.Oldest("orders", p, 3*time.Second)
		o.Committed("orders", p, 40)
		o.Expired("orders", p, 3)
	}
	o.Assigned("orders", 1, false)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		if slices.Contains(metrics.Names, mf.GetName()) {
			continue
		}
		got = append(got, mf.GetName())
		if n := len(mf.GetMetric()); n != 1 {
			t.Errorf("%s has %d series, want 1 (partition 1 was given up)", mf.GetName(), n)
		}
	}
	slices.Sort(got)
	if want := slices.Sorted(slices.Values(kafkasource.MetricNames)); !slices.Equal(got, want) {
		t.Fatalf("gateway replica metrics %v, want %v", got, want)
	}
}
