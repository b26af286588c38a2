package config_test

import (
	"encoding/base64"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/sink"
)

func TestTheExampleConfigLoads(t *testing.T) {
	t.Setenv("RELAY_DB_PASSWORD", "s3cret")
	cfg, err := config.Load("../deploy/config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Source.Password.Reveal() != "s3cret" {
		t.Errorf("password not taken from the environment")
	}
	if cfg.Source.Password.String() == "s3cret" {
		t.Errorf("a Secret printed its value")
	}
}

// exampleSink returns the lines of the example's commented-out sink named
// name, uncommented.
func exampleSink(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile("../deploy/config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var block []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case line == "  # - name: "+name || strings.HasPrefix(line, "  # - name: "+name+" "):
			in = true
		case in && (strings.HasPrefix(line, "  # - name:") || !strings.HasPrefix(line, "  #   ")):
			in = false
		}
		if in {
			block = append(block, "  "+strings.TrimPrefix(line, "  # "))
		}
	}
	if len(block) < 5 {
		t.Fatalf("no commented-out sink %q in the example (%d lines)", name, len(block))
	}
	return block
}

// The example's commented-out NATS, Redis and RabbitMQ sinks parse once
// uncommented, with what they show.
func TestTheExampleStreamSinksParse(t *testing.T) {
	var lines []string
	for _, name := range []string{"nats", "redis", "rabbitmq"} {
		lines = append(lines, exampleSink(t, name)...)
	}
	cfg, err := config.Parse([]byte("tables: [{name: shop.outbox}]\nsinks:\n" + strings.Join(lines, "\n") + "\n"))
	if err != nil {
		t.Fatalf("the example's stream sinks: %v", err)
	}
	if len(cfg.Sinks) != 3 {
		t.Fatalf("%d sinks, want nats, redis, rabbitmq", len(cfg.Sinks))
	}
	// Each section as its kind decoded it (through the registry: no kind's
	// package is imported here).
	for i, want := range []struct{ typ, shows string }{
		{"nats", "duplicate_window: 2m0s"},
		{"redis", "addr: 127.0.0.1:6379"},
		{"rabbitmq", "exchange: outbox"},
	} {
		s := cfg.Sinks[i]
		b, err := yaml.Marshal(s.Config)
		if err != nil || s.Type != want.typ || s.Config == nil || !strings.Contains(string(b), want.shows) {
			t.Fatalf("uncommented sink %d: %+v, decoded as\n%s\nwant a %s section with %q (%v)", i, s, b, want.typ, want.shows, err)
		}
	}
}

// Every sink kind but stdout (which is on) is in the example, commented
// out with every key of its section, and parses once uncommented with the
// variables it names set.
func TestEveryCommentedOutSinkOfTheExampleParses(t *testing.T) {
	t.Setenv("BILLING_WEBHOOK_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	t.Setenv("OUTBOX_RELAY_SECRETS_KEY", base64.StdEncoding.EncodeToString(make([]byte, 32)))
	for _, k := range sink.Kinds() {
		if k.Type == "stdout" {
			continue
		}
		t.Run(k.Type, func(t *testing.T) {
			cfg, err := config.Parse([]byte("tables: [{name: shop.outbox}]\nsinks:\n" + strings.Join(exampleSink(t, k.Type), "\n") + "\n"))
			if err != nil {
				t.Fatalf("the example's %s sink: %v", k.Type, err)
			}
			if s := cfg.Sinks[0]; s.Type != k.Type || s.Config == nil {
				t.Fatalf("the example's %s sink: %+v", k.Type, s)
			}
		})
	}
}

func TestParseRejectsBadInputNamingTheField(t *testing.T) {
	base := "tables: [{name: shop.outbox}]\nsinks: [{name: out, type: stdout}]\n"
	tests := []struct {
		name, yaml, want string
	}{
		{"an unknown key is named", base + "source: {hots: x}\n", "hots"},
		{"a bad flavor names the field", base + "source: {flavor: postgres}\n", "source.flavor"},
		{"a table without schema", "tables: [{name: outbox}]\nsinks: [{name: out, type: stdout}]\n", "tables[0].name"},
		{"an unknown sink type", "tables: [{name: a.b}]\nsinks: [{name: out, type: kafak}]\n", "sinks[0].type"},
		{"two sinks with one name", "tables: [{name: a.b}]\nsinks: [{name: out, type: stdout}, {name: out, type: stdout}]\n", "used twice"},
		{"no sinks", "tables: [{name: a.b}]\n", "sinks"},
		{"a bad start", base + "checkpoint: {start: yesterday}\n", "checkpoint.start"},
		{"an unset variable", base + "source:\n  password: ${OUTBOX_TEST_UNSET_VAR}\n", "OUTBOX_TEST_UNSET_VAR is not set"},
		{"mysql store without dsn", base + "checkpoint: {store: mysql}\n", "checkpoint.dsn"},
		{"a read timeout shorter than the heartbeat", base + "source: {heartbeat: 10s, read_timeout: 5s}\n", "source.read_timeout"},
		{"not YAML", "{{{", "not valid YAML"},
		{"an unsafe checkpoint table name", base + "checkpoint: {table: 'cp; DROP TABLE x'}\n", "checkpoint.table"},
		{"a bad duration", base + "delivery:\n  linger: soon\n", "delivery.linger"},
		{"a typo'd key gets a suggestion", base + "source: {hots: x}\n", `source.hots: line 3: unknown key "hots"; did you mean "host"?`},
		{"a typo'd key in a flow mapping of a list item has its whole path", "tables: [{name: a.b}]\nsinks: [{name: k, type: kafka, kafka: {brokerz: [a]}}]\n", `sinks[0].kafka.brokerz: line 2: unknown key "brokerz"; did you mean "brokers"?`},
		{"a top-level typo", base + "sourc: {}\n", `did you mean "source"?`},
		{"a bad duration says what a duration is", base + "delivery: {linger: soon}\n", `delivery.linger: line 3: "soon" is not a duration (such as 500ms`},
		{"a mapping where a list goes", "tables: {name: a.b}\nsinks: [{name: out, type: stdout}]\n", "tables: line 1: want a list, got a mapping"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, want an error containing %q", err, tc.want)
			}
			for _, goName := range []string{"config.Config", "config.Source", "config.Table", "kafka.Config", "webhook.Config", "time.Duration", "[]config", "!!"} {
				if strings.Contains(err.Error(), goName) && !strings.Contains(tc.yaml, goName) {
					t.Errorf("the error names Go's types or YAML's tags (%q): %v", goName, err)
				}
			}
		})
	}
}

func TestEnvFallbackAndDefaults(t *testing.T) {
	os.Unsetenv("OUTBOX_TEST_PORT")
	cfg, err := config.Parse([]byte("source: {port: '${OUTBOX_TEST_PORT:-3307}'}\ntables: [{name: a.b}]\nsinks: [{name: out, type: stdout}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Source.Port != 3307 || cfg.Tables[0].Columns.AggregateID != "aggregateid" || cfg.Checkpoint.Start != "current" {
		t.Fatalf("defaults/env not applied: %+v", cfg)
	}
}

func TestMissingFileIsAClearError(t *testing.T) {
	_, err := config.Load("/nonexistent/relay.yaml")
	if err == nil || !strings.Contains(err.Error(), "read config") {
		t.Fatalf("Load = %v", err)
	}
}
