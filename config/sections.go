package config

// This file owns the types of the top-level sections other than source,
// tables (source.go), sinks (sinks.go) and console (console.go): each field
// with its default, and the Go constants of the defaults other packages use.

import (
	"errors"
	"log/slog"
	"time"
)

// Checkpoint says where positions are kept and where to start without one.
type Checkpoint struct {
	// Store is file or mysql. Default file.
	Store string `yaml:"store" default:"file"`
	// Path of the checkpoint file (store: file). Default ./outbox-relay-data/checkpoints.json.
	Path string `yaml:"path" default:"./outbox-relay-data/checkpoints.json"`
	// DSN of the database holding the checkpoint table (store: mysql), in
	// go-sql-driver form: user:pass@tcp(host:3306)/dbname. Use ${ENV} for the password.
	DSN Secret `yaml:"dsn" example:"# relay:${RELAY_CP_PASSWORD}@tcp(cp-db:3306)/outbox_relay"`
	// Table name (store: mysql). Default outbox_relay_checkpoints.
	Table string `yaml:"table" default:"outbox_relay_checkpoints"`
	// Interval between retries of a failed checkpoint save. Default 1s.
	// What a sink acknowledges is saved at once, one save at a time (the
	// acknowledgements that arrive during a save are saved by the next).
	Interval time.Duration `yaml:"interval" default:"1s"`
	// MinInterval is the least time between the starts of two saves of one
	// sink's checkpoint while acknowledgements stream in (an idle sink's
	// acknowledgement is saved at once). While they keep streaming in, the
	// gap doubles with each save, up to ten times min_interval, and comes
	// back to min_interval after a pause of twice the gap: a steady stream
	// saves ten times a second whatever its rate. It caps saves at
	// 1/min_interval a second per sink; what is acknowledged within the
	// gap before a crash is sent again by a sink that cannot be read back
	// (within delivery.max_in_flight). A save starts at once, whatever the
	// gap, when the binlog reader waits for room that unsaved
	// acknowledgements hold. A sink read back on a restart (Kafka, Redis)
	// saves ten times as far apart. Default 10ms.
	MinInterval time.Duration `yaml:"min_interval" default:"10ms"`
	// Lock makes the relay take the checkpoint store's lock before it starts
	// (an flock on "<path>.lock", or GET_LOCK in the checkpoint database), so
	// that a second relay on the same store waits as a hot standby and takes
	// over when the first stops or dies. Default true.
	Lock *bool `yaml:"lock" default:"true"`
	// LockTimeout (store: mysql) is how long the checkpoint database keeps
	// the lock of an active relay that went silent (frozen, or cut off from
	// it) before a standby may take over: the lock connection's
	// wait_timeout. The active relay confirms its lock every lock_timeout/5
	// and delivers nothing once 4/5 of it passed unconfirmed. Whole
	// seconds, at least 2s. Default 10s.
	LockTimeout time.Duration `yaml:"lock_timeout" default:"10s"`
	// Start is where a sink with no checkpoint begins: current (the server's
	// position now), earliest (the oldest binlog on the server), or an
	// explicit GTID set written "gtid:<set>". Default current.
	Start string `yaml:"start" default:"current"`
}

// Defaults of checkpoint that the checkpoint and pipeline packages also use
// (a test holds each to its field's declared default).
const (
	DefaultCheckpointTable    = "outbox_relay_checkpoints"
	DefaultCheckpointInterval = time.Second
	// DefaultCheckpointGap is checkpoint.min_interval's default.
	DefaultCheckpointGap = 10 * time.Millisecond
	DefaultLockTimeout   = 10 * time.Second
)

// DeadLetter configures where permanently failed events are kept.
type DeadLetter struct {
	// Store is file, mysql or none. Default: the checkpoint store's kind.
	// With none, a permanent failure stops the relay (nothing is dropped).
	Store string `yaml:"store" derived:"checkpoint.store"`
	// Path of the dead-letter directory (store: file). Default beside the
	// checkpoint file: <dir>/dead-letters.
	Path string `yaml:"path" derived:"<directory of checkpoint.path>/dead-letters"`
	// Table (store: mysql, in the checkpoint database). Default outbox_relay_dead_letters.
	Table string `yaml:"table" default:"outbox_relay_dead_letters"`
}

// DefaultDeadLetterTable is dead_letter.table's default, for package
// deadletter (a test holds it to the declared default).
const DefaultDeadLetterTable = "outbox_relay_dead_letters"

