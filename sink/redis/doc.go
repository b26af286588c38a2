// Package redis is the sink that appends outbox events to Redis streams
// with XADD, built on github.com/redis/go-redis/v9.
//
// # Entries
//
// Each event becomes one entry of the stream named by the redis.stream
// template (default "outbox:event:{{.AggregateType}}", colon-separated as
// Redis keys are), with an id the server assigns, and the fields "id",
// "type", "aggregate_type", "aggregate_id", "gtid", "binlog_file",
// "binlog_pos", "table", then each configured extra column as
// "header.<name>", then "relay_sink" (Config.Writer, the sink's name; absent
// without one), then "payload": the payload bytes exactly as committed.
// With redis.max_len each XADD trims the stream to about that many entries
// (MAXLEN ~).
//
// # Duplicates
//
// Redis 7 has no server-side deduplication for XADD: an event re-sent after
// a relay crash, or after an XADD whose reply was lost, is appended again.
// Consumers deduplicate on the "id" field: per aggregate, an id already
// seen is skipped (keep, for instance, the ids of the last few minutes in a
// set with SET id NX EX 600 before acting on an entry).
//
// On a restart the sink is a sink.Recoverer: Recover reads its streams back
// from their ends to the checkpoint, so that what they already hold is not
// appended again, and says (sink.ErrCannotRecover) when it cannot tell; see
// Recover for exactly when it holds. An entry read back is only a claim:
// the pipeline skips the event it names only when the entry's Digest (the
// stream key and every field, name and value, in the order the server
// returns them) equals that of the entry the sink appends for the event.
// A digest, not a MAC: the proof needed is that the destination holds the
// event as the sink writes it, whoever appended it, and that needs no key
// to keep, rotate or lose; a forger who can produce the exact entry has
// delivered the event. Entries are read with raw XRANGE/XREVRANGE, since
// go-redis's XMessage keeps fields in a map, without their order, run in a
// script on the server so that a page is bounded in bytes whatever the
// stream holds (see walk, and package readback for every bound).
//
// # Delivery
//
//   - Acknowledgement: Write returns nil only once Redis replied to every
//     XADD with the new entry's id; with appendfsync always that is on
//     disk, otherwise as durable as the server's persistence settings.
//   - Order: XADDs are pipelined in rounds that hold at most one event per
//     aggregate (sink.SendOrdered): a later event of an aggregate is sent
//     only after the earlier one's reply, so no failure puts it ahead.
//   - Failures, per event: permanent (dead letter) are WRONGTYPE (the key
//     holds another type), a value larger than the server takes, and a
//     template that fails or renders an empty key; everything else is
//     retriable, among them OOM (maxmemory reached with noeviction: the
//     error says to trim or raise maxmemory), READONLY (a replica: point
//     redis.addr at the primary), LOADING and network errors. go-redis's
//     own retries are off: retrying is the pipeline's.
//
// # Concurrency
//
// The pipeline calls Connect, Recover (on a restart), then Write serially,
// then Close, which closes the connection pool. Digest may be called from
// another goroutine while Write runs.
package redis
