package prune_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/metrics"
	"github.com/outbox-relay/outbox-relay/prune"
)

// Prune's metrics are exactly MetricNames once they have observed a run.
func TestMetricsExposeMetricNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, "test")
	if err != nil {
		t.Fatal(err)
	}
	o, err := prune.NewMetrics(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prune.NewMetrics(m); err == nil {
		t.Fatal("prune's metrics registered twice on one registry")
	}
	o.Pruned("s.outbox", 3)
	o.PartitionDropped("s.outbox")
	o.PartitionCreated("s.outbox")
	o.TableStats("s.outbox", 10, 4096, time.Now().Add(-time.Hour))
	o.Done(time.Now(), nil)
	o.Done(time.Now(), errors.New("x"))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		if !slices.Contains(metrics.Names, mf.GetName()) {
			got = append(got, mf.GetName())
		}
		if mf.GetName() == "outbox_relay_outbox_oldest_row_age_seconds" {
			if v := mf.GetMetric()[0].GetGauge().GetValue(); v < 3599 || v > 3700 {
				t.Errorf("oldest row age %v, want about 3600", v)
			}
		}
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(prune.MetricNames))
	if !slices.Equal(got, want) {
		t.Fatalf("prune metrics %v, want %v", got, want)
	}
}