// Delivery tunes every pipeline.
type Delivery struct {
	// BatchSize caps events per sink write. Default 500.
	BatchSize int `yaml:"batch_size" default:"500"`
	// BatchBytes caps payload bytes per sink write. Default 1048576.
	BatchBytes int `yaml:"batch_bytes" default:"1048576"`
	// Linger is how long a batch waits to fill once it has one event. Default
	// 0: no waiting — an event on an idle sink is sent at once, and batches
	// fill from what queues while the sink is busy (under load).
	Linger time.Duration `yaml:"linger"`
	// MaxInFlight caps unacknowledged events per sink, with the
	// acknowledged ones whose checkpoint save is not over yet and those
	// its checkpoint does not list: it bounds what a crash sends again.
	// Default 10000.
	MaxInFlight int `yaml:"max_in_flight" default:"10000"`
	// MaxInFlightBytes caps their bytes per sink. Default 67108864.
	MaxInFlightBytes int `yaml:"max_in_flight_bytes" default:"67108864"`
	// RetryBackoff caps the first retry wait; each later one may double, with
	// jitter. While a sink cannot be reached at all (connection refused,
	// reset, closed), it is tried again at least every second whatever the
	// backoff, so its recovery is noticed at once. Default 100ms.
	RetryBackoff time.Duration `yaml:"retry_backoff" default:"100ms"`
	// MaxRetryBackoff caps retry waits, a destination's Retry-After
	// included. Default 30s.
	MaxRetryBackoff time.Duration `yaml:"max_retry_backoff" default:"30s"`
	// DrainTimeout bounds delivery of in-flight events at shutdown. Default 10s.
	DrainTimeout time.Duration `yaml:"drain_timeout" default:"10s"`
}

// Defaults of delivery, which packages pipeline and retry also use (for a
// zero field of their own Config); a test holds each to its field's
// declared default.
const (
	DefaultBatchSize        = 500
	DefaultBatchBytes       = 1 << 20
	DefaultLinger           = 0 // no waiting: batch what is queued
	DefaultMaxInFlight      = 10000
	DefaultMaxInFlightBytes = 64 << 20
	DefaultRetryBackoff     = 100 * time.Millisecond
	DefaultMaxRetryBackoff  = 30 * time.Second
	DefaultDrainTimeout     = 10 * time.Second
)

// Gateway tunes a webhook sink's fan-out: one shared binlog stream, and per
// endpoint a queue, in-flight limits and, when it falls behind, a catch-up
// stream of its own. An endpoint holds at most queue transactions plus
// max_in_flight events (max_in_flight_bytes) in memory.
type Gateway struct {
	// Queue is each endpoint's queue from the shared stream, in
	// transactions with events for it. Default 256.
	Queue int `yaml:"queue" default:"256"`
	// MaxInFlight caps each endpoint's unacknowledged events (and those
	// acknowledged but not yet saved, or not listed by its checkpoint: it
	// bounds what a crash sends again). Default 1000.
	MaxInFlight int `yaml:"max_in_flight" default:"1000"`
	// MaxInFlightBytes caps their bytes. Default 1048576.
	MaxInFlightBytes int `yaml:"max_in_flight_bytes" default:"1048576"`
	// DetachAfter is how long, in all within 10s, an endpoint's full queue
	// may make the shared stream wait before the endpoint is detached to
	// catch up on its own. Default 500ms.
	DetachAfter time.Duration `yaml:"detach_after" default:"500ms"`
	// MaxCatchUp caps the catch-up streams open at once; the others wait
	// their turn. Each takes a replica id. Default 4.
	MaxCatchUp int `yaml:"max_catch_up" default:"4"`
	// MaxAwake caps the endpoints the shared stream keeps awake at once
	// (each with a pipeline, a queue and a connection: about 100 KB of
	// memory at a burst's peak), so that one event to every endpoint of a
	// large table does not wake them all together. At the cap the stream
	// waits, letting go at once every awake endpoint that holds nothing
	// unsaved; an endpoint whose last attempts failed does not count.
	// Default 4096 (about 400 MB of awake endpoints). An `outbox-relay
	// gateway` replica applies it to each partition's stream.
	MaxAwake int `yaml:"max_awake" default:"4096"`
	// DisableAfter disables an endpoint whose every attempt has failed for
	// this long (its failed events are dead letters; its later ones wait
	// behind its cursor until it is enabled again: `outbox-relay endpoints
	// enable`, or an UPDATE of its row in the endpoints table). Default 120h
	// (5 days); a negative value (-1s) never disables.
	DisableAfter time.Duration `yaml:"disable_after" default:"120h"`
}

