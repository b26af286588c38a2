// Package metrics exposes what outbox-relay does as Prometheus metrics and
// serves them, with health and readiness, over HTTP.
//
// New registers every metric on the prometheus.Registerer it is given (there
// are no package-level metrics); Unregister removes them again. Source and
// Pipeline return per-sink observers that satisfy canal.Observer and
// pipeline.Observer: the reader and the pipeline call them from their own
// goroutines, and every method is safe for concurrent use, never blocks and
// never allocates a new label set after the first call for a sink.
//
// Time-dependent values (replication lag, age of the oldest unacknowledged
// event, position of the checkpoint among the server's binary logs) are
// computed when the registry is scraped, from the last facts the observers
// reported, so a stalled reader or pipeline shows a growing value rather than
// a frozen one.
//
// Handler serves /metrics, /healthz and /readyz; Ready is the readiness rule
// on its own, for callers that want it elsewhere.
package metrics
