package webhook

import (
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/event/cloudevent"
	"github.com/outbox-relay/outbox-relay/internal/redact"
	"github.com/outbox-relay/outbox-relay/retry"
)

// Body modes.
const (
	// BodyRaw sends the payload column's bytes exactly as stored.
	BodyRaw = "raw"
	// BodyEnvelope wraps the payload in a JSON object with the event's
	// metadata; see EndpointConfig.Body.
	BodyEnvelope = "envelope"
)

// minSecretBytes is the shortest decoded secret accepted (Standard Webhooks
// secrets are 24 to 64 random bytes).
const minSecretBytes = 24

// EndpointConfig configures one webhook endpoint. Each endpoint is its own
// sink with its own pipeline and checkpoint.
//
// Zero values mean "use the default": each is declared beside its field
// (config.SetDefaults) and applied by WithDefaults, which NewEndpoint and
// Validate both call.
type EndpointConfig struct {
	// Name identifies the endpoint in logs, metrics and dead letters.
	// Required.
	Name string `yaml:"name" example:"billing"`
	// URL receives the POST requests; http or https. Required. Redirects are
	// not followed, so it must be the final address.
	URL string `yaml:"url" example:"https://billing.example.com/hooks/outbox"`
	// Secrets sign every request (Standard Webhooks v1): each is "whsec_"
	// followed by the base64 of at least 24 random bytes. Several secrets
	// mean key rotation: every request carries one signature per secret.
	// Default none: requests are sent unsigned (a warning is logged).
	// The values must reach the config from the environment or a file; they
	// are never logged, nor quoted by a configuration error (the tag
	// secret:"true" tells package config so).
	Secrets []string `yaml:"secrets" secret:"true" example:"['${BILLING_WEBHOOK_SECRET}']"`
	// Filter selects the events delivered to this endpoint; the others are
	// acknowledged without a request. Default: every event.
	Filter Filter `yaml:"filter"`
	// Timeout bounds one attempt: connect, send, and read the response.
	// Default 10s.
	Timeout time.Duration `yaml:"timeout" default:"10s"`
	// MaxConcurrency caps the requests in flight to this endpoint (and the
	// TCP connections to it). Default 16.
	MaxConcurrency int `yaml:"max_concurrency" default:"16"`
	// RateLimit caps the attempts per second (retries included). Default 0:
	// unlimited.
	RateLimit float64 `yaml:"rate_limit"`
	// Headers are extra static headers sent with every request (for example
	// an Authorization header). They cannot replace the protocol's headers
	// (Content-Type, User-Agent, webhook-*). Their values are never logged.
	// Default none.
	Headers map[string]string `yaml:"headers" secret:"true"`
	// Body is "raw" (the payload bytes exactly as stored) or "envelope"
	// ({"id","type","aggregate_type","aggregate_id","timestamp","data"},
	// where data is the payload's JSON as stored, or a JSON string when the
	// payload is not valid JSON, and timestamp is the commit time in RFC
	// 3339). Default "raw".
	Body string `yaml:"body" default:"raw"`
	// CloudEvents sends each event as a CloudEvent (HTTP protocol
	// binding): mode binary sends its attributes as ce-* headers
	// (percent-encoded) and the payload as the body with datacontenttype as
	// Content-Type; structured sends one application/cloudevents+json
	// document as the body. The Standard Webhooks headers and signature
	// (webhook-id, webhook-timestamp and the body) are kept; the ce-*
	// headers are not signed, the structured body is. Default off. Not
	// with body: envelope.
	CloudEvents cloudevent.Config `yaml:"cloudevents"`
	// Retry bounds the retries of one event; see RetryConfig.
	Retry RetryConfig `yaml:"retry"`
	// Egress restricts the addresses the endpoint connects to; see Egress.
	// Default: no restriction (deny_private: false) for an endpoint in the
	// configuration, private addresses refused for one from data.
	Egress Egress `yaml:"egress"`

	// FromData marks an endpoint whose url comes from data (a table, an
	// API) rather than from the operator's configuration: the egress policy
	// then refuses private addresses whatever Egress.DenyPrivate says, and
	// only Egress.Allow makes exceptions. It is not part of the YAML
	// configuration.
	FromData bool `yaml:"-"`
	// Resolver, if set, resolves the url's host for every connection
	// (tests; default net.DefaultResolver). It is not part of the YAML
	// configuration.
	Resolver Resolver `yaml:"-"`
	// Observer, if set, is told about every attempt and outcome (for
	// metrics). It is not part of the YAML configuration.
	Observer Observer `yaml:"-"`
	// Attempts, if set, is told about every attempt, for the attempts
	// record (package attempts): each HTTP attempt and each one refused
	// before it was sent (egress policy, a request that cannot be made),
	// as an attempts.Attempt of endpoint Name in sink Sink, of Tenant.
	// Nil (the default) costs nothing. Not part of the YAML configuration.
	Attempts attempts.Recorder `yaml:"-"`
	// Sink is the endpoint's webhook sink, and Tenant its tenant (the
	// tenant column of its endpoints-table row): what the attempts record
	// says of it. Not part of the YAML configuration.
	Sink   string `yaml:"-"`
	Tenant string `yaml:"-"`
	// Slots, if set, are request slots shared with other endpoints (a
	// gateway replica's --max-requests): an attempt holds one while its
	// request is in flight, never while it waits to retry. Not part of the
	// YAML configuration.
	Slots chan struct{} `yaml:"-"`
	// Policy is the relay's retry policy (retry.FromConfig), passed down:
	// the endpoint's retry.initial_backoff and max_backoff replace its
	// bounds, and its Probe is how often an unreachable endpoint is probed.
	// Zero fields: retry's defaults. Not part of the YAML configuration.
	Policy retry.Policy `yaml:"-"`
}

