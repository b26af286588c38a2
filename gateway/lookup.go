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

// EndpointCounts are a webhook sink's endpoints counted, as the console's
// list of sinks shows them.
type EndpointCounts struct {
	// Endpoints is how many there are: every endpoint that reported a
	// state (started, off, invalid), until it is forgotten (its row
	// deleted).
	Endpoints int
	// States counts them by state name; a state none is in is absent.
	States map[string]int
	// Failing counts those in a run of failed attempts.
	Failing int
	// LagSeconds is the greatest age of an unacknowledged event among them.
	LagSeconds float64
}

// Counts returns the endpoints of the webhook sink counted: from the counts
// kept as they report their states, and the figures of the few that have
// any, so that it reads no idle endpoint whatever their number. false: no
// such sink.
func (gm *Metrics) Counts(sink string) (EndpointCounts, bool) {
	gm.mu.Lock()
	g := gm.sinks[sink]
	gm.mu.Unlock()
	if g == nil {
		return EndpointCounts{}, false
	}
	counts, busy := g.summary()
	c := EndpointCounts{States: map[string]int{}}
	for st, n := range counts {
		if n > 0 {
			c.States[st.String()] = n
			c.Endpoints += n
		}
	}
	for _, e := range busy {
		if !e.Failing.IsZero() {
			c.Failing++
		}
		c.LagSeconds = max(c.LagSeconds, e.LagSeconds)
	}
	return c, true
}