// Defaults of a gateway, which package gateway also uses (a test holds
// each to its field's declared default). An endpoint's
// in-flight limits are smaller than a sink's (delivery.max_in_flight), as a
// gateway runs many endpoints.
const (
	DefaultGatewayQueue          = 256
	DefaultEndpointInFlight      = 1000
	DefaultEndpointInFlightBytes = 1 << 20
	DefaultDetachAfter           = 500 * time.Millisecond
	DefaultMaxCatchUp            = 4
	DefaultMaxAwake              = 4096
	DefaultDisableAfter          = 5 * 24 * time.Hour
)

// Validate checks a gateway's tuning, with its defaults applied.
func (g *Gateway) Validate() error {
	if g.Queue < 0 || g.MaxInFlight < 0 || g.MaxInFlightBytes < 0 || g.DetachAfter < 0 || g.MaxCatchUp < 0 || g.MaxAwake < 0 {
		return errors.New("gateway: queue, max_in_flight, max_in_flight_bytes, detach_after, max_catch_up and max_awake must not be negative (leave one out for its default)")
	}
	return nil
}

// Log configures logging.
type Log struct {
	// Level is debug, info, warn or error. Default info.
	Level string `yaml:"level" default:"info"`
	// Format is text or json. Default text.
	Format string `yaml:"format" default:"text"`
}

// HTTP is the metrics and health listener.
type HTTP struct {
	// Listen address for /metrics, /healthz and /readyz. Default "" (off).
	Listen string `yaml:"listen"`
	// PProf also serves Go's profiles (net/http/pprof) under /debug/pprof/
	// on the listen address, e.g. `go tool pprof
	// http://HOST:PORT/debug/pprof/profile?seconds=20`. They reveal the
	// process's internals (command line included): keep the address private.
	// Default false.
	PProf bool `yaml:"pprof"`
}

// SlogLevel returns the configured level.
func (l Log) SlogLevel() slog.Level {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(l.Level))
	return lv
}

// Attempts configures the record of webhook delivery attempts
// (docs/attempts.md): every HTTP attempt of every endpoint, and each one
// refused before it was sent, with its status or error class, duration and
// the first bytes of the answer, searchable with `outbox-relay attempts`.
// It is written off the delivery path, in batches, to a table beside the
// checkpoint table (checkpoint.store: mysql) or a file beside the
// checkpoint file (store: file), and bounded by max_age and max_rows.
type Attempts struct {
	// Enabled turns the record on. Default false: nothing is recorded, and
	// no table or file is made.
	Enabled bool `yaml:"enabled"`
	// MaxAge is how long an attempt is kept. Default 168h (7 days).
	MaxAge time.Duration `yaml:"max_age" default:"168h"`
	// MaxRows caps the attempts kept: the oldest beyond it are removed.
	// 0: no cap but max_age. Default 1000000.
	MaxRows int64 `yaml:"max_rows" default:"1000000"`
	// Table (checkpoint.store: mysql, in the checkpoint database). Default
	// outbox_relay_attempts.
	Table string `yaml:"table" default:"outbox_relay_attempts"`
	// Path of the directory the record is kept in (checkpoint.store:
	// file). One relay at a time opens it. Default beside the checkpoint
	// file: <checkpoint.path>.attempts.
	Path string `yaml:"path" derived:"<checkpoint.path>.attempts"`
	// Queue is how many attempts wait to be written at most; when the
	// store falls behind, more are dropped (and counted in
	// outbox_relay_attempts_dropped_total), never waited for. Default 10000.
	Queue int `yaml:"queue" default:"10000"`
	// BatchSize caps the attempts one write stores. Default 500.
	BatchSize int `yaml:"batch_size" default:"500"`
	// Interval is the longest an attempt waits to be written when fewer
	// than batch_size wait. Default 200ms.
	Interval time.Duration `yaml:"interval" default:"200ms"`
}

// DefaultAttemptsTable is attempts.table's default, for package attempts
// (a test holds it to the declared default).
const DefaultAttemptsTable = "outbox_relay_attempts"

