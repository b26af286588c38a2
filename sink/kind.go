package sink

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/tlsfiles"
	"github.com/outbox-relay/outbox-relay/retry"
)

// Kind is one sink type, declared once by its package and registered with
// Register from its init: its type name, its config section, how to build
// it, and the optional abilities the commands use. Everything else (config,
// relay, check, audit) loops over Kinds; a new sink is its package plus one
// import line in package sink/all. Model: Redpanda Connect's
// RegisterBatchOutput; Prometheus's discovery.RegisterConfig.
type Kind struct {
	// Type is the value of sinks[i].type and the key of the sink's section.
	Type string
	// Config returns a zero section (a pointer to the kind's Config) for
	// package config to decode, default and validate.
	Config func() config.SinkConfig
	// Required says what the section needs at least ("at least
	// kafka.brokers"); empty when the section may be left out.
	Required string
	// New builds the sink from its section. Nil for a kind the relay runs
	// as a gateway of endpoints (the section is a config.FanOut).
	New func(Params) (Sink, error)
	// Probes says that New's sink is a Prober: `outbox-relay check` builds
	// it (with no logger) and probes its destination.
	Probes bool
	// Insecure lists the settings of a section that weaken transport
	// security (certificate checks off, credentials in clear text), for
	// `check`. Nil: none can.
	Insecure func(config.SinkConfig) []Warning
	// Audit builds the Auditor that reads the sink's destination back for
	// `outbox-relay audit`; it does not touch the network. Nil: the
	// destination cannot be read back (stdout), or the kind is a gateway
	// (config.FanOut), whose endpoints are audited against their
	// checkpoints. A kind with Audit has an audit test (see
	// docs/adding-a-sink.md).
	Audit func(AuditParams) (Auditor, error)
	// FanOut, for a kind the relay runs as a gateway of endpoints (its
	// section is a config.FanOut; New is nil), is its gateway.FanOut: how
	// to build a sink's endpoints, of its configuration and of its
	// endpoints table. Typed any because package gateway imports this one;
	// gateway.FanOutOf reads it. Nil for the other kinds.
	FanOut any
	// CheckSource, if set, reads what the kind keeps in the source database
	// (a webhook sink's endpoints table) as the relay will at start, for
	// `outbox-relay check`: its findings are check's lines (tables, or
	// insecure_settings).
	CheckSource func(ctx context.Context, db *sql.DB, cfg *config.Config, sc config.Sink) []Finding
	// SourceTables, if set, names the tables of the source database a
	// sink of the kind reads besides the outbox tables (a webhook sink's
	// endpoints table), as schema.table: `check`'s privileges line asks
	// the relay's user for SELECT on each.
	SourceTables func(sc config.SinkConfig) []string
	// Status, if set, returns the lines `outbox-relay status` prints of
	// what the kind keeps in the source database (the endpoints of a
	// webhook sink's table that do not run, and why); none when all is
	// well.
	Status func(ctx context.Context, db *sql.DB, sc config.Sink) []string
	// LibraryLogger, if set, routes the log of the kind's client library
	// (a process-wide setting of that library) to log; the commands call
	// it once at start.
	LibraryLogger func(log *slog.Logger)
	// AuditFlags are the settings the kind's read-back needs of the audit
	// command beyond its section (RabbitMQ: the stream queue to read):
	// `outbox-relay audit` offers each as a flag and hands its value to
	// Audit in AuditParams.Flags.
	AuditFlags []AuditFlag
	// Server, for a kind whose tests need a server of its own (a broker
	// they reach on 127.0.0.1), says where and how to get one: CI
	// installs and starts each registered kind's server that does not
	// answer (.ci/run, through sink/all/servers). Nil: the tests start
	// what they need in process (kfake, an HTTP server) or need nothing.
	Server *Server
}

// AuditFlag is one flag of `outbox-relay audit` a kind declares for its
// read-back (Kind.AuditFlags).
type AuditFlag struct {
	// Name is the flag's name, without dashes ("queue"); Value names its
	// value in the synopsis ("NAME").
	Name, Value string
	// Usage is the flag's help, starting with the kind ("rabbitmq: ...").
	Usage string
}

// Server is the server a kind's tests need (Kind.Server).
type Server struct {
	// Name names it in messages: "redis-server".
	Name string
	// Addr is where the kind's tests reach it: "127.0.0.1:6379".
	Addr string
	// Packages are the Debian packages that provide it.
	Packages []string
	// Start is a shell command that starts it listening on Addr, in the
	// background, and returns.
	Start string
}

// Params is what New gets besides the section.
type Params struct {
	// Name is the sink's name. A sink that reads back its own messages
	// after a restart (sink.Recoverer) writes it into each as their writer.
	Name   string
	Config config.SinkConfig
	// Retry is the relay's retry policy, for a sink that retries itself.
	Retry retry.Policy
	// Logger is nil when the sink is built only to be probed.
	Logger *slog.Logger
	// Stdout is where a sink writing to the process's output writes.
	Stdout io.Writer
}

// Warning is one insecure setting of a section: Path is under the sink
// ("" for the section as a whole, "webhook.endpoints[2]"), Name what it
// names there (an endpoint), Detail what is wrong, Fix how to fix it.
type Warning struct {
	Path, Name, Detail, Fix string
}

// Finding is one line a kind adds to `outbox-relay check` (Kind.CheckSource).
type Finding struct {
	// Insecure: an insecure_settings line; else a tables line.
	Insecure bool
	Status   Status
	// Detail says what was found; Fix what fixes a warning or failure.
	Detail, Fix string
}

// Status of a Finding.
type Status int

// The statuses of a Finding: check's PASS, WARN and FAIL.
const (
	Passed Status = iota
	Warned
	Failed
)

// TLSWarnings warns when a section (key section) skips certificate
// checks, or sends a password or token (secret) without TLS.
func TLSWarnings(section string, t tlsfiles.Settings, secret bool) []Warning {
	switch {
	case t.Enabled && t.InsecureSkipVerify:
		return []Warning{{Detail: fmt.Sprintf("%s.tls.insecure_skip_verify is true: the server's certificate is not verified", section),
			Fix: fmt.Sprintf("set %s.tls.ca_file to the server's CA and remove insecure_skip_verify", section)}}
	case !t.Enabled && secret:
		return []Warning{{Detail: fmt.Sprintf("a %s password or token without %s.tls: it crosses the network in clear text", section, section),
			Fix: fmt.Sprintf("set %s.tls.enabled: true", section)}}
	}
	return nil
}

var (
	kindsMu sync.RWMutex
	kinds   = map[string]Kind{}
)

// Register makes a sink kind known to every command and its section to
// package config. It is called from the kind's package init; registering a
// type twice panics.
func Register(k Kind) {
	if k.Config == nil {
		panic(fmt.Sprintf("sink: kind %q has no Config", k.Type))
	}
	config.RegisterSink(config.SinkKind{Type: k.Type, New: k.Config, Required: k.Required})
	kindsMu.Lock()
	defer kindsMu.Unlock()
	kinds[k.Type] = k
}

// Kinds lists the registered kinds, by type.
func Kinds() []Kind {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	out := make([]Kind, 0, len(kinds))
	for _, k := range kinds {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b Kind) int {
		if a.Type < b.Type {
			return -1
		}
		if a.Type > b.Type {
			return 1
		}
		return 0
	})
	return out
}

// KindOf returns the kind registered under typ.
func KindOf(typ string) (Kind, bool) {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	k, ok := kinds[typ]
	return k, ok
}
