// Package config reads outbox-relay's YAML configuration.
//
// Load expands ${NAME} (and ${NAME:-default}) references to environment
// variables inside values, so passwords stay out of the file; rejects unknown
// keys with their line; applies every default in one place (Defaults),
// each declared once in a tag beside its field (SetDefaults); and
// Validate names the field and the bad value in each error. Secrets are of
// type Secret, which never prints its value.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the whole file.
type Config struct {
	Source Source `yaml:"source"`
	// Tables are the outbox tables whose INSERTs are events. Required: at
	// least one.
	Tables     []Table    `yaml:"tables"`
	Checkpoint Checkpoint `yaml:"checkpoint"`
	DeadLetter DeadLetter `yaml:"dead_letter"`
	Delivery   Delivery   `yaml:"delivery"`
	// Sinks are the destinations, each with its own binlog stream, pipeline
	// and checkpoint. Required: at least one.
	Sinks    []Sink   `yaml:"sinks"`
	Log      Log      `yaml:"log"`
	HTTP     HTTP     `yaml:"http"`
	Prune    Prune    `yaml:"prune"`
	Tracing  Tracing  `yaml:"tracing"`
	Replay   Replay   `yaml:"replay"`
	Attempts Attempts `yaml:"attempts"`
	Console  Console  `yaml:"console"`
}

// Console configures the gateway's console (docs/console.md): an admin API
// (/api/v1, described by /api/openapi.json) and a web page for the webhook
// sinks' endpoints, their delivery attempts and dead letters, on a listener
// of its own. Off unless listen is set.
type Console struct {
	// Listen is the console's address (host:port). Default "": no console,
	// no listener.
	Listen string `yaml:"listen" example:"# 127.0.0.1:9465"`
	// Tokens are the bearer tokens that may use the console: an operator
	// token (no tenant) sees every endpoint; a tenant token only the
	// endpoints whose tenant column equals its tenant. Each is stored
	// hashed (`outbox-relay console token` makes one). Required when
	// listen is set.
	Tokens []ConsoleToken `yaml:"tokens"`
	// LinkKeyEnv names the environment variable holding the key (at least
	// 32 bytes) that signs tenant links (`outbox-relay console link`) and
	// the page's session cookies. Default OUTBOX_RELAY_CONSOLE_KEY.
	LinkKeyEnv string `yaml:"link_key_env" default:"OUTBOX_RELAY_CONSOLE_KEY"`
	// RateLimit is the requests per second each token may make; a burst of
	// twice as many is allowed. Default 20.
	RateLimit float64 `yaml:"rate_limit" default:"20"`
	// Session is how long a browser's sign-in lasts. Default 8h.
	Session time.Duration `yaml:"session" default:"8h"`
	// FrameAncestors are the origins allowed to embed the page in a frame
	// (the Content-Security-Policy's frame-ancestors), e.g. a platform's
	// dashboard showing its customers their tenant's view. Default none:
	// no page can be framed.
	FrameAncestors []string `yaml:"frame_ancestors"`
	// TrustedProxies are the reverse proxies that end TLS in front of the
	// console, each a network (10.0.0.0/8) or an address. A request from
	// one of them gets a Secure session cookie (unless its
	// X-Forwarded-Proto says the browser used plain http), and its client
	// is the last address of X-Forwarded-For that is not a trusted proxy
	// (failed sign-ins are limited per client). Default none: the cookie
	// is Secure only when TLS ends at the relay, and the client is the
	// connection's address.
	TrustedProxies []string `yaml:"trusted_proxies"`
}

