package nats

import (
	"errors"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/tlsfiles"
	"github.com/outbox-relay/outbox-relay/sink/internal/route"
	"github.com/outbox-relay/outbox-relay/sink/internal/secret"
	"github.com/outbox-relay/outbox-relay/sink/internal/section"

	"github.com/outbox-relay/outbox-relay/event/cloudevent"
)

// Config configures a NATS JetStream sink: the sink's `nats:` section. Load
// applies its defaults (declared beside each field) and validates it; New
// does both for a Config written in Go.
type Config struct {
	// URLs are the servers, "nats://host:port" (tls:// for TLS). Required.
	URLs []string `yaml:"urls" example:"[nats://127.0.0.1:4222]"`
	// Subject is a fixed subject or a template over the event's fields, as
	// the Kafka sink's topic. Default "outbox.event.{{.AggregateType}}":
	// dot-separated tokens, so consumers subscribe to outbox.event.> or
	// outbox.event.order.
	Subject string `yaml:"subject" default:"outbox.event.{{.AggregateType}}"`
	// Stream is the JetStream stream that captures the subjects. Connect
	// checks it exists (or creates it, see create_stream). Default "OUTBOX".
	Stream string `yaml:"stream" default:"OUTBOX"`
	// CreateStream creates the stream when it is missing. Default off.
	CreateStream CreateStreamConfig `yaml:"create_stream"`
	// User and Password (or PasswordFile, PasswordEnv) authenticate with a
	// user and password. Default none.
	User         string `yaml:"user"`
	Password     string `yaml:"password" secret:"true"`
	PasswordFile string `yaml:"password_file"`
	PasswordEnv  string `yaml:"password_env"`
	// Token (or TokenFile, TokenEnv) authenticates with a token. Default none.
	Token     string `yaml:"token" secret:"true"`
	TokenFile string `yaml:"token_file"`
	TokenEnv  string `yaml:"token_env"`
	// CredsFile is a .creds file (user JWT and NKey seed). Default none.
	CredsFile string `yaml:"creds_file"`
	// NKeyFile is a file holding an NKey seed. Default none.
	NKeyFile string `yaml:"nkey_file"`
	// TLS configures TLS to the servers. Default off.
	TLS TLSConfig `yaml:"tls"`
	// Name is the client name the servers show. Default "outbox-relay".
	Name string `yaml:"name" default:"outbox-relay"`
	// Timeout bounds a dial and a JetStream API request. Default 10s.
	Timeout time.Duration `yaml:"timeout" default:"10s"`
	// AckTimeout is how long a publish waits for its PubAck before it fails
	// (retriably). Default 10s.
	AckTimeout time.Duration `yaml:"ack_timeout" default:"10s"`
	// MaxPending is the most publishes awaiting their PubAck. Default 1000.
	MaxPending int `yaml:"max_pending" default:"1000"`
	// ReconnectWait is the wait between reconnect attempts to a server.
	// Default 500ms.
	ReconnectWait time.Duration `yaml:"reconnect_wait" default:"500ms"`
	// CloudEvents sends each event as a CloudEvent (NATS protocol
	// binding): mode binary adds its attributes as ce-* headers, with
	// datacontenttype as content-type, the payload as the data; structured
	// sends one application/cloudevents+json document as the data. The
	// sink's own headers are kept. Default off.
	CloudEvents cloudevent.Config `yaml:"cloudevents"`
}

// CreateStreamConfig is the stream created when it is missing.
type CreateStreamConfig struct {
	// Enabled creates the stream on Connect when missing. Default false.
	Enabled bool `yaml:"enabled"`
	// Subjects the stream captures. Default ["outbox.event.>"].
	Subjects []string `yaml:"subjects" default:"[outbox.event.>]"`
	// Retention is limits, interest or workqueue. Default limits.
	Retention string `yaml:"retention" default:"limits"`
	// Storage is file or memory. Default file.
	Storage string `yaml:"storage" default:"file"`
	// Replicas of the stream (1 to 5). Default 1: set 3 on a cluster.
	Replicas int `yaml:"replicas" default:"1"`
	// DuplicateWindow is how long JetStream remembers a Nats-Msg-Id to drop
	// a re-sent event. Default 2m: at least the longest relay restart.
	DuplicateWindow time.Duration `yaml:"duplicate_window" default:"2m"`
	// MaxMsgSize is the largest message the stream takes; 0 is the server's
	// limit. Default 0.
	MaxMsgSize int32 `yaml:"max_msg_size"`
}

