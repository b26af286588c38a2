// Package webhook delivers outbox events to HTTP endpoints as signed POST
// requests (Standard Webhooks v1).
//
// Each configured endpoint is its own sink, an *Endpoint made by NewEndpoint,
// run by its own pipeline with its own checkpoint: a slow or failing endpoint
// holds back only itself. In a gateway an endpoint's sink is made when an
// event wakes it (gateway.Endpoint.Open) and closed when it goes idle;
// what outlives its sinks (its row, rate limiter, run of failures, hold on
// the shared transport) is kept by the kind in compact records (idle.go).
//
// # Requests
//
// Every event that passes the endpoint's filter is sent as one POST to url
// with Content-Type application/json, User-Agent outbox-relay, the
// configured static headers, and the Standard Webhooks headers:
//
//   - webhook-id: the outbox event id, the same on every attempt and after a
//     restart, for the receiver to deduplicate on;
//   - webhook-timestamp: the Unix time of this attempt (each attempt is
//     signed anew);
//   - webhook-signature: "v1,<base64 HMAC-SHA256(key, id.timestamp.body)>",
//     one per configured secret, space-separated (several secrets: rotation).
//
// and the event's metadata, percent-encoded (url.PathEscape) and not
// signed: webhook-event-type, webhook-aggregate-type, webhook-aggregate-id,
// webhook-gtid, webhook-binlog-file, webhook-binlog-pos, webhook-table.
//
// The body is the payload bytes exactly as stored (body: raw), or a JSON
// envelope {"id","type","aggregate_type","aggregate_id","timestamp","data"}
// (body: envelope). Events the filter rejects are acknowledged at once,
// without a request.
//
// # Outcomes
//
//   - 2xx: delivered.
//   - 408, 429, 5xx, network errors and timeouts: retried.
//   - 410 Gone: the endpoint is disabled. That event and every one it holds
//     fail permanently with ErrEndpointDisabled (to the dead-letter store);
//     it is logged once, at error level. Its observer sees the 410, and the
//     gateway then stops its pipeline and records it as disabled (package
//     gateway, State), so later events wait behind its cursor.
//   - 3xx: permanent; redirects are not followed, url must be the final
//     address.
//   - Any other status: permanent.
//
// # Retries
//
// The endpoint owns its retries (it is a sink.Submitter) and never returns a
// retriable error for a failed attempt. Waits follow the relay's one retry
// policy (package retry) with the endpoint's bounds: the wait before attempt
// n+1 is drawn uniformly from [c/2, c], c = min(max_backoff,
// initial_backoff*2^(n-1)); a Retry-After on a 429 or 503, in seconds or as
// an HTTP date (parsed by go-retryablehttp), replaces it, capped at
// max_backoff. Once an event has had max_attempts attempts, or max_age has
// passed since its first, it fails permanently: "retry budget exhausted
// after N attempts over D: last status ...". Waiting events hold no
// goroutine: a timer readies them.
//
// Each scheduled retry is reported to the Observer with what failed (a
// connection error, a timeout, a sink.BackOff for a Retry-After, or the
// status), so metrics can count it by class. The endpoint logs its run of
// failed attempts, not each one: a warning at its first failed attempt, at
// most one more per DefaultFailureLogInterval while it goes on, and one
// line when it delivers again.
//
// Errors no retry can fix fail permanently on the first attempt, as
// go-retryablehttp's DefaultRetryPolicy classifies them: the endpoint's TLS
// certificate is not trusted, a header value is invalid.
//
// While events wait after a connection failure (refused, reset, closed), one
// goroutine per endpoint opens a TCP connection to the url's host every
// second (no request is sent); once one succeeds, or any event is delivered,
// those events are attempted at once, whatever their backoff: an endpoint
// that comes back is noticed within about a second. (With an HTTP proxy in
// the environment the probe may not reach the host; the backoff then
// applies.)
//
// # Secrets in what is recorded
//
// A failure quotes the start of a rejection's body and a redirect's
// Location: before it is logged or dead-lettered, the configured header
// values (and the credentials after "Bearer " and the like), the url's
// userinfo and query values and the signing secrets are cut out of it, also
// in their JSON- and URL-escaped forms, and its control characters are
// escaped. URLs are shown through package redact (userinfo and query values
// hidden), even when they do not parse.
//
// # Egress policy
//
// Each endpoint applies an Egress policy. With DenyPrivate (forced for
// endpoints with FromData set: urls that come from data, not from the
// operator) every connection resolves the host itself and refuses
// loopback, private, link-local, unique-local, metadata, unspecified and
// other special-purpose addresses unless Allow lists them, so DNS rebinding
// is covered; a refusal is an *EgressError, a permanent failure. Validate
// applies the policy to the url's host too (address literals, internal
// names, IPv4 literals in non-standard forms).
//
// # Defaults
//
//	timeout:          10s   per attempt
//	max_concurrency:  16    requests in flight
//	rate_limit:       0     attempts per second; 0 is unlimited
//	body:             raw
//	filter:           every event
//	secrets:          none  (requests unsigned; a warning is logged)
//	retry.max_attempts:    30
//	retry.max_age:         24h
//	retry.initial_backoff: 1s
//	retry.max_backoff:     10m
//	egress.deny_private:   false (true for endpoints from data)
//	egress.allow:          none
//
// With these, an event that keeps failing is retried for 1.7 to 3.5 hours
// (2.6 on average) before it goes to the dead-letter store.
//
// # Concurrency and order
//
// The endpoint is a sink.Submitter: the pipeline calls Submit from one
// goroutine in binlog order, and Submit queues the batch's events and
// returns at once. Write is Submit and a wait; it may be called concurrently.
// Events of one aggregate (same AggregateID) form a FIFO lane, created when
// needed and removed when empty: an event is sent only once every earlier
// event of its aggregate is delivered or has failed permanently, so while one
// is retrying the later ones wait, and other aggregates go on. At most
// max_concurrency requests are in flight, on as many workers, each attempt
// after the rate limiter allowed it. Workers are started as events become due
// and end once none has been for 20 to 40 ms (a worker that waits is handed
// the next event instead of a new one being started: at a steady rate a
// delivery starts no goroutine): an idle endpoint runs no goroutine. Endpoints with
// the same egress policy share one http.Transport, and so its kept-alive
// connections per host (a connection opened for one endpoint serves the
// others on its host); it caps no endpoint, the workers do, so the idle
// connections to a host are at most the requests that were in flight to it
// at once, and at most 64 (more are closed as they come back), and each (two
// goroutines in net/http, about 30 KB) closes after 30 s unused.
//
// Submit's ack is called once per event, as soon as that event is
// delivered (nil, by the worker that delivered it, without the endpoint's
// lock: a delivery starts no goroutine) or has failed permanently (a
// sink.Permanent error wrapping a *DeliveryError, in a goroutine of its own:
// that ack may block on a dead-letter write), so the pipeline releases each
// event as it finishes, not a whole batch. After a permanent failure the
// aggregate's next event waits until that ack has returned; if the Submit
// ctx ended by then (the pipeline stopped: no dead-letter store), the
// aggregate's later events are dropped as ErrPredecessorAbandoned, never
// sent ahead of the failed one. When the Submit ctx ends
// first, the batch's undone events are dropped (their requests cancelled) and
// acknowledged with ctx.Err(): they stay unacknowledged for the pipeline, to
// be read again after a restart. Later events of the same aggregates, from
// other batches, are dropped with them and reported as
// ErrPredecessorAbandoned, a retriable error, so that no event overtakes one
// that will be written again. At shutdown, when every batch's ctx ends, this
// changes nothing.
//
// Close cancels requests in flight, fails what is left with a retriable error,
// and waits for the endpoint's goroutines.
//
// # Endpoints as rows of a table
//
// TableConfig reads endpoints from a table (EndpointsTableSchema,
// deploy/outbox_endpoints.sql): Load selects every row, FromRow turns one
// row (as Load builds it, or as the binlog reader hands a changed row on)
// into a TableEndpoint, an EndpointConfig with FromData set. Secrets in the
// table may be encrypted with EncryptSecret (AES-256-GCM under
// TableConfig.SecretsKey, bound to their row: enc:v2); older enc:v1 values,
// not bound, are still read. TableConfig's methods only read their receiver
// and may be called from several goroutines at once.
//
// # A fan-out kind
//
// The relay runs a webhook sink as a gateway (package gateway): one binlog
// stream handed to a pipeline per endpoint. This package declares how its
// endpoints are built, in its sink.Kind's FanOut (a gateway.FanOut,
// fanout.go): those of the configuration, each told to the gateway's
// Health (a 410 disables it), and those of its endpoints table, which this
// package follows (follow.go): the rows read at start (a page at a time
// by primary key, in one snapshot: TableConfig.EachRow), then every row
// change the shared stream reads, applied at the transaction that made it,
// with the rule stated on tableEndpoints. Each endpoint is handed on with
// Open, which makes its sink (a row is decoded again from the columns
// kept of it: an idle row costs its strings and a few small records, a few
// hundred bytes), when an event wakes the endpoint. A row is decoded with its table's defaults
// applied once (TableConfig.WithDefaults) and copied, and validated without
// applying them again. The table's logic lives here, not
// in the relay nor in package gateway, because everything it decides is
// the webhook's: its rows, their secrets and filters, a 410, which row may
// name which endpoint. The gateway only routes, queues and checkpoints the
// endpoints it is given, and the relay only assembles. `outbox-relay check`
// and `status` read the table through the kind too (CheckSource,
// check.go; Status, status.go). What wants one endpoint's row (the
// console's TableAdmin, a replay's target) reads it by its primary key
// (TableConfig.Row), never the whole table. The follower's methods that change
// endpoints run under the gateway hub's lock (gateway.Table).
package webhook
