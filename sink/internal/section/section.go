// Package section is what the broker kinds (NATS, Redis, RabbitMQ, Kafka)
// share about their registration and config section: the sink.Kind each
// starts from (Kind, with TLSWarnings for its Insecure), building a sink or
// an auditor from a section written in Go (Build: defaults, then
// validation, as config.Load does for a section it reads), the adapters
// from a kind's own Config, Sink and Auditor types to sink.Kind's New and
// Audit, and the defaults and checks every section's Defaults and Validate
// make (Defaults, Problems, ProblemsOf). It holds no state; its functions
// may be called from any goroutine.
package section

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event/cloudevent"
	"github.com/outbox-relay/outbox-relay/internal/defaults"
	"github.com/outbox-relay/outbox-relay/internal/tlsfiles"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/secret"
)

// Config is a kind's section type C, as config.Load holds it: a *C.
type Config[C any] interface {
	*C
	config.SinkConfig
}

// Build applies c's defaults, validates it and builds from it: the
// constructors a kind exports for a section written in Go (New,
// NewAuditor). config.Load has done both for a section it read, so the
// sink.Kind's New and Audit call the build function directly.
func Build[C any, P Config[C], T any](c C, build func(C) (T, error)) (T, error) {
	P(&c).Defaults()
	if err := P(&c).Validate(); err != nil {
		var zero T
		return zero, err
	}
	return build(c)
}

// New is sink.Kind.New for a kind whose section is a C and whose sink a
// build of it (the section's defaults applied and validated by
// config.Load).
func New[C any, P Config[C], S sink.Sink](build func(C, sink.Params) (S, error)) func(sink.Params) (sink.Sink, error) {
	return func(p sink.Params) (sink.Sink, error) {
		s, err := build(*p.Config.(P), p)
		if err != nil {
			return nil, err // not a nil S in a non-nil sink.Sink
		}
		return s, nil
	}
}

// Audit is sink.Kind.Audit for a kind whose section is a C and whose
// Auditor a build of it.
func Audit[C any, P Config[C], A sink.Auditor](build func(C, sink.AuditParams) (A, error)) func(sink.AuditParams) (sink.Auditor, error) {
	return func(p sink.AuditParams) (sink.Auditor, error) {
		a, err := build(*p.Config.(P), p)
		if err != nil {
			return nil, err
		}
		return a, nil
	}
}

// Kind is the sink.Kind every broker kind starts from: its section a C,
// which needs at least what required says; its sinks built by build and
// probed by `outbox-relay check` (an S is a sink.Prober: the compiler holds
// Probes to it); its destination read back by audit's Auditor. The kind
// adds what is its own (Insecure, Server, ...) and registers it.
func Kind[C any, P Config[C], S prober, A sink.Auditor](typ, required string, build func(C, sink.Params) (S, error), audit func(C, sink.AuditParams) (A, error)) sink.Kind {
	return sink.Kind{
		Type:     typ,
		Config:   func() config.SinkConfig { return P(new(C)) },
		Required: required,
		New:      New[C, P](build),
		Probes:   true,
		Audit:    Audit[C, P](audit),
	}
}

// prober is a sink that `outbox-relay check` probes.
type prober interface {
	sink.Sink
	sink.Prober
}

// TLSWarnings is sink.Kind.Insecure for a kind whose section weakens
// transport security only through its tls block: sink.TLSWarnings of the
// block and whether the section sets a password or token, as reach says.
func TLSWarnings[C any, P Config[C]](typ string, reach func(P) (t tlsfiles.Settings, secret bool)) func(config.SinkConfig) []sink.Warning {
	return func(sc config.SinkConfig) []sink.Warning {
		t, secret := reach(sc.(P))
		return sink.TLSWarnings(typ, t, secret)
	}
}

// Logger is the log of a sink of kind typ: logger with its sink_type, or
// a logger that discards when logger is nil (a sink built only to be
// probed).
func Logger(logger *slog.Logger, typ string) *slog.Logger {
	defaults.Logger(&logger)
	return logger.With(slog.String("sink_type", typ))
}

// Defaults is a broker section's Defaults: every zero field of the section
// c points to gets the default declared beside it (config.SetDefaults), then
// its cloudevents block ce its own.
func Defaults(c any, ce *cloudevent.Config) {
	config.SetDefaults(c)
	ce.Defaults()
}

// Problems collects what is wrong with a section, for its Validate: each
// problem is prefixed with the section's key ("nats.").
type Problems struct {
	key  string
	errs []error
}

// NewProblems returns the Problems of section key ("nats").
func NewProblems(key string) *Problems { return &Problems{key: key} }

// ProblemsOf returns the Problems of a broker section key ("nats"),
// starting with those of its cloudevents block ce.
func ProblemsOf(key string, ce *cloudevent.Config) *Problems {
	p := NewProblems(key)
	p.Add(ce.Validate(key + ".cloudevents"))
	return p
}

// Bad adds a problem of the field that format starts with ("urls[%d]: ...").
func (p *Problems) Bad(format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf(p.key+"."+format, args...))
}

// Add adds err, already prefixed, unless it is nil.
func (p *Problems) Add(err error) {
	if err != nil {
		p.errs = append(p.errs, err)
	}
}

// Secret checks that at most one of a secret's three sources is set: the
// field name itself, name_file and name_env ("password").
func (p *Problems) Secret(name, value, file, env string) {
	if secret.Count(value, file, env) > 1 {
		p.Bad("%s: set at most one of %s, %s_file, %s_env", name, name, name, name)
	}
}

// User checks that a user, field name ("username"), goes with exactly one
// of the three sources of its password, and no password without a user.
func (p *Problems) User(name, user, password, file, env string) {
	if (user != "") != (secret.Count(password, file, env) == 1) {
		p.Bad("%s: %s and a password go together", name, name)
	}
}

// TLS checks the section's tls block: its fields are used only when it is
// enabled, and a client certificate goes with its key.
func (p *Problems) TLS(t tlsfiles.Settings) {
	if !t.Enabled && (t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.InsecureSkipVerify || t.ServerName != "") {
		p.Bad("tls.enabled: false, but other tls fields are set; set tls.enabled: true to use them")
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		p.Bad("tls: cert_file %q and key_file %q must be set together", t.CertFile, t.KeyFile)
	}
}

// Err is every problem added, joined; nil when there is none.
func (p *Problems) Err() error { return errors.Join(p.errs...) }
