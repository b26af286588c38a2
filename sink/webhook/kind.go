package webhook

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/redact"
	"github.com/outbox-relay/outbox-relay/sink"
)

func init() {
	sink.Register(sink.Kind{
		Type:        "webhook",
		Config:      func() config.SinkConfig { return new(SinkConfig) },
		Insecure:    func(sc config.SinkConfig) []sink.Warning { return sc.(*SinkConfig).insecure() },
		FanOut:      fanOut,
		CheckSource: checkSource,
		SourceTables: func(sc config.SinkConfig) []string {
			if t := sc.(*SinkConfig).EndpointsTable; t != nil {
				return []string{t.Table}
			}
			return nil
		},
		Status: status,
	})
}

// SinkConfig is a webhook sink's section: a fan-out gateway to many
// endpoints (package gateway). The sink reads one binlog stream; each
// endpoint is delivered by a pipeline of its own, with its own checkpoint
// named "<sink name>/<endpoint name>", so a dead endpoint only falls behind
// itself. The relay runs it as a gateway (it is a config.FanOut): the kind
// has no New.
type SinkConfig struct {
	// Endpoints are the static endpoints (EndpointConfig has every field
	// and default). A webhook sink needs endpoints, an endpoints_table, or
	// both. Default none.
	Endpoints []EndpointConfig `yaml:"endpoints"`
	// EndpointsTable takes endpoints from the rows of a table in the source
	// database (deploy/outbox_endpoints.sql): table, tenant_header,
	// secrets_key (from the environment: ${VAR}) and the defaults of every
	// row's endpoint. See TableConfig. Default none.
	EndpointsTable *TableConfig `yaml:"endpoints_table"`
	// Gateway tunes how the sink fans one binlog stream out to its
	// endpoints (package gateway).
	Gateway config.Gateway `yaml:"gateway"`
}

var _ config.FanOut = (*SinkConfig)(nil)

// Section returns the webhook section of s, or nil when s is not a webhook
// sink.
func Section(s config.Sink) *SinkConfig {
	c, _ := s.Config.(*SinkConfig)
	return c
}

// Defaults implements config.SinkConfig: the gateway's defaults (each
// endpoint's are applied when it is built).
func (c *SinkConfig) Defaults() { config.SetDefaults(&c.Gateway) }

// Validate implements config.SinkConfig.
func (c *SinkConfig) Validate() error {
	if len(c.Endpoints) == 0 && c.EndpointsTable == nil {
		return errors.New("webhook: a webhook sink needs endpoints (a list in the file), an endpoints_table (rows in the database), or both")
	}
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("webhook."+format, a...)) }
	if et := c.EndpointsTable; et != nil {
		if err := et.Validate(); err != nil {
			for _, e := range unjoin(err) {
				bad("%v", e)
			}
		}
	}
	seen := map[string]bool{}
	for j, ep := range c.Endpoints {
		if err := ep.Validate(); err != nil {
			bad("endpoints[%d]: %v", j, err)
		}
		if seen[ep.Name] {
			bad("endpoints[%d].name: %q is used twice; it keys the endpoint's checkpoint", j, ep.Name)
		}
		if strings.ContainsAny(ep.Name, "/ \t") {
			bad("endpoints[%d].name: %q must have no '/' or spaces", j, ep.Name)
		}
		seen[ep.Name] = true
	}
	if err := c.Gateway.Validate(); err != nil {
		bad("%v", err)
	}
	return errors.Join(errs...)
}

// StaticEndpoints implements config.FanOut.
func (c *SinkConfig) StaticEndpoints() []string {
	out := make([]string, 0, len(c.Endpoints))
	for _, ep := range c.Endpoints {
		out = append(out, ep.Name)
	}
	return out
}

// GatewayConfig implements config.FanOut.
func (c *SinkConfig) GatewayConfig() config.Gateway { return c.Gateway }

// insecure warns of each static endpoint whose http:// url carries
// credentials (an Authorization or other credential header, a userinfo).
func (c *SinkConfig) insecure() []sink.Warning {
	var out []sink.Warning
	for j, ep := range c.Endpoints {
		u, err := url.Parse(ep.URL)
		if err != nil || !strings.EqualFold(u.Scheme, "http") {
			continue
		}
		var creds []string
		for name := range ep.Headers {
			if CredentialHeader(name) {
				creds = append(creds, "header "+http.CanonicalHeaderKey(name))
			}
		}
		if u.User != nil {
			creds = append(creds, "credentials in the url")
		}
		if len(creds) > 0 {
			out = append(out, sink.Warning{Path: fmt.Sprintf("webhook.endpoints[%d]", j), Name: ep.Name,
				Detail: fmt.Sprintf("url %s is http://, so the %s cross the network in clear text", redact.URL(ep.URL), strings.Join(creds, ", ")),
				Fix:    "use an https:// url"})
		}
	}
	return out
}

// unjoin lists the errors joined in err (errors.Join), or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