// Filter selects events by glob patterns (path.Match syntax: *, ?, [a-z])
// and by header values. An event is delivered when its type matches one of
// EventTypes, its aggregate type matches one of AggregateTypes (an empty
// list matches all) and, for every key of Headers, it has a header of that
// key with exactly that value.
type Filter struct {
	// EventTypes are patterns on the event type, e.g. "order.*".
	// Default: all.
	EventTypes []string `yaml:"event_types" example:"['order.*']"`
	// AggregateTypes are patterns on the aggregate type, e.g. "order".
	// Default: all.
	AggregateTypes []string `yaml:"aggregate_types" example:"[order]"`
	// Headers are exact values the event's headers (the outbox columns
	// configured as headers) must have, e.g. {tenant: acme}: an event
	// lacking the header (its column NULL) or with another value is not
	// delivered. Keys and values are case-sensitive. Default: none.
	Headers map[string]string `yaml:"headers" example:"{tenant: acme}"`
}

// RetryConfig bounds the retries of one event. An event is retried on
// network errors, timeouts, 408, 429 and 5xx until it is delivered or either
// bound is reached; it then fails permanently and goes to the dead-letter
// store. Waits grow exponentially from InitialBackoff, capped at MaxBackoff,
// each drawn from [half, all] of its ceiling (the relay's retry policy); a
// Retry-After on 429 or 503 replaces the wait, capped at MaxBackoff too.
type RetryConfig struct {
	// MaxAttempts is the most attempts of one event, the first included.
	// Default 30 (1.7 to 3.5 hours of retrying, 2.6 on average, with the
	// default backoff).
	MaxAttempts int `yaml:"max_attempts" default:"30"`
	// MaxAge is the longest time from an event's first attempt to its last.
	// Default 24h.
	MaxAge time.Duration `yaml:"max_age" default:"24h"`
	// InitialBackoff caps the first wait. Default 1s.
	InitialBackoff time.Duration `yaml:"initial_backoff" default:"1s"`
	// MaxBackoff caps every wait, Retry-After included. Default 10m.
	MaxBackoff time.Duration `yaml:"max_backoff" default:"10m"`
}

// WithDefaults returns c with every zero field set to its default.
func (c EndpointConfig) WithDefaults() EndpointConfig {
	config.SetDefaults(&c)
	c.CloudEvents.Defaults()
	return c
}

// reservedHeaders are set by the sink on every request.
var reservedHeaders = map[string]bool{
	"Content-Type":      true,
	"Content-Length":    true,
	"Host":              true,
	"User-Agent":        true,
	"Webhook-Id":        true,
	"Webhook-Timestamp": true,
	"Webhook-Signature": true,
	"Traceparent":       true, // the row's trace context (send.go)
	"Tracestate":        true,
	// and the metadata headers (send.go)
	"Webhook-Event-Type":     true,
	"Webhook-Aggregate-Type": true,
	"Webhook-Aggregate-Id":   true,
	"Webhook-Replay":         true, // a replayed event's job (send.go)
	"Webhook-Gtid":           true,
	"Webhook-Binlog-File":    true,
	"Webhook-Binlog-Pos":     true,
	"Webhook-Table":          true,
}