// Replay configures how the running relay runs replay jobs (`outbox-relay
// replay`, docs/replay.md): each a pipeline of its own beside the live
// ones, with its own binlog stream, replica id and in-flight limits.
type Replay struct {
	// MaxRunning is how many replay jobs run at once; more wait, pending,
	// and start in turn across tenants (the one with the fewest running,
	// then the one served longest ago; each tenant's oldest first). Each
	// takes a replica id of its own after the sinks' (Config.ReplayReplicaIDs).
	// 0 runs none (jobs stay pending). Default 2.
	MaxRunning int `yaml:"max_running" default:"2"`
	// MaxJobsPerTenant caps the replay jobs one console tenant may have
	// pending or running at once (recover since, resend): one more is
	// refused (HTTP 429) until one ends. Operators' jobs are not capped.
	// Default 10.
	MaxJobsPerTenant int `yaml:"max_jobs_per_tenant" default:"10"`
	// Poll is how often the relay looks for new replay jobs and requests to
	// cancel one (in its checkpoint store, or in the request directory
	// beside a checkpoint file), and saves the running jobs' counts.
	// Default 2s.
	Poll time.Duration `yaml:"poll" default:"2s"`
	// MaxInFlight caps a replay's events sent and not yet acknowledged
	// (with those whose save is not over, and those its checkpoint does
	// not list): what a crash sends again. Its own limit, apart from the
	// live pipelines'. Default 1000.
	MaxInFlight int `yaml:"max_in_flight" default:"1000"`
}

// Tracing configures the relay's own OpenTelemetry spans (docs/tracing.md):
// one span per delivered event, child of the row's traceparent, exported
// over OTLP. The exporter is set by the standard environment variables
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf
// or grpc, OTEL_EXPORTER_OTLP_HEADERS, OTEL_TRACES_SAMPLER,
// OTEL_SERVICE_NAME, ...), not here.
type Tracing struct {
	// Enabled turns the spans on. Default false: no span is made and
	// nothing is exported (the row's trace context is carried all the same).
	Enabled bool `yaml:"enabled"`
}

// Prune configures `outbox-relay prune` and its schedule: deleting outbox
// rows that every sink has acknowledged, or dropping whole partitions of a
// table RANGE-partitioned by date.
type Prune struct {
	// Schedule is how often the active relay prunes (never a standby).
	// Default 0: the relay never prunes; run `outbox-relay prune` from cron.
	Schedule time.Duration `yaml:"schedule"`
	// OlderThan is the retention: no row younger than this is deleted,
	// acknowledged or not. Default 168h (7 days).
	OlderThan time.Duration `yaml:"older_than" default:"168h"`
	// SafetyMargin is taken off the oldest checkpoint's commit time: it must
	// exceed the longest transaction that writes outbox rows (a row's
	// timestamp is its INSERT's time, its binlog commit time can be later).
	// At least 1s. Default 1h.
	SafetyMargin time.Duration `yaml:"safety_margin" default:"1h"`
	// BatchSize is how many rows one DELETE removes (one short transaction,
	// locking only those rows). 1 to 10000. Default 500.
	BatchSize int `yaml:"batch_size" default:"500"`
	// Pause is the sleep between two batches, so replicas keep up and the
	// binlog is not flooded. Default 100ms.
	Pause time.Duration `yaml:"pause" default:"100ms"`
	// Rate caps the rows deleted per second (the pause grows to keep under
	// it). Default 0: no cap beyond Pause.
	Rate int `yaml:"rate"`
	// PartitionsAhead is how many partitions past the current one are kept
	// created ahead of time on a table RANGE-partitioned by date (at the
	// step of its last two partitions). 0 creates none. Default 3.
	PartitionsAhead *int `yaml:"partitions_ahead" default:"3"`
	// LockWaitTimeout bounds how long a partition DROP or ADD waits for the
	// table's metadata lock (lock_wait_timeout): writers queue behind a
	// waiting DDL, so it gives up rather than stall them, and is retried at
	// the next prune. Whole seconds. Default 5s.
	LockWaitTimeout time.Duration `yaml:"lock_wait_timeout" default:"5s"`
}

// Defaults of prune that package prune also uses (for a zero Options field):
// Go constants, as a tag cannot be read at compile time; a test holds each
// to its field's declared default.
const (
	DefaultPruneBatchSize       = 500
	DefaultPruneLockWaitTimeout = 5 * time.Second
)
