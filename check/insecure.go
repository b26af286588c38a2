package check

import (
	"fmt"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/sink"
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