// ConsoleToken is one bearer token of the console, as its hash.
type ConsoleToken struct {
	// Name names the token in the audit log. Required.
	Name string `yaml:"name" example:"ops"`
	// Hash is "sha256:" and the hex SHA-256 of the token. Required.
	Hash string `yaml:"hash" example:"sha256:0000000000000000000000000000000000000000000000000000000000000000"`
	// Tenant, when set, limits the token to that tenant's endpoints,
	// attempts and dead letters. Default "": an operator token.
	Tenant string `yaml:"tenant"`
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

// Source is the MySQL or MariaDB server whose binlog is read: one (host,
// port), or an ordered list (servers) to fail over between.
type Source struct {
	// Host of the server. Default 127.0.0.1 (when servers is not set).
	Host string `yaml:"host" default:"127.0.0.1"`
	// Port of the server. Default 3306 (when servers is not set).
	Port int `yaml:"port" default:"3306"`
	// Servers are several servers with one history (a primary and its
	// replicas, replicating by GTID), as "host:port" (port default 3306), in
	// order of preference; user, password, TLS and the rest apply to each.
	// Each sink reads the first one that passes the binlog checks and can
	// serve its checkpoint, and moves to the next usable one when its stream
	// has failed for failover_after. Set either host/port or servers.
	Servers []string `yaml:"servers"`
	// FailoverAfter is how long a stream may fail, without reading a
	// transaction, before its sink looks for another of servers. Default 10s.
	FailoverAfter time.Duration `yaml:"failover_after" default:"10s"`
	// User needs REPLICATION SLAVE, REPLICATION CLIENT and SELECT on the
	// outbox tables. Default root.
	User string `yaml:"user" default:"root"`
	// Password; write ${ENV_VAR} to take it from the environment.
	Password Secret `yaml:"password" example:"${RELAY_DB_PASSWORD}"`
	// Flavor is auto (detected from the server), mysql or mariadb. Default auto.
	Flavor string `yaml:"flavor" default:"auto"`
	// ServerID is the replica id of the first sink's stream; sink i uses
	// ServerID+i, and the catch-up streams of webhook sinks the ids after
	// those (see Config.ReplicaIDs). None may collide with the server's own
	// id or any replica's. Default 4041.
	ServerID uint32 `yaml:"server_id" default:"4041"`
	// Heartbeat is the server heartbeat period on an idle binlog. Default 5s.
	Heartbeat time.Duration `yaml:"heartbeat" default:"5s"`
	// ReadTimeout ends a connection that is silent this long (or up to a
	// sixteenth of it later, at most 1s). Default 3 × heartbeat.
	ReadTimeout time.Duration `yaml:"read_timeout" derived:"3 × source.heartbeat"`
	// MaxReconnectBackoff caps the wait between reconnects. Default 30s (delivery.max_retry_backoff's default).
	MaxReconnectBackoff time.Duration `yaml:"max_reconnect_backoff" default:"30s"`
	// TLS to the server. Default off.
	TLS TLS `yaml:"tls"`
}

// Addr is one source server.
type Addr struct {
	Host string
	Port int
}

func (a Addr) String() string { return net.JoinHostPort(a.Host, strconv.Itoa(a.Port)) }

// Addrs lists the source servers in order of preference: servers, or the
// one host/port.
func (s Source) Addrs() []Addr {
	if len(s.Servers) == 0 {
		return []Addr{{s.Host, s.Port}}
	}
	out := make([]Addr, 0, len(s.Servers))
	for _, a := range s.Servers {
		h, p, _ := SplitHostPort(a) // checked by Validate
		out = append(out, Addr{h, p})
	}
	return out
}

// SplitHostPort parses "host:port" or "host" (port 3306), IPv6 in brackets.
func SplitHostPort(a string) (string, int, error) {
	host, port := a, "3306"
	if h, p, err := net.SplitHostPort(a); err == nil {
		host, port = h, p
	} else if strings.Contains(strings.Trim(a, "[]"), ":") && !strings.HasPrefix(a, "[") {
		return "", 0, fmt.Errorf("%q: write host:port (an IPv6 address in brackets: [::1]:3306)", a)
	}
	host = strings.Trim(host, "[]")
	n, err := strconv.Atoi(port)
	if host == "" || strings.ContainsAny(host, "@/ ") || err != nil || n <= 0 || n > 65535 {
		return "", 0, fmt.Errorf("%q is not host:port", a)
	}
	return host, n, nil
}

// TLS settings for the connections to the source server: the queries and
// the binlog stream alike.
type TLS struct {
	// Enabled turns TLS on. Default false.
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM bundle of the CAs that sign the server's certificate.
	// Default: the system's roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a client certificate and its key, both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name checked in the server's certificate. Default: source.host.
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify accepts any server certificate. Default false; for tests only.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// Table is one outbox table.
type Table struct {
	// Name is "schema.table". Required.
	Name string `yaml:"name" example:"shop.outbox"`
	// Columns map event fields to columns. Defaults follow Debezium's outbox
	// event router: id, aggregatetype, aggregateid, type, payload. Write "-"
	// for aggregate_type or type when the table has no such column.
	Columns Columns `yaml:"columns"`
	// Headers are extra columns delivered as headers. Default none.
	Headers []string `yaml:"headers"`
	// SwitchOver makes the relay claim each row of this table before it
	// sends it, as a polling worker still running on the table does, so that
	// the two together send each row once (docs/replay.md, "Switch-over from
	// a polling worker"). Needs UPDATE on the table. Remove it once the
	// poller is gone. Default none (no claim).
	SwitchOver *SwitchOver `yaml:"switch_over"`
}

// SwitchOver is the status column a polling worker claims rows by, and the
// values the relay claims them with.
type SwitchOver struct {
	// StatusColumn is the poller's status column. Default status.
	StatusColumn string `yaml:"status_column" default:"status"`
	// Pending is the status of a row no one has claimed. Default pending.
	Pending string `yaml:"pending" default:"pending"`
	// Claimed is the status the relay sets on the rows it claims: a value
	// the column accepts (add it to an ENUM) and the poller never sets, so
	// that after a crash the relay knows the rows it claimed. Default
	// relayed.
	Claimed string `yaml:"claimed" default:"relayed"`
}

// Columns maps event fields to column names.
type Columns struct {
	// ID is the event id's column; a BINARY(16) is rendered as a UUID
	// string. Default id.
	ID string `yaml:"id" default:"id"`
	// AggregateType is the aggregate type's column, "-" when the table has
	// none. Default aggregatetype.
	AggregateType string `yaml:"aggregate_type" default:"aggregatetype"`
	// AggregateID is the aggregate id's column: the ordering key (the
	// Kafka message key). Default aggregateid.
	AggregateID string `yaml:"aggregate_id" default:"aggregateid"`
	// Type is the event type's column, "-" when the table has none.
	// Default type.
	Type string `yaml:"type" default:"type"`
	// Payload is the payload's column, sent as the exact bytes stored.
	// Default payload.
	Payload string `yaml:"payload" default:"payload"`
	// CreatedAt is the column prune matches rows by: a TIMESTAMP or
	// DATETIME set by the server (DEFAULT CURRENT_TIMESTAMP), never by the
	// application. Only prune reads it. Default created_at.
	CreatedAt string `yaml:"created_at" default:"created_at"`
	// TraceParent is the column holding the W3C traceparent of the request
	// that wrote the row (its OpenTelemetry context), carried by every sink
	// and the parent of the relay's own span (see docs/tracing.md); or
	// "$.field" (or "$.a.b") for a string field of the payload's JSON. A
	// malformed value is ignored (logged once, counted in
	// outbox_relay_traceparent_malformed_total). Default "" (none).
	TraceParent string `yaml:"traceparent"`
	// TraceState is the column (or "$.field" of the payload) holding the
	// W3C tracestate that goes with traceparent. Default "" (none).
	TraceState string `yaml:"tracestate"`
}

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
	// Default 4096 (about 400 MB of awake endpoints). The relay's gateway
	// only: `outbox-relay gateway` replicas keep every endpoint awake.
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

// Secret is a string that never appears in logs or printed configs.
type Secret string

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "******"
}

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// Reveal returns the secret's value, for the code that needs it.
func (s Secret) Reveal() string { return string(s) }

// Load reads, expands, decodes (rejecting unknown keys), defaults and
// validates the file at path.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cfg, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// LoadSections is Load for a command that uses only the named top-level
// sections (status reads source and checkpoint, not the sinks): a ${NAME}
// elsewhere that is not set (a webhook secret) is left as written. When the
// config cannot be decoded or validated that way, the unset variable is
// the error, as with Load.
func LoadSections(path string, sections ...string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cfg, err := parse(b, sections)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Parse is Load on bytes.
func Parse(b []byte) (*Config, error) { return parse(b, nil) }

// parse expands every ${NAME}, or, with sections, those of the named
// top-level sections, leaving the others as written when they are unset.
func parse(b []byte, sections []string) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	if len(root.Content) == 0 {
		return nil, errors.New("the file is empty: see deploy/config.example.yaml")
	}
	// unset is the first unset variable outside the sections: an error
	// only if the config is no good without it.
	var unset error
	lenient, err := expandRoot(&root, sections, &unset)
	if err != nil {
		return nil, err
	}
	cfg, err := decode(&root, lenient)
	if err != nil && unset != nil {
		return nil, errors.Join(unset, err)
	}
	return cfg, err
}

// decode decodes the expanded root (rejecting unknown keys), then defaults
// and validates the config; problems of the parts at the key paths lenient
// (which hold an unset variable a command does not need) are ignored.
func decode(root *yaml.Node, lenient []string) (*Config, error) {
	if errs := checkKeys(root); len(errs) > 0 {
		return nil, fmt.Errorf("%s (see deploy/config.example.yaml for every key)", strings.Join(errs, "; "))
	}
	// The expanded nodes are decoded as they are (their lines are the
	// file's); checkKeys has rejected every unknown key.
	var cfg Config
	if err := root.Decode(&cfg); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			// checkKeys has seen every key and value; this is a backstop.
			paths := map[int]string{}
			keyPaths(root, "", paths)
			all := map[int][]string{}
			linePaths(root, "", all)
			var msgs []string
			for _, m := range te.Errors {
				var line int
				if _, err := fmt.Sscanf(m, "line %d:", &line); err != nil || secretLine(all[line]) {
					m = hideValue(m)
				}
				if paths[line] != "" {
					m = paths[line] + ": " + m
				}
				msgs = append(msgs, m)
			}
			return nil, fmt.Errorf("%s (see deploy/config.example.yaml for every key and its type)", strings.Join(msgs, "; "))
		}
		return nil, err
	}
	for i := range cfg.Sinks {
		if err := cfg.Sinks[i].decodeSection(fmt.Sprintf("sinks[%d]", i)); err != nil {
			return nil, err
		}
	}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		var kept []error
		for _, e := range unjoin(err) {
			if !under(e.Error(), lenient) {
				kept = append(kept, e)
			}
		}
		if len(kept) > 0 {
			return nil, errors.Join(kept...)
		}
	}
	return &cfg, nil
}