// TLSConfig configures TLS to the servers.
type TLSConfig = tlsfiles.Settings

// LogValue keeps the secrets out of logs.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(slog.Any("urls", c.URLs), slog.String("stream", c.Stream), slog.String("subject", c.Subject),
		slog.String("user", c.User), slog.String("password", "[redacted]"), slog.String("token", "[redacted]"))
}

var retentions = []string{"limits", "interest", "workqueue"}

// Defaults implements config.SinkConfig: every zero field gets the
// default declared beside it.
func (c *Config) Defaults() { section.Defaults(c, &c.CloudEvents) }

// Validate checks a configuration with its defaults applied; each problem
// names the field and the bad value.
func (c *Config) Validate() error {
	p := section.ProblemsOf("nats", &c.CloudEvents)
	bad := p.Bad
	if len(c.URLs) == 0 {
		bad("urls: at least one server is required, e.g. [\"nats://localhost:4222\"]")
	}
	for i, u := range c.URLs {
		p, err := url.Parse(u)
		switch {
		case err != nil || p.Host == "":
			bad("urls[%d]: not a URL like nats://host:4222", i)
		case p.User != nil:
			bad("urls[%d]: holds credentials; set nats.user and nats.password (or token) instead, so they are never logged", i)
		case !slices.Contains([]string{"nats", "tls"}, p.Scheme):
			bad("urls[%d]: scheme %q is not nats or tls", i, p.Scheme)
		}
	}
	if t, err := route.Parse("nats.subject", c.Subject); err != nil {
		p.Add(err)
	} else if s, ok := t.Fixed(); ok {
		if err := validSubject(s); err != nil {
			bad("subject: %q: %v", s, err)
		}
	}
	if c.Stream == "" || strings.ContainsAny(c.Stream, ". *>\t\r\n/\\") {
		bad("stream: %q is not a stream name (no spaces, dots, '*', '>', slashes)", c.Stream)
	}
	cs := c.CreateStream
	if !slices.Contains(retentions, cs.Retention) {
		bad("create_stream.retention: %q is not one of limits, interest, workqueue", cs.Retention)
	}
	if cs.Storage != "file" && cs.Storage != "memory" {
		bad("create_stream.storage: %q is not file or memory", cs.Storage)
	}
	if cs.Replicas < 1 || cs.Replicas > 5 {
		bad("create_stream.replicas: %d is not between 1 and 5", cs.Replicas)
	}
	if cs.DuplicateWindow < 0 {
		bad("create_stream.duplicate_window: %s is negative", cs.DuplicateWindow)
	}
	if cs.MaxMsgSize < 0 {
		bad("create_stream.max_msg_size: %d is negative", cs.MaxMsgSize)
	}
	p.Secret("password", c.Password, c.PasswordFile, c.PasswordEnv)
	p.Secret("token", c.Token, c.TokenFile, c.TokenEnv)
	p.User("user", c.User, c.Password, c.PasswordFile, c.PasswordEnv)
	n := 0
	for _, set := range []bool{c.User != "", secret.Count(c.Token, c.TokenFile, c.TokenEnv) > 0, c.CredsFile != "", c.NKeyFile != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		bad("user, token, creds_file, nkey_file: set at most one way to authenticate")
	}
	if c.Timeout < 0 || c.AckTimeout < 0 || c.ReconnectWait < 0 {
		bad("timeout, ack_timeout, reconnect_wait: negative")
	}
	if c.MaxPending < 1 {
		bad("max_pending: %d is less than 1", c.MaxPending)
	}
	p.TLS(c.TLS)
	return p.Err()
}

// validSubject applies NATS's rules for a subject to publish to.
func validSubject(s string) error {
	if s == "" {
		return errors.New("a subject cannot be empty")
	}
	for _, tok := range strings.Split(s, ".") {
		switch {
		case tok == "":
			return errors.New("a subject has no empty tokens (no leading, trailing or double dots)")
		case tok == "*" || tok == ">":
			return errors.New("a subject to publish to has no wildcards")
		case strings.ContainsAny(tok, " \t\r\n"):
			return errors.New("a subject has no white space")
		}
	}
	return nil
}
