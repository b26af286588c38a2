// Package kafka is the sink that produces outbox events to Apache Kafka (or
// any broker speaking its protocol), built on github.com/segmentio/kafka-go.
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
//     "table" ("schema.table"), then every configured extra column of the
//     event as is, under its own name (Kafka allows a repeated header name;
//     the event's own comes last).
//
// # Delivery
//
//   - Acknowledgement: Write returns nil only after the brokers acknowledged
//     every message with acks=all. kafka-go's writer makes a single attempt
//     (MaxAttempts 1): retrying is the pipeline's job.
//   - Order: messages are partitioned by a murmur2 hash of the key
//     (kafka-go's Murmur2Balancer, the same partition as Java's default
//     partitioner and librdkafka's murmur2_random), so one key stays on one
//     partition while the partition count does not change. A Write is sent in
//     rounds of at most batch_size messages and batch_bytes bytes, one after
//     another; in a round each partition gets exactly one record batch in one
//     produce request, which the broker takes or rejects whole. After a round
//     with a retriable failure the rest of the Write is not sent. So
//     whatever fails, no message is acknowledged ahead of an earlier message
//     of its key that failed retriably; retries can only duplicate.
//   - Failures are reported per event in a *sink.BatchError. Permanent
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
// # Concurrency
//
// The pipeline calls Connect, then Write serially (never two at once), then
// Close once. Write is not safe for concurrent use and the sink does not
// implement sink.Submitter. Close flushes and closes kafka-go's writer, whose
// goroutines it waits for, and closes the connections.
package kafka
