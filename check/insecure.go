package check

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/redact"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

// insecureResults reports the settings that weaken transport security, one
// WARN each: certificate verification turned off (the source, and each
// sink as its kind says: sink.Kind.Insecure), credentials sent in clear
// text (an http:// webhook url with credential headers; SASL PLAIN without
// TLS; a password or token without TLS). It reads only the config. With
// none, one PASS.
func insecureResults(cfg *config.Config) []Result {
	var out []Result
	warn := func(detail, fix string) {
		out = append(out, Result{Name: NameInsecureSettings, Status: Warn, Detail: detail, Fix: fix})
	}
	if t := cfg.Source.TLS; t.Enabled && t.InsecureSkipVerify {
		warn("source.tls.insecure_skip_verify is true: the source server's certificate is not verified, so anyone on the path can read the binlog and the password",
			"set source.tls.ca_file to the CA that signs the server's certificate and remove insecure_skip_verify")
	}
	for i, s := range cfg.Sinks {
		k, ok := sink.KindOf(s.Type)
		if !ok || k.Insecure == nil || s.Config == nil {
			continue
		}
		for _, w := range k.Insecure(s.Config) {
			if w.Path == "" {
				warn(fmt.Sprintf("sinks[%d] (%s): %s", i, s.Name, w.Detail), w.Fix)
				continue
			}
			warn(fmt.Sprintf("sinks[%d].%s (%s/%s): %s", i, w.Path, s.Name, w.Name, w.Detail), w.Fix)
		}
	}
	if len(out) == 0 {
		out = append(out, Result{Name: NameInsecureSettings, Detail: insecurePass})
	}
	return out
}

const insecurePass = "no certificate check is turned off and no credential is sent in clear text"

// tableInsecureResults reports what weakens the security of a webhook
// sink's endpoints table, read as rows: a row whose http:// url holds
// credentials, and signing secrets kept plain or as enc:v1 (not bound to
// their row), one WARN each, naming the rows, never a secret. (A credential
// header in endpoints_table.defaults is refused by the config.)
func tableInsecureResults(sink string, tc webhook.TableConfig, rows []webhook.TableEndpoint) []Result {
	var out []Result
	var plain, v1 []string
	for _, r := range rows {
		if u, err := url.Parse(r.Config.URL); err == nil && strings.EqualFold(u.Scheme, "http") && u.User != nil {
			out = append(out, Result{Name: NameInsecureSettings, Status: Warn,
				Detail: fmt.Sprintf("sink %s: endpoints table %s, row %q: url %s is http://, so the credentials in the url cross the network in clear text", sink, tc.Table, r.ID, redact.URL(r.Config.URL)),
				Fix:    "use an https:// url in the row"})
		}
		if r.PlainSecrets {
			plain = append(plain, r.ID)
		}
		if r.V1Secrets {
			v1 = append(v1, r.ID)
		}
	}
	reencrypt := fmt.Sprintf("`outbox-relay endpoints encrypt-secret --table %s --id ID --url URL`", tc.Table)
	if len(plain) > 0 {
		out = append(out, Result{Name: NameInsecureSettings, Status: Warn,
			Detail: fmt.Sprintf("sink %s: endpoints table %s holds plain signing secrets (rows %s): anyone who can read the table can sign as the relay", sink, tc.Table, strings.Join(plain, ", ")),
			Fix:    "encrypt each with " + reencrypt + ", store the enc:v2 value it prints, and set endpoints_table.secrets_key"})
	}
	if len(v1) > 0 {
		out = append(out, Result{Name: NameInsecureSettings, Status: Warn,
			Detail: fmt.Sprintf("sink %s: endpoints table %s holds enc:v1 secrets (rows %s), which are not bound to their row: copied into another row, they decrypt there and sign its requests", sink, tc.Table, strings.Join(v1, ", ")),
			Fix:    "pipe each through " + reencrypt + " (it takes the enc:v1 value) and store the enc:v2 value it prints"})
	}
	return out
}

// withInsecure returns rs (the results read from the server) and the
// config's insecure_settings results, whose lone PASS is dropped when rs
// already warns of an insecure setting.
func withInsecure(rs, config []Result) []Result {
	warned := false
	for _, r := range rs {
		warned = warned || r.Name == NameInsecureSettings && r.Status == Warn
	}
	for _, r := range config {
		if warned && r.Name == NameInsecureSettings && r.Status == Pass {
			continue
		}
		rs = append(rs, r)
	}
	return rs
}
