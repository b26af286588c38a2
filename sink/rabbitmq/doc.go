// Package rabbitmq is the sink that publishes outbox events to a RabbitMQ
// exchange with publisher confirms, built on github.com/rabbitmq/amqp091-go.
//
// # Messages
//
// Each event becomes one message published to rabbitmq.exchange (default
// "outbox", a topic exchange) with the routing key of the
// rabbitmq.routing_key template (default "outbox.event.{{.AggregateType}}",
// dot-separated words for bindings such as outbox.event.#):
//
//   - body: the payload bytes exactly as committed;
//   - properties: delivery_mode 2 (persistent), message_id = the event id
//     (the key consumers deduplicate on: RabbitMQ itself keeps no dedupe
//     window), type = the event type, timestamp = the commit time, app_id
//     "outbox-relay";
//   - headers: "id", "type", "aggregate_type", "aggregate_id", "gtid",
//     "binlog_file", "binlog_pos" (an integer), "table", then each
//     configured extra column under its own name.
//
// # Delivery
//
//   - Acknowledgement: the channel is in confirm mode and every message is
//     published with mandatory set; Write returns nil for an event only
//     once the broker confirmed it (for a persistent message on a durable
//     queue: written to disk).
//   - Permanent failures (dead letter): a message the broker returned as
//     unroutable (no queue bound for its routing key), with the broker's
//     reason; a nack; a routing key template that fails or is over 255
//     bytes.
//   - Retriable: a lost connection or channel, no confirm within timeout.
//     The next Write opens the connection again.
//   - Order: messages go in rounds that hold at most one event per aggregate
//     (sink.SendOrdered), so no failure puts a later event of an aggregate
//     ahead of an earlier one. A batch of one hot aggregate costs a confirm
//     round trip (a disk write on the broker) per event.
//   - Exchange: Connect checks that it exists (passive declare), or declares
//     it (durable, exchange_type) with declare_exchange.
//
// # Concurrency
//
// The pipeline calls Connect, then Write serially, then Close, which closes
// the connection; no confirm is pending then.
package rabbitmq