// Validate checks the configuration with its defaults applied. Each error
// names the field and the bad value (never a secret's value) and says how to
// fix it.
func (c EndpointConfig) Validate() error { return c.WithDefaults().validate() }

// validate is Validate of a c whose defaults are applied: what a row of the
// endpoints table, decoded from its table's defaults, needs (no reflection
// a row).
func (c EndpointConfig) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("webhook endpoint %q: "+format, append([]any{c.Name}, args...)...))
	}
	if c.Name == "" {
		bad("name is empty; give every endpoint a unique name")
	}
	policy, err := c.Egress.compile(c.FromData, c.Resolver)
	if err != nil {
		bad("%v", err)
	}
	if !c.Egress.DenyPrivate && !c.FromData && len(c.Egress.Allow) > 0 {
		bad("egress.allow is set but egress.deny_private is false, so it allows nothing more; set egress.deny_private: true or remove egress.allow")
	}
	if c.URL == "" {
		bad("url is empty; set it to the endpoint's https address")
	} else if u, err := url.Parse(c.URL); err != nil {
		bad("url %q does not parse: %s", redact.URL(c.URL), urlError(c.URL, err))
	} else if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		bad("url %q is not an absolute http or https address; write it as https://host/path", redact.URL(c.URL))
	} else if err := policy.checkHost(u.Hostname()); err != nil {
		bad("url %q: %w", redact.URL(c.URL), err) // an *EgressError
	}
	for i, s := range c.Secrets {
		if _, err := parseSecret(s); err != nil {
			bad("secrets[%d]: %v", i, err)
		}
	}
	for i, p := range c.Filter.EventTypes {
		if _, err := path.Match(p, ""); err != nil {
			bad("filter.event_types[%d] %q is not a valid glob pattern (path.Match syntax): %v", i, p, err)
		}
	}
	for i, p := range c.Filter.AggregateTypes {
		if _, err := path.Match(p, ""); err != nil {
			bad("filter.aggregate_types[%d] %q is not a valid glob pattern (path.Match syntax): %v", i, p, err)
		}
	}
	for k := range c.Filter.Headers {
		if k == "" {
			bad("filter.headers: a key is empty; use the name of an outbox column configured as a header (tables[].headers)")
		}
	}
	if c.Timeout < 0 {
		bad("timeout %s is negative; leave it out for the default %s", c.Timeout, config.DefaultOf(c, "timeout"))
	}
	if c.MaxConcurrency < 0 {
		bad("max_concurrency %d is negative; leave it out for the default %s", c.MaxConcurrency, config.DefaultOf(c, "max_concurrency"))
	}
	if c.RateLimit < 0 {
		bad("rate_limit %g is negative; use 0 for unlimited", c.RateLimit)
	}
	for k, v := range c.Headers {
		switch {
		case !validHeaderName(k):
			bad("headers: %q is not a valid HTTP header name", k)
		case reservedHeaders[http.CanonicalHeaderKey(k)]:
			bad("headers: %q is set by the sink itself; remove it", k)
		case strings.ContainsAny(v, "\r\n\x00"):
			bad("headers: the value of %q contains a line break or NUL; remove it", k)
		}
	}
	if c.Body != BodyRaw && c.Body != BodyEnvelope {
		bad("body %q is not %q or %q", c.Body, BodyRaw, BodyEnvelope)
	}
	if err := c.CloudEvents.Validate("cloudevents"); err != nil {
		bad("%v", err)
	} else if c.CloudEvents.On() && c.Body == BodyEnvelope {
		bad("cloudevents: set either body: envelope or cloudevents, not both")
	}
	r := c.Retry
	if r.MaxAttempts < 0 {
		bad("retry.max_attempts %d is negative; it counts every attempt, the first included (default %s)", r.MaxAttempts, config.DefaultOf(c, "retry.max_attempts"))
	}
	if r.MaxAge < 0 {
		bad("retry.max_age %s is negative; leave it out for the default %s", r.MaxAge, config.DefaultOf(c, "retry.max_age"))
	}
	if r.InitialBackoff < 0 {
		bad("retry.initial_backoff %s is negative; leave it out for the default %s", r.InitialBackoff, config.DefaultOf(c, "retry.initial_backoff"))
	}
	if r.MaxBackoff < 0 {
		bad("retry.max_backoff %s is negative; leave it out for the default %s", r.MaxBackoff, config.DefaultOf(c, "retry.max_backoff"))
	} else if r.MaxBackoff < r.InitialBackoff {
		bad("retry.max_backoff %s is less than retry.initial_backoff %s; raise max_backoff", r.MaxBackoff, r.InitialBackoff)
	}
	return errors.Join(errs...)
}

