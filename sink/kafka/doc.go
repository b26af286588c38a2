// Package kafka is the sink that produces outbox events to Apache Kafka (or
// any broker speaking its protocol), built on github.com/segmentio/kafka-go.
// The sink encodes each produce request's record batch itself (format v2,
// as kafka-go would, byte for byte: Kafka 0.11 or later, which message
// headers need anyway) and sends it with kafka-go's RawProduce. An event's
// key and headers are written once, in a record's wire form, straight from
// the event into one buffer per batch the pipeline hands over; the record
// batch copies them as they are.
//
// # Messages
//
// Each event becomes one message:
//
//   - topic: the kafka.topic template; by default
//     "outbox.event.{{.AggregateType}}", as Debezium's outbox event router.
//   - key: the kafka.key template; by default the aggregate id.
//   - value: the payload bytes exactly as committed, never decoded or
//     re-encoded. With kafka.envelope it is instead one JSON document:
//     {"id","type","aggregate_type","aggregate_id","timestamp" (commit time,
//     RFC 3339, UTC),"table","source":{"gtid","file","pos"},"headers":{...},
//     "payload"}, where payload is embedded byte for byte when it is valid
//     JSON and otherwise is a base64 string, with "payload_encoding":"base64"
//     (a SQL NULL payload: null, with "payload_encoding":"sql_null"). Without
//     the envelope a NULL payload is an empty value, never a null one (a
//     tombstone, which deletes the key on a compacted topic).
//   - timestamp: the source transaction's commit time.
//   - headers, in this order: "id" (the event id, the header Debezium uses;
//     the key consumers deduplicate on), "type", "aggregate_type", "gtid"
//     (empty with GTIDs off), "binlog_file", "binlog_pos" (decimal),
//     "table" ("schema.table"), "relay_sink" (Config.Writer, the sink's
//     name) and "relay_partitions" (the topic's partition count when it was
//     produced; both absent without a Writer), then every configured extra
//     column of the event as is, under its own name (Kafka allows a
//     repeated header name; the event's own comes last).
//
// # Delivery
//
//   - Acknowledgement: an event is acknowledged only after the brokers
//     acknowledged its message with acks=all.
//   - Order: messages are partitioned by a murmur2 hash of the key
//     (kafka-go's Murmur2Balancer, the same partition as Java's default
//     partitioner and librdkafka's murmur2_random), so one key stays on one
//     partition while the partition count does not change. Each partition
//     has a queue, in binlog order, and at most one produce request in
//     flight: one record batch of what queued (up to batch_size messages and
//     batch_bytes), which the broker takes or rejects whole; every partition
//     is in flight at once. Submit (the pipeline's way in) retries a failed
//     request before anything behind it on its partition, with Config.Retry
//     (the relay's one policy, see package retry), so a key's messages are
//     never reordered; retries can only duplicate. Write tries each request
//     once and, after a retriable failure on a partition, does not send the
//     batch's later messages of that partition (they fail too).
//   - No linger: a partition's next request is sent as soon as the previous
//     one is acknowledged, with everything queued meanwhile, so batches fill
//     under load and an idle event is sent at once (kafka.linger is ignored).
//   - Failures are reported per event (Submit's ack, Write's *sink.BatchError;
//     Submit reports only permanent ones). Permanent
//     (sink.Permanent) are: a message larger than batch_bytes, a topic
//     template that fails or renders an invalid topic name, and the broker
//     codes MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_TOPIC_EXCEPTION,
//     TOPIC_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED, INVALID_RECORD,
//     INVALID_TIMESTAMP and POLICY_VIOLATION. Everything else (network errors,
//     timeouts, leader changes, a missing topic) is retriable. Create-topics
//     throttling is reported with sink.BackOff.
//   - A broker rejects a whole record batch larger than max.message.bytes,
//     innocent messages included; the sink then resends those messages in
//     halves, in order, until each rejected message is alone, as Java's
//     producer splits batches, so only the oversize message fails.
//   - Dead-letter topic: with kafka.dead_letter_topic set, every permanently
//     failed message is produced there (value: the original payload; key and
//     headers as the original plus "dlq_reason" and "dlq_original_topic") and
//     then counts as delivered. If that fails too the event stays failed,
//     permanently, and the pipeline decides (its dead-letter store, or stop).
//     Nothing is dropped silently.
//   - Topics: with create_topics.enabled, Connect creates a missing fixed
//     topic and the dead-letter topic, and Write creates a templated topic the
//     first time it routes to it (then caches that it exists); a write that
//     finds a topic missing forgets it, so the next attempt checks it again.
//     Without it a missing topic fails its events, retriably, with an error
//     naming the topic and the option. Brokers' auto-creation is never asked
//     for.
//
// # Read-back
//
// The sink is a sink.Recoverer: on a restart Recover reads each partition of
// its topics back from the end to the checkpoint (with the same reader as
// the audit, kafka.Auditor), so that what they already hold is not sent
// again, and says (sink.ErrCannotRecover) when it cannot tell: another
// producer, another relay sink, a changed partition count, GTIDs off. See
// Recover for exactly when it holds.
//
// A message read back is only a claim: anyone who can produce to the topic
// can copy the relay headers. The pipeline skips the event it names only
// when the message's Digest (topic, key, value and headers in order, less
// relay_partitions and the timestamp) equals that of the message the sink
// produces for the event, and the message is on its key's partition. A
// digest rather than a MAC: the proof needed is that the topic holds the
// event as the sink writes it, whoever wrote it, and a digest needs no key
// to keep, rotate or lose (a forger who can produce the exact message has
// delivered the event). Control records (transaction markers) are passed
// over; a read-back error the sink does not expect falls back
// (sink.ErrCannotRecover) instead of being retried for ever. What it reads
// and keeps is bounded in bytes (package readback): a fetch of 1 MiB (or
// one record batch, up to the topic's max.message.bytes), records kept
// until judged without their key or value and with their headers cut
// short, and a record larger than batch_bytes dropped at once.
//
// # Read back by the scaled-out gateway
//
// A section (Config) says how `outbox-relay gateway` reads its records back
// as events: ReadTopics (its brokers and topic; an error for a key the
// gateway cannot take the aggregate id from), Dialer and ReadEvent. They
// are the methods of kafkasource.Readable, an interface the gateway owns in
// kafka-go's and event's types: this package does not import
// gateway/kafkasource (docs/architecture.md).
//
// # Concurrency
//
// The sink is a sink.Submitter: the pipeline calls Connect, then Submit from
// one goroutine in binlog order (Submit queues and returns; it blocks only to
// look a topic up or create it), then Close once. Acks come from one
// goroutine per partition with messages queued, which exits when its queue
// is empty; Close fails what is still queued, and waits for them. Write is
// Submit without retries, and a wait. Digest may be called from another
// goroutine while Submit runs.
package kafka