// identRe is a column name prune can use unquoted of any risk.
var identRe = regexp.MustCompile(`^[A-Za-z0-9_$]{1,64}$`)

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// expandRoot expands the document root: every section, or with sections
// those named strictly and the others leniently (an unset variable is kept
// as written and the first one recorded in *unset). It returns the key
// paths of the lenient parts that hold an unset variable: a section
// ("http") or an item of a list ("sinks[1]").
func expandRoot(root *yaml.Node, sections []string, unset *error) ([]string, error) {
	m := root
	if m.Kind == yaml.DocumentNode && len(m.Content) == 1 {
		m = m.Content[0]
	}
	if sections == nil || m.Kind != yaml.MappingNode {
		return nil, expandNode(root, true, unset)
	}
	var lenient []string
	for i := 0; i+1 < len(m.Content); i += 2 {
		key, v := m.Content[i].Value, m.Content[i+1]
		if slices.Contains(sections, key) {
			if err := expandNode(v, true, unset); err != nil {
				return nil, err
			}
			continue
		}
		parts, paths := []*yaml.Node{v}, []string{key}
		if v.Kind == yaml.SequenceNode {
			parts, paths = v.Content, nil
			for j := range v.Content {
				paths = append(paths, fmt.Sprintf("%s[%d]", key, j))
			}
		}
		for j, n := range parts {
			var here error
			expandNode(n, false, &here) // never fails when lenient
			if here != nil {
				lenient = append(lenient, paths[j])
				if *unset == nil {
					*unset = here
				}
			}
		}
	}
	return lenient, nil
}