// LogValue renders the configuration without secrets or header values.
func (c EndpointConfig) LogValue() slog.Value {
	hdrs := make([]string, 0, len(c.Headers))
	for k := range c.Headers {
		hdrs = append(hdrs, k)
	}
	return slog.GroupValue(
		slog.String("name", c.Name),
		slog.String("url", redact.URL(c.URL)),
		slog.Int("secrets", len(c.Secrets)),
		slog.Any("filter", c.Filter),
		slog.Duration("timeout", c.Timeout),
		slog.Int("max_concurrency", c.MaxConcurrency),
		slog.Float64("rate_limit", c.RateLimit),
		slog.Any("header_names", hdrs),
		slog.String("body", c.Body),
		slog.Any("retry", c.Retry),
		slog.Bool("egress_deny_private", c.Egress.DenyPrivate || c.FromData),
		slog.Any("egress_allow", c.Egress.Allow),
	)
}

// urlError is why raw does not parse, without raw or any part of it:
// url.Parse quotes the whole url, and its inner errors the part they stumble
// on, which may be a piece of a password ("invalid port \":p\" after host").
func urlError(raw string, err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := quoted.ReplaceAllString(err.Error(), "")
	return strings.Join(strings.Fields(redact.NewReplacer(redact.URLSecrets(raw)...).Replace(msg)), " ")
}

var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// secretValues returns the configured values that must never be recorded:
// header values, the url's userinfo and query values, the signing secrets.
func (c EndpointConfig) secretValues() []string {
	var out []string
	for _, v := range c.Headers {
		out = append(out, redact.HeaderSecrets(v)...)
	}
	out = append(out, redact.URLSecrets(c.URL)...)
	for _, s := range c.Secrets {
		out = append(out, s, strings.TrimPrefix(s, "whsec_"))
	}
	return out
}

// parseSecret decodes a Standard Webhooks secret: "whsec_" + base64.
// Errors never contain the secret.
func parseSecret(s string) ([]byte, error) {
	const prefix = "whsec_"
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return nil, fmt.Errorf(`secret does not start with %q; write it as "whsec_" followed by the base64 of the key`, prefix)
	}
	key, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		// Accept unpadded base64 too; report the padded decoder's error.
		var err2 error
		if key, err2 = base64.RawStdEncoding.DecodeString(rest); err2 != nil {
			return nil, fmt.Errorf("secret after %q is not valid base64: %v", prefix, err)
		}
	}
	if len(key) < minSecretBytes {
		return nil, fmt.Errorf("secret decodes to %d bytes, fewer than %d; generate one with: echo whsec_$(head -c 32 /dev/urandom | base64)", len(key), minSecretBytes)
	}
	return key, nil
}

// validHeaderName reports whether s is an HTTP token (RFC 9110 5.6.2).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// Match reports whether f selects ev: its type, its aggregate type and its
// headers.
func (f Filter) Match(ev *event.Event) bool {
	if !matchAny(f.EventTypes, ev.Type) || !matchAny(f.AggregateTypes, ev.AggregateType) {
		return false
	}
	for k, want := range f.Headers {
		if !hasHeader(ev.Headers, k, want) {
			return false
		}
	}
	return true
}

func hasHeader(hs []event.Header, key, value string) bool {
	for _, h := range hs {
		if h.Key == key && h.Value == value {
			return true
		}
	}
	return false
}

func matchAny(patterns []string, s string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if !IsGlob(p) {
			if p == s {
				return true
			}
			continue
		}
		if ok, _ := path.Match(p, s); ok {
			return true
		}
	}
	return false
}

// IsGlob reports whether a filter pattern has any of path.Match's special
// characters (*, ?, [ or \): one without matches exactly its own text.
func IsGlob(pattern string) bool { return strings.ContainsAny(pattern, `*?[\`) }

// CredentialHeader reports whether a header's name says it carries a
// credential (Authorization, Cookie, or a name holding auth, token,
// secret, key, password, signature or session).
func CredentialHeader(name string) bool {
	n := strings.ToLower(name)
	if n == "authorization" || n == "proxy-authorization" || n == "cookie" {
		return true
	}
	for _, w := range []string{"auth", "token", "secret", "key", "password", "signature", "session"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}
