package config

// This file owns what a configuration implies for the running relay: the
// replica ids its streams register with, and its pipelines' names.

// ReplicaIDs is how many replica ids the relay registers with, from
// source.server_id on: one stream per sink (ServerID+i for sink i), then
// each webhook sink's catch-up streams (gateway.max_catch_up each), in sink
// order, then one per running replay job (replay.max_running). The ids
// after them are the commands' (audit, replay --dry-run) and then the
// relay's reads of a checkpoint's commit time at resume.
func (c *Config) ReplicaIDs() int {
	n := len(c.Sinks)
	for _, s := range c.Sinks {
		if f, ok := s.Config.(FanOut); ok {
			n += f.GatewayConfig().MaxCatchUp
		}
	}
	return n + max(c.Replay.MaxRunning, 0)
}

// ReplayReplicaIDs returns the replica ids of the running replay jobs, one
// per slot of replay.max_running: the last ids of the relay's range
// (ReplicaIDs), after every sink's stream and catch-up streams. A job
// takes a free slot's id while it runs, so no two streams of one relay
// ever share an id, and the live streams' ids do not move when
// max_running changes.
func (c *Config) ReplayReplicaIDs() []uint32 {
	n := max(c.Replay.MaxRunning, 0)
	first := c.Source.ServerID + uint32(c.ReplicaIDs()-n)
	out := make([]uint32, n)
	for i := range out {
		out[i] = first + uint32(i)
	}
	return out
}

// SinkReplicaIDs returns the replica ids sink i registers with, by the rule
// of source.server_id: its stream's is ServerID+i; a fan-out (webhook)
// sink's catch-up streams take the ids after every sink's stream
// (ServerID+len(Sinks) on), gateway.max_catch_up each, in sink order. It is
// a function of the configuration alone: the order in which the relay
// builds or starts its streams does not change it.
func (c *Config) SinkReplicaIDs(i int) (stream uint32, catchUp []uint32) {
	next := c.Source.ServerID + uint32(len(c.Sinks))
	for j, s := range c.Sinks[:i+1] {
		f, ok := s.Config.(FanOut)
		if !ok {
			continue
		}
		n := uint32(f.GatewayConfig().MaxCatchUp)
		if j == i {
			for k := range n {
				catchUp = append(catchUp, next+k)
			}
		}
		next += n
	}
	return c.Source.ServerID + uint32(i), catchUp
}

// PipelineNames lists the pipelines the sinks need, in the order the relay
// runs them: one per sink, named after it, and one per endpoint for webhook
// sinks, named "<sink>/<endpoint>". Each name keys a checkpoint.
func (c *Config) PipelineNames() []string {
	var out []string
	for _, s := range c.Sinks {
		if f, ok := s.Config.(FanOut); ok {
			for _, ep := range f.StaticEndpoints() {
				out = append(out, s.Name+"/"+ep)
			}
			continue
		}
		out = append(out, s.Name)
	}
	return out
}