// under reports whether a Validate message is about one of paths (it
// starts with the path, then '.', ':' or '[').
func under(msg string, paths []string) bool {
	for _, p := range paths {
		if rest, ok := strings.CutPrefix(msg, p); ok && rest != "" && strings.ContainsRune(".:[", rune(rest[0])) {
			return true
		}
	}
	return false
}

// expandNode replaces ${NAME} and ${NAME:-default} in every scalar value.
// An unset NAME is an error when strict, else it stays as written and the
// first such error is kept in *unset.
func expandNode(n *yaml.Node, strict bool, unset *error) error {
	if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
		var missing []string
		n.Value = envRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
			m := envRef.FindStringSubmatch(ref)
			if v, ok := os.LookupEnv(m[1]); ok {
				return v
			}
			if m[2] != "" {
				return m[3]
			}
			missing = append(missing, m[1])
			return ref
		})
		if len(missing) > 0 {
			err := fmt.Errorf("line %d: environment variable %s is not set: export it, or write ${%s:-default}", n.Line, missing[0], missing[0])
			if strict {
				return err
			}
			if *unset == nil {
				*unset = err
			}
		}
		// Let the target field decide the type ("${PORT}" fills an int), but
		// never let a value from the environment turn into null.
		n.Tag, n.Style = "", 0
		switch n.Value {
		case "", "~", "null", "Null", "NULL":
			n.Tag, n.Style = "!!str", yaml.DoubleQuotedStyle
		}
	}
	for _, c := range n.Content {
		if err := expandNode(c, strict, unset); err != nil {
			return err
		}
	}
	return nil
}

// keyPaths records, for each line holding a mapping value, its key path
// (e.g. "delivery.linger", "sinks[1].type").
func keyPaths(n *yaml.Node, path string, out map[int]string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			keyPaths(c, path, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if path != "" {
				p = path + "." + p
			}
			if _, ok := out[n.Content[i].Line]; !ok || n.Content[i+1].Kind == yaml.ScalarNode {
				out[n.Content[i].Line] = p
			}
			keyPaths(n.Content[i+1], p, out)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if _, ok := out[c.Line]; !ok {
				out[c.Line] = p
			}
			keyPaths(c, p, out)
		}
	}
}

