// Package gateway runs a webhook sink as a fan-out gateway: one binlog
// stream, read and decoded once, feeds every endpoint of the sink, each with
// its own cursor (its checkpoint), queue, retries and dead letters.
//
// It promises:
//
//   - one stream: the sink's replication connections are 1 + the endpoints
//     catching up (at most MaxCatchUp at once), never one per endpoint;
//   - isolation: an endpoint that cannot keep up is detached when its queue
//     is full; it catches up from its own cursor on a stream of its own
//     (waiting its turn for one of MaxCatchUp) and re-joins the shared
//     stream once it has read everything the shared stream has handed on.
//     The shared stream waits for no endpoint longer than DetachAfter (in
//     all, within 10s) while another has room in its queue; one that holds
//     no one back (alone, or all are behind) is waited for while it takes
//     transactions, rather than given a catch-up stream that would decode
//     the binlog a second time;
//   - exactly the events it would get alone: an endpoint is handed the
//     events its filter matches, in binlog order, each once (no duplicates
//     on detach or re-join: both are decided at a transaction boundary
//     against positions), and its cursor moves over transactions it has no
//     events in, so restart and prune are not held back by quiet endpoints;
//   - nothing lost while an endpoint does not run (disabled, off, invalid,
//     stopped): it keeps a cursor where it stopped or came into being
//     (Endpoint.Held, HoldLocked save one it lacks) and catches up from it
//     once it runs; each such cursor shows on /endpoints and the oldest in
//     outbox_relay_gateway_held_cursor_age_seconds;
//   - bounded memory: per endpoint, its queue (QueueTxns transactions) and
//     its pipeline's in-flight limits. An idle endpoint runs one goroutine,
//     its pipeline's, waiting on its Tap; its tap reads a catch-up stream,
//     and its pipeline delivers and saves, on goroutines that run only
//     while there is work (TestIdleEndpointCostsOnlyItsPipelinesGoroutine).
//
// Each endpoint is a pipeline (package pipeline) whose source is a Tap of the
// Hub: checkpoints, retries, dead letters and fencing are the pipeline's.
// The streams are pipeline.Sources the caller opens (HubConfig.Open): the
// gateway does not import the binlog reader, and compares positions with
// package position.
//
// The gateway engine is a library under the sink kinds: it builds on the
// sink contract and the pipeline and names no kind; the webhook kind builds
// on it (sink.Kind.FanOut, read by FanOutOf). Running it past one machine
// is a feature above the kinds, in gateway/kafkasource and gateway/scaled
// (docs/architecture.md, checked by its test).
//
// Concurrency: a Gateway's endpoints live as long as its Run. Start, StopLocked,
// Enable and the other methods may be called from any goroutine while Run
// runs (the …Locked ones under the hub's lock, as from Run's changed
// function); when Run's context ends, every endpoint's pipeline is cancelled
// with that context's cause, and Run returns once they all have.
//
// Metrics: NewMetrics registers the gateway's figures on a relay's metrics
// (package metrics): per webhook sink (Metrics.Sink) its endpoints summed
// on the sink's series, a count of endpoints per state and the
// TopLaggingEndpoints lag series, the oldest held cursor's age, every
// endpoint's figures on /endpoints (with the cursor of one that does not run),
// and the endpoints stopped for good on /readyz.
package gateway
