package config_test

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

const tableBase = "tables: [{name: shop.outbox, headers: [tenant]}]\n"

func TestWebhookEndpointsTableIsRead(t *testing.T) {
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	t.Setenv("OUTBOX_TEST_SECRETS_KEY", key)
	cfg, err := config.Parse([]byte(tableBase + `sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints_table:
        table: shop.outbox_endpoints
        tenant_header: tenant
        secrets_key: ${OUTBOX_TEST_SECRETS_KEY}
        defaults:
          timeout: 3s
          max_concurrency: 4
          rate_limit: 10
          headers: {X-Relay: outbox}
          retry: {max_attempts: 5}
          egress: {allow: [10.1.0.0/16]}
`))
	if err != nil {
		t.Fatal(err)
	}
	et := webhook.Section(cfg.Sinks[0]).EndpointsTable
	if et == nil {
		t.Fatal("endpoints_table not read")
	}
	if et.Table != "shop.outbox_endpoints" || et.TenantHeader != "tenant" || et.SecretsKey != key {
		t.Errorf("endpoints_table = %+v", et)
	}
	d := et.Defaults
	if d.Timeout != 3*time.Second || d.MaxConcurrency != 4 || d.RateLimit != 10 || d.Headers["X-Relay"] != "outbox" ||
		d.Retry.MaxAttempts != 5 || len(d.Egress.Allow) != 1 {
		t.Errorf("defaults = %+v", d)
	}
	if len(webhook.Section(cfg.Sinks[0]).Endpoints) != 0 {
		t.Errorf("static endpoints appeared: %+v", webhook.Section(cfg.Sinks[0]).Endpoints)
	}
}

func TestWebhookEndpointsTableErrors(t *testing.T) {
	const secret = "UNIQUEkeyVALUEthatISnotBASE64!!"
	sink := func(body string) string {
		return tableBase + "sinks:\n  - name: hooks\n    type: webhook\n    webhook:\n" + body
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"a webhook sink with neither endpoints nor a table", sink("      endpoints: []\n"),
			"sinks[0].webhook: a webhook sink needs endpoints (a list in the file), an endpoints_table (rows in the database), or both"},
		{"a webhook sink with no webhook section", tableBase + "sinks: [{name: hooks, type: webhook}]\n", "needs endpoints"},
		{"a table without schema", sink("      endpoints_table: {table: outbox_endpoints}\n"),
			`sinks[0].webhook.endpoints_table: table "outbox_endpoints" must be schema.table`},
		{"a table that is not set", sink("      endpoints_table: {tenant_header: tenant}\n"), `table "" must be schema.table`},
		{"an unknown key is named with a suggestion", sink("      endpoints_table: {table: s.t, tenant_heder: tenant}\n"),
			`sinks[0].webhook.endpoints_table.tenant_heder: line 6: unknown key "tenant_heder"; did you mean "tenant_header"?`},
		{"an unknown key in the defaults", sink("      endpoints_table: {table: s.t, defaults: {timeuot: 1s}}\n"),
			`sinks[0].webhook.endpoints_table.defaults.timeuot: line 6: unknown key`},
		{"a bad duration in the defaults", sink("      endpoints_table: {table: s.t, defaults: {timeout: soon}}\n"),
			`sinks[0].webhook.endpoints_table.defaults.timeout: line 6: "soon" is not a duration`},
		{"a url in the defaults", sink("      endpoints_table: {table: s.t, defaults: {url: 'https://x.example/'}}\n"),
			"sinks[0].webhook.endpoints_table: defaults.url is set; each row has its url"},
		{"a bad body in the defaults", sink("      endpoints_table: {table: s.t, defaults: {body: xml}}\n"),
			`sinks[0].webhook.endpoints_table: defaults: webhook endpoint "defaults": body "xml"`},
		{"a secrets key that is not a key is named, not quoted", sink("      endpoints_table: {table: s.t, secrets_key: '" + secret + "'}\n"),
			"sinks[0].webhook.endpoints_table: secrets_key: not valid base64"},
		{"a secrets key of the wrong shape is not quoted", sink("      endpoints_table:\n        table: s.t\n        secrets_key: [" + secret + "]\n"),
			"secrets_key: line 8: want a string, got a list"},
		{"a credential header in the defaults is refused, unquoted", sink("      endpoints_table: {table: s.t, defaults: {headers: {Authorization: 'Bearer " + secret + "'}}}\n"),
			`sinks[0].webhook.endpoints_table: defaults.headers: "Authorization" carries a credential, and every row's url`},
		{"any header named like a credential is refused", sink("      endpoints_table: {table: s.t, defaults: {headers: {X-Api-Key: '" + secret + "'}}}\n"),
			`defaults.headers: "X-Api-Key" carries a credential`},
		{"both problems are each named", sink("      endpoints_table: {table: t, defaults: {name: x}}\n"),
			"sinks[0].webhook.endpoints_table: defaults.name is set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, want an error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "UNIQUE") {
				t.Fatalf("the error quotes the secrets key: %v", err)
			}
		})
	}
}

// Static endpoints and a table together are accepted.
func TestWebhookEndpointsAndTableTogether(t *testing.T) {
	_, err := config.Parse([]byte(tableBase + `sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints: [{name: ops, url: "https://ops.example/hook"}]
      endpoints_table: {table: shop.outbox_endpoints}
`))
	if err != nil {
		t.Fatal(err)
	}
}

// The example's commented webhook sink parses once uncommented.
func TestTheExampleWebhookSinkParses(t *testing.T) {
	block := exampleSink(t, "webhook")
	if len(block) < 10 {
		t.Fatalf("no commented webhook sink found in the example (%d lines)", len(block))
	}
	t.Setenv("BILLING_WEBHOOK_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	t.Setenv("OUTBOX_RELAY_SECRETS_KEY", base64.StdEncoding.EncodeToString(make([]byte, 32)))
	cfg, err := config.Parse([]byte(tableBase + "sinks:\n" + strings.Join(block, "\n") + "\n"))
	if err != nil {
		t.Fatalf("the example's webhook sink: %v", err)
	}
	w := webhook.Section(cfg.Sinks[0])
	if len(w.Endpoints) != 1 || w.Endpoints[0].Filter.Headers["tenant"] != "acme" || w.EndpointsTable == nil || w.EndpointsTable.TenantHeader != "tenant" {
		t.Errorf("webhook sink = %+v", w)
	}
}