// linePaths records, for each line, the paths of every node on it (flow
// style puts several keys on one line).
func linePaths(n *yaml.Node, path string, out map[int][]string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			linePaths(c, path, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if path != "" {
				p = path + "." + p
			}
			out[n.Content[i].Line] = append(out[n.Content[i].Line], p)
			out[n.Content[i+1].Line] = append(out[n.Content[i+1].Line], p)
			linePaths(n.Content[i+1], p, out)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			out[c.Line] = append(out[c.Line], p)
			linePaths(c, p, out)
		}
	}
}

// secretLine reports whether one of paths (all the paths of a line) leads
// to or into a secret, or the line is unknown.
func secretLine(paths []string) bool {
	if len(paths) == 0 {
		return true
	}
	for _, p := range paths {
		if isSecretPath(p) {
			return true
		}
	}
	return false
}

var secretType = reflect.TypeFor[Secret]()

// isSecretPath reports whether the key path p ("sinks[0].webhook.endpoints[1].secrets[0]")
// leads to or into a field that holds a secret: one of type Secret, or one
// tagged secret:"true" (webhook secrets and headers, the Kafka SASL
// password). A path that leads nowhere is reported as secret.
func isSecretPath(p string) bool {
	t := reflect.TypeFor[Config]()
	for _, seg := range strings.Split(strings.NewReplacer("[", ".[").Replace(p), ".") {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t == secretType {
			return true
		}
		switch {
		case seg == "":
			continue
		case strings.HasPrefix(seg, "["):
			if t.Kind() != reflect.Slice && t.Kind() != reflect.Array {
				return true
			}
			t = t.Elem()
		case t.Kind() == reflect.Map:
			t = t.Elem()
		case t.Kind() == reflect.Struct:
			f, ok := yamlField(t, seg)
			if !ok {
				return true
			}
			if f.Tag.Get("secret") == "true" {
				return true
			}
			t = f.Type
		default:
			return true
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t == secretType
}

// yamlField is the field of struct type t under the key name; under a
// sink, a section key is the registered kind's section.
func yamlField(t reflect.Type, name string) (reflect.StructField, bool) {
	if t == sinkType {
		if st, ok := sinkSectionType(name); ok {
			return reflect.StructField{Name: name, Type: st}, true
		}
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// typeErrValue is the value a yaml type error quotes: "cannot unmarshal
// !!str `whsec_U...` into []string".
var typeErrValue = regexp.MustCompile("(cannot unmarshal \\S+) `.*` (into )")

// hideValue drops the quoted value from a yaml type error.
func hideValue(msg string) string {
	return typeErrValue.ReplaceAllString(msg, "$1 (value hidden: the key may hold a secret) $2")
}

// Defaults fills every unset field with its default: the defaults declared
// beside the fields (SetDefaults), then those derived from other keys, then
// each sink's section's (its kind's Defaults).
func (c *Config) Defaults() {
	s := &c.Source
	host, port := s.Host, s.Port
	SetDefaults(c)
	if len(s.Servers) > 0 {
		// host and port default only when no list of servers is set.
		s.Host, s.Port = host, port
	}
	setD(&s.ReadTimeout, 3*s.Heartbeat)
	dl := &c.DeadLetter
	setS(&dl.Store, c.Checkpoint.Store)
	if dl.Store == "file" {
		setS(&dl.Path, filepath.Join(filepath.Dir(c.Checkpoint.Path), "dead-letters"))
	}
	if c.Checkpoint.Store == "file" {
		setS(&c.Attempts.Path, c.Checkpoint.Path+".attempts")
	}
	for _, s := range c.Sinks {
		if s.Config != nil {
			s.Config.Defaults()
		}
	}
}

// Validate checks a gateway's tuning, with its defaults applied.
func (g *Gateway) Validate() error {
	if g.Queue < 0 || g.MaxInFlight < 0 || g.MaxInFlightBytes < 0 || g.DetachAfter < 0 || g.MaxCatchUp < 0 || g.MaxAwake < 0 {
		return errors.New("gateway: queue, max_in_flight, max_in_flight_bytes, detach_after, max_catch_up and max_awake must not be negative (leave one out for its default)")
	}
	return nil
}

// sourceCredentials is the error for a source address written with
// credentials ("relay:pw@db:3306"), which would be echoed in errors and
// connect logs. It never quotes the address.
const sourceCredentials = `holds an "@": credentials do not belong in a server address (they would be logged); write host:port only, and set source.user and source.password (from the environment: password: ${SOURCE_PASSWORD})`

// Validate reports the first problems found, each naming its field.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if len(c.Source.Servers) > 0 {
		if c.Source.Host != "" || c.Source.Port != 0 {
			bad("source: set either host/port (one server) or servers (a list), not both")
		}
		seen := map[string]bool{}
		for i, a := range c.Source.Servers {
			if strings.Contains(a, "@") {
				bad("source.servers[%d]: %s", i, sourceCredentials)
				continue
			}
			host, port, err := SplitHostPort(a)
			switch {
			case err != nil:
				bad("source.servers[%d]: %v", i, err)
			case seen[net.JoinHostPort(host, strconv.Itoa(port))]:
				bad("source.servers[%d]: %s is listed twice", i, a)
			}
			seen[net.JoinHostPort(host, strconv.Itoa(port))] = true
		}
	} else if strings.Contains(c.Source.Host, "@") {
		bad("source.host: %s", sourceCredentials)
	} else if c.Source.Port <= 0 || c.Source.Port > 65535 {
		bad("source.port: %d is not a TCP port", c.Source.Port)
	}
	if !oneOf(c.Source.Flavor, "auto", "mysql", "mariadb") {
		bad("source.flavor: %q is not one of auto, mysql, mariadb", c.Source.Flavor)
	}
	if t := c.Source.TLS; !t.Enabled && (t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "" || t.InsecureSkipVerify) {
		bad("source.tls.enabled: false, but other source.tls fields are set; set source.tls.enabled: true to use them")
	}
	if t := c.Source.TLS; (t.CertFile == "") != (t.KeyFile == "") {
		bad("source.tls: cert_file and key_file must be set together")
	}
	if c.Source.ReadTimeout <= c.Source.Heartbeat {
		bad("source.read_timeout: %s must be longer than source.heartbeat (%s), or a quiet server looks dead", c.Source.ReadTimeout, c.Source.Heartbeat)
	}
	if len(c.Tables) == 0 {
		bad("tables: no outbox table configured: add one, e.g. `tables: [{name: shop.outbox}]`")
	}
	seen := map[string]bool{}
	for i, t := range c.Tables {
		parts := strings.Split(t.Name, ".")
		if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
			bad("tables[%d].name: %q must be schema.table", i, t.Name)
		}
		if seen[t.Name] {
			bad("tables[%d].name: %q is listed twice", i, t.Name)
		}
		seen[t.Name] = true
		for field, v := range map[string]string{"id": t.Columns.ID, "aggregate_id": t.Columns.AggregateID, "payload": t.Columns.Payload} {
			if v == "-" {
				bad("tables[%d].columns.%s: this field is required and cannot be \"-\"", i, field)
			}
		}
		if so := t.SwitchOver; so != nil {
			if !identRe.MatchString(so.StatusColumn) {
				bad("tables[%d].switch_over.status_column: %q: use letters, digits, _ and $ only", i, so.StatusColumn)
			}
			if !identRe.MatchString(t.Columns.ID) {
				bad("tables[%d].switch_over: the id column %q must be a plain column name (letters, digits, _ and $): the claim selects rows by it", i, t.Columns.ID)
			}
			if so.Pending == "" || so.Claimed == "" || so.Pending == so.Claimed {
				bad("tables[%d].switch_over: pending (%q) and claimed (%q) must be set and differ: claimed is the status only the relay sets", i, so.Pending, so.Claimed)
			}
		}
	}
	if !oneOf(c.Checkpoint.Store, "file", "mysql") {
		bad("checkpoint.store: %q is not one of file, mysql", c.Checkpoint.Store)
	}
	if c.Checkpoint.Store == "mysql" && c.Checkpoint.DSN == "" {
		bad("checkpoint.dsn: required with checkpoint.store: mysql (user:${PASSWORD}@tcp(host:3306)/db)")
	}
	if c.Checkpoint.DSN != "" {
		if err := CheckDSN(c.Checkpoint.DSN.Reveal()); err != nil {
			errs = append(errs, err)
		}
	}
	for field, name := range map[string]string{"checkpoint.table": c.Checkpoint.Table, "dead_letter.table": c.DeadLetter.Table, "attempts.table": c.Attempts.Table} {
		if !ValidTableName(name) {
			bad("%s: %q: use 1 to 64 letters, digits, _ and $", field, name)
		}
	}
	if c.Checkpoint.MinInterval < 0 {
		bad("checkpoint.min_interval: %s is negative; leave it out for the default %s", c.Checkpoint.MinInterval, DefaultOf(c.Checkpoint, "min_interval"))
	}
	if _, err := c.StartGTID(); err != nil {
		bad("checkpoint.start: %v", err)
	}
	if lt := c.Checkpoint.LockTimeout; lt < 2*time.Second || lt%time.Second != 0 {
		bad("checkpoint.lock_timeout: %s: use whole seconds, at least 2s", lt)
	}
	if !oneOf(c.DeadLetter.Store, "file", "mysql", "none") {
		bad("dead_letter.store: %q is not one of file, mysql, none", c.DeadLetter.Store)
	}
	if c.DeadLetter.Store == "mysql" && c.Checkpoint.DSN == "" {
		bad("dead_letter.store: mysql keeps dead letters in the checkpoint database: set checkpoint.dsn")
	}
	if c.HTTP.PProf && c.HTTP.Listen == "" {
		bad("http.pprof: true needs http.listen (the address the profiles are served on)")
	}
	if c.Delivery.Linger < 0 {
		bad("delivery.linger: %s is negative; 0 (the default) sends what is queued without waiting", c.Delivery.Linger)
	}
	if c.Delivery.BatchSize > c.Delivery.MaxInFlight {
		bad("delivery.batch_size: %d is larger than delivery.max_in_flight (%d)", c.Delivery.BatchSize, c.Delivery.MaxInFlight)
	}
	if len(c.Sinks) == 0 {
		bad("sinks: no sink configured: add one, e.g. `sinks: [{name: out, type: stdout}]`")
	}
	names := map[string]bool{}
	for i, s := range c.Sinks {
		if s.Name == "" || strings.ContainsAny(s.Name, "/ \t") {
			bad("sinks[%d].name: %q must be set and have no '/' or spaces", i, s.Name)
		}
		if names[s.Name] {
			bad("sinks[%d].name: %q is used twice; each sink needs its own name (it keys its checkpoint)", i, s.Name)
		}
		names[s.Name] = true
		s.validate(i, bad)
	}
	c.Console.validate(bad)
	if rp := c.Replay; rp.MaxRunning < 0 || rp.MaxRunning > 64 {
		bad("replay.max_running: %d is not between 0 and 64", rp.MaxRunning)
	}
	if c.Replay.Poll < 100*time.Millisecond {
		bad("replay.poll: %s: use at least 100ms", c.Replay.Poll)
	}
	if c.Replay.MaxJobsPerTenant < 1 {
		bad("replay.max_jobs_per_tenant: %d: use at least 1", c.Replay.MaxJobsPerTenant)
	}
	if c.Replay.MaxInFlight < 1 {
		bad("replay.max_in_flight: %d: use at least 1", c.Replay.MaxInFlight)
	}
	if at := c.Attempts; at.Enabled {
		if at.MaxAge < time.Minute {
			bad("attempts.max_age: %s: use at least 1m (leave it out for the default %s)", at.MaxAge, DefaultOf(at, "max_age"))
		}
		if at.MaxRows < 0 {
			bad("attempts.max_rows: %d is negative; use 0 for no cap but max_age", at.MaxRows)
		}
		if at.Queue < 1 || at.BatchSize < 1 {
			bad("attempts.queue (%d) and attempts.batch_size (%d): use at least 1 each", at.Queue, at.BatchSize)
		}
		if at.Interval < time.Millisecond {
			bad("attempts.interval: %s: use at least 1ms (leave it out for the default %s)", at.Interval, DefaultOf(at, "interval"))
		}
	}
	pr := c.Prune
	if pr.Schedule < 0 || (pr.Schedule > 0 && pr.Schedule < time.Minute) {
		bad("prune.schedule: %s: use at least 1m, or 0 (never; run `outbox-relay prune` yourself)", pr.Schedule)
	}
	if pr.OlderThan < 0 {
		bad("prune.older_than: %s must not be negative", pr.OlderThan)
	}
	if pr.SafetyMargin < time.Second {
		bad("prune.safety_margin: %s: use at least 1s (binlog commit times have whole seconds); it must exceed your longest transaction", pr.SafetyMargin)
	}
	if pr.BatchSize < 1 || pr.BatchSize > 10000 {
		bad("prune.batch_size: %d is not between 1 and 10000", pr.BatchSize)
	}
	if pr.Pause < 0 || pr.Rate < 0 {
		bad("prune.pause and prune.rate must not be negative (%s, %d)", pr.Pause, pr.Rate)
	}
	if pr.PartitionsAhead != nil && (*pr.PartitionsAhead < 0 || *pr.PartitionsAhead > 1000) {
		bad("prune.partitions_ahead: %d is not between 0 and 1000", *pr.PartitionsAhead)
	}
	if lw := pr.LockWaitTimeout; lw < time.Second || lw%time.Second != 0 {
		bad("prune.lock_wait_timeout: %s: use whole seconds, at least 1s", lw)
	}
	for i, t := range c.Tables {
		if cc := t.Columns.CreatedAt; cc != "" && !identRe.MatchString(cc) {
			bad("tables[%d].columns.created_at: %q: use letters, digits, _ and $ only", i, cc)
		}
	}
	if !oneOf(c.Log.Level, "debug", "info", "warn", "error") {
		bad("log.level: %q is not one of debug, info, warn, error", c.Log.Level)
	}
	if !oneOf(c.Log.Format, "text", "json") {
		bad("log.format: %q is not one of text, json", c.Log.Format)
	}
	return errors.Join(errs...)
}

// StartGTID returns the explicit GTID set of checkpoint.start, or "" for
// current and earliest.
func (c *Config) StartGTID() (string, error) {
	switch s := c.Checkpoint.Start; {
	case s == "current" || s == "earliest":
		return "", nil
	case strings.HasPrefix(s, "gtid:") && len(s) > len("gtid:"):
		return strings.TrimPrefix(s, "gtid:"), nil
	default:
		return "", fmt.Errorf("%q is not current, earliest or gtid:<set>", s)
	}
}

// ReplicaIDs is how many replica ids the relay registers with, from
// source.server_id on: one stream per sink (ServerID+i for sink i), then
// each webhook sink's catch-up streams (gateway.max_catch_up each), in sink
// order, then one per running replay job (replay.max_running). The ids
// after them are the commands' (audit, replay --dry-run) and then the
// relay's reads of a checkpoint's commit time at resume.
func (c *Config) ReplicaIDs() int {
	n := len(c.Sinks)
	for _, s := range c.Sinks {
		if f, ok := s.Config.(FanOut); ok {
			n += f.GatewayConfig().MaxCatchUp
		}
	}
	return n + max(c.Replay.MaxRunning, 0)
}

// ReplayReplicaIDs returns the replica ids of the running replay jobs, one
// per slot of replay.max_running: the last ids of the relay's range
// (ReplicaIDs), after every sink's stream and catch-up streams. A job
// takes a free slot's id while it runs, so no two streams of one relay
// ever share an id, and the live streams' ids do not move when
// max_running changes.
func (c *Config) ReplayReplicaIDs() []uint32 {
	n := max(c.Replay.MaxRunning, 0)
	first := c.Source.ServerID + uint32(c.ReplicaIDs()-n)
	out := make([]uint32, n)
	for i := range out {
		out[i] = first + uint32(i)
	}
	return out
}

// SinkReplicaIDs returns the replica ids sink i registers with, by the rule
// of source.server_id: its stream's is ServerID+i; a fan-out (webhook)
// sink's catch-up streams take the ids after every sink's stream
// (ServerID+len(Sinks) on), gateway.max_catch_up each, in sink order. It is
// a function of the configuration alone: the order in which the relay
// builds or starts its streams does not change it.
func (c *Config) SinkReplicaIDs(i int) (stream uint32, catchUp []uint32) {
	next := c.Source.ServerID + uint32(len(c.Sinks))
	for j, s := range c.Sinks[:i+1] {
		f, ok := s.Config.(FanOut)
		if !ok {
			continue
		}
		n := uint32(f.GatewayConfig().MaxCatchUp)
		if j == i {
			for k := range n {
				catchUp = append(catchUp, next+k)
			}
		}
		next += n
	}
	return c.Source.ServerID + uint32(i), catchUp
}

// PipelineNames lists the pipelines the sinks need, in the order the relay
// runs them: one per sink, named after it, and one per endpoint for webhook
// sinks, named "<sink>/<endpoint>". Each name keys a checkpoint.
func (c *Config) PipelineNames() []string {
	var out []string
	for _, s := range c.Sinks {
		if f, ok := s.Config.(FanOut); ok {
			for _, ep := range f.StaticEndpoints() {
				out = append(out, s.Name+"/"+ep)
			}
			continue
		}
		out = append(out, s.Name)
	}
	return out
}

// SchemaTable splits a table name.
func (t Table) SchemaTable() (string, string) {
	schema, name, _ := strings.Cut(t.Name, ".")
	return schema, name
}

// Column returns a mapped column name, with "-" meaning not mapped.
func Column(v string) string {
	if v == "-" {
		return ""
	}
	return v
}

// PayloadPath returns the field path of a column mapping "$.a.b" (a field
// inside the payload's JSON), or nil when col names a column.
func PayloadPath(col string) []string {
	p, ok := strings.CutPrefix(col, "$.")
	if !ok || p == "" {
		return nil
	}
	return strings.Split(p, ".")
}

// SlogLevel returns the configured level.
func (l Log) SlogLevel() slog.Level {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(l.Level))
	return lv
}

// unjoin lists the errors joined in err (errors.Join), or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func oneOf(v string, options ...string) bool {
	for _, o := range options {
		if v == o {
			return true
		}
	}
	return false
}

func setS(p *string, d string) {
	if *p == "" {
		*p = d
	}
}

func setD(p *time.Duration, d time.Duration) {
	if *p == 0 {
		*p = d
	}
}
