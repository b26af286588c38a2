package check

import (
	"bytes"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/tlsfiles"
	natssink "github.com/outbox-relay/outbox-relay/sink/nats"
	"github.com/outbox-relay/outbox-relay/sink/rabbitmq"
	redissink "github.com/outbox-relay/outbox-relay/sink/redis"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

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
	cfg := &config.Config{Sinks: []config.Sink{{Name: "h", Type: "webhook", Config: &webhook.SinkConfig{Endpoints: []webhook.EndpointConfig{
		{Name: "tls", URL: "https://h.example/", Headers: map[string]string{"Authorization": "Bearer x"}},
		{Name: "plain-no-creds", URL: "http://h.example/", Headers: map[string]string{"X-Tenant": "a"}},
		{Name: "userinfo", URL: "http://u:p@h.example/"},
		{Name: "apikey", URL: "http://h.example/", Headers: map[string]string{"x-api-key": "k"}},
	}}}}}
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
	streams := &config.Config{Sinks: []config.Sink{
		{Name: "js", Type: "nats", Config: &natssink.Config{User: "u", Password: "p"}},
		{Name: "rd", Type: "redis", Config: &redissink.Config{TLS: tlsfiles.Settings{Enabled: true, InsecureSkipVerify: true}}},
		{Name: "mq", Type: "rabbitmq", Config: &rabbitmq.Config{Username: "u", Password: "p", TLS: tlsfiles.Settings{Enabled: true}}},
		{Name: "rd2", Type: "redis", Config: &redissink.Config{}},
	}}
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
