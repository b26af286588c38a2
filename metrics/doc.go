// Package metrics exposes what outbox-relay does as Prometheus metrics and
// serves them, with health and readiness, over HTTP.
//
// New registers every metric on the prometheus.Registerer it is given (there
// are no package-level metrics); Unregister removes them again. Source and
// Pipeline return per-sink observers that satisfy canal.Observer and
// pipeline.Observer (with pipeline.ResumeObserver and
// pipeline.DeadLetterObserver): the reader and the pipeline call them from their own
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
//
// It holds what every sink shares: the stream's and the pipeline's series,
// readiness and the listener. A package that produces figures of its own
// owns their collectors and registers them here (Register, so Unregister
// removes them too), with any page beside /metrics (Handle) and lines for
// /readyz (AddNotes): the gateway's per-endpoint series and /endpoints
// (gateway.NewMetrics), prune's (prune.NewMetrics), the scaled-out
// gateway's (kafkasource.NewMetrics) and the attempts record's, whose note
// names the last attempt its store refused (attempts.NewMetrics). A fan-out sink's own series are
// derived from its endpoints' (PipelineObserver.FanOut). So metrics
// imports none of them: it sits below every package that reports into it.
package metrics
