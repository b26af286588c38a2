// Package nats is the sink that publishes outbox events to NATS JetStream,
// built on github.com/nats-io/nats.go and its jetstream package.
//
// # Messages
//
// Each event becomes one message:
//
//   - subject: the nats.subject template; by default
//     "outbox.event.{{.AggregateType}}" (dot-separated tokens, so a consumer
//     filters on outbox.event.> or outbox.event.order). A rendered subject
//     with an empty token, white space or a wildcard fails the event
//     permanently.
//   - data: the payload bytes exactly as committed.
//   - headers: "Nats-Msg-Id" = the event id (JetStream drops a message
//     whose id it saw within the stream's duplicate window, so re-sends
//     after a relay crash or a retried publish are not stored twice), then
//     "id", "type", "aggregate_type", "aggregate_id", "gtid", "binlog_file",
//     "binlog_pos", "table" and each configured extra column under its own
//     name. A header value with a line break cannot be carried by NATS: the
//     event fails permanently.
//
// # Delivery
//
//   - Acknowledgement: Write returns nil only once JetStream answered every
//     publish with a PubAck (stored in the stream, or recognised as a
//     duplicate). Only then may the checkpoint move.
//   - Order: publishes are asynchronous, in rounds that hold at most one
//     event per aggregate (sink.SendOrdered): a later event of an aggregate
//     is published only after the earlier one was acknowledged, so no
//     failure can put it ahead. Other aggregates go in parallel (up to
//     max_pending). A batch of one hot aggregate costs a round trip per
//     event.
//   - Failures, per event in a *sink.BatchError: permanent (dead letter)
//     are a message over the server's max_payload or the stream's
//     max_msg_size, a malformed message or subject; everything else
//     (disconnected, no PubAck within ack_timeout, no stream answering) is
//     retriable, and the later events of the aggregate are not sent.
//   - Reconnects: the client reconnects for ever, every reconnect_wait. A
//     publish while disconnected fails at once: nothing is buffered to reach
//     the server after the sink reported it failed.
//   - Stream: Connect checks that nats.stream exists; with
//     create_stream.enabled it creates it (subjects, retention, storage,
//     replicas, duplicate window, max message size).
//
// # Concurrency
//
// The pipeline calls Connect, then Write serially, then Close. Close closes
// the connection; Write has returned by then, so nothing is pending.
package nats
