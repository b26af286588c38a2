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
	st, ok := g.states[key]
	if !ok {
		return EndpointStats{}, false
	}
	return g.endpointLocked(key, st, now), true
}
