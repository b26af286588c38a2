package check

import (
	"bytes"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/config"
)

// parsed is the configuration of sinks (YAML), decoded by each kind's
// section through the registry.
func parsed(t *testing.T, sinks string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte("tables: [{name: shop.outbox}]\nsinks:\n" + sinks))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A detail quotes the server (a table name, a variable's value): its
// control characters are shown escaped, never sent to the terminal.
func TestPrintEscapesControlCharacters(t *testing.T) {
	var b bytes.Buffer
	PrintResult(&b, Result{Name: NameTables, Status: Fail, Detail: "table \x1b[2Jshop.outbox\x07 is missing", Fix: "CREATE TABLE \x1b]0;x\x07"})
	out := b.String()
	if strings.ContainsAny(out, "\x1b\x07") || !strings.Contains(out, `table \x1b[2Jshop.outbox\a is missing`) {
		t.Fatalf("PrintResult wrote %q", out)
	}
}

func TestInsecureResults(t *testing.T) {
	cfg := parsed(t, `
  - name: h
    type: webhook
    webhook:
      endpoints:
        - {name: tls, url: "https://h.example/", headers: {Authorization: Bearer x}}
        - {name: plain-no-creds, url: "http://h.example/", headers: {X-Tenant: a}}
        - {name: userinfo, url: "http://u:p@h.example/"}
        - {name: apikey, url: "http://h.example/", headers: {x-api-key: k}}
`)
	rs := insecureResults(cfg)
	var details []string
	for _, r := range rs {
		if r.Status == Warn {
			details = append(details, r.Detail)
		}
	}
	got := strings.Join(details, "\n")
	if len(details) != 2 || !strings.Contains(got, "(h/userinfo)") || !strings.Contains(got, "(h/apikey)") || strings.Contains(got, "u:p@") {
		t.Fatalf("warnings:\n%s", got)
	}
	streams := parsed(t, `
  - {name: js, type: nats, nats: {urls: ["nats://127.0.0.1:4222"], user: u, password: p}}
  - {name: rd, type: redis, redis: {addr: "127.0.0.1:6380", tls: {enabled: true, insecure_skip_verify: true}}}
  - {name: mq, type: rabbitmq, rabbitmq: {addr: "127.0.0.1:5671", username: u, password: p, tls: {enabled: true}}}
  - {name: rd2, type: redis, redis: {addr: "127.0.0.1:6379"}}
`)
	details = nil
	for _, r := range insecureResults(streams) {
		if r.Status == Warn {
			details = append(details, r.Detail+" / "+r.Fix)
		}
	}
	got = strings.Join(details, "\n")
	if len(details) != 2 || !strings.Contains(got, "sinks[0] (js): a nats password or token without nats.tls") ||
		!strings.Contains(got, "sinks[1] (rd): redis.tls.insecure_skip_verify is true") || strings.Contains(got, "(mq)") {
		t.Fatalf("warnings of the stream sinks:\n%s", got)
	}
	if rs := insecureResults(&config.Config{}); len(rs) != 1 || rs[0].Status != Pass {
		t.Fatalf("an empty config: %+v", rs)
	}
}
