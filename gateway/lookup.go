package gateway

// Endpoint returns the figures of one endpoint of the webhook sink (key
// "<sink>/<id>"), as Stats reports them, without copying the others: a
// lookup in a map, whatever the number of endpoints. false: the gateway
// has no figures of it (not started, or not an endpoint of the sink).
func (gm *Metrics) Endpoint(sink, key string) (EndpointStats, bool) {
	gm.mu.Lock()
	g := gm.sinks[sink]
	gm.mu.Unlock()
	if g == nil {
		return EndpointStats{}, false
	}
	now := g.gm.m.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.eps[key]
	if s == nil {
		return EndpointStats{}, false
	}
	e := s.EndpointStats
	if s.InFlight > 0 && !s.oldest.IsZero() {
		e.LagSeconds = max(now.Sub(s.oldest).Seconds(), 0)
	}
	e.P99Seconds = quantile(s.latency, 0.99)
	if e.Cursor != "" && !e.HeldSince.IsZero() {
		e.HeldSeconds = max(now.Sub(e.HeldSince).Seconds(), 0)
	}
	return e, true
}
