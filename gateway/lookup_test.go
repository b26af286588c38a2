package gateway

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

// Endpoint looks one endpoint up and reports what Stats reports of it;
// an endpoint or a sink it does not know is false.
func TestEndpointLooksUpWhatStatsReports(t *testing.T) {
	_, gm, _, c := newMetricsTest(t)
	g := gm.Sink("hooks")
	for i, lag := range []time.Duration{time.Second, 5 * time.Second} {
		key := fmt.Sprintf("hooks/ep%d", i)
		g.State(key, Attached)
		g.Endpoint(key).InFlight(1, 10, c.t.Add(-lag))
	}
	for _, e := range gm.Stats("")["hooks"] {
		got, ok := gm.Endpoint("hooks", e.Endpoint)
		if !ok || !reflect.DeepEqual(got, e) {
			t.Errorf("Endpoint(hooks, %s) = %+v %v, want %+v", e.Endpoint, got, ok, e)
		}
	}
	if got, ok := gm.Endpoint("hooks", "hooks/ep1"); !ok || got.LagSeconds != 5 {
		t.Errorf("hooks/ep1: %+v %v, want lag 5", got, ok)
	}
	for _, c := range [][2]string{{"hooks", "hooks/none"}, {"other", "hooks/ep0"}} {
		if _, ok := gm.Endpoint(c[0], c[1]); ok {
			t.Errorf("Endpoint(%s, %s) found", c[0], c[1])
		}
	}
}
