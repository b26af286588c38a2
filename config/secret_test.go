package config_test

import (
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/config"
)

// A secret written where the file expects another type must not be quoted
// by the error (yaml quotes up to 10 characters of a scalar), whether it is
// written literally or comes from the environment.
func TestConfigErrorsNeverQuoteASecret(t *testing.T) {
	const secret = "whsec_UNIQUEsecretVALUE0123456789abcdef"
	t.Setenv("OUTBOX_TEST_SECRET", secret)
	base := "tables: [{name: shop.outbox}]\n"
	for _, tc := range []struct{ name, yaml, field string }{
		{"webhook secrets as a scalar", base + "sinks:\n  - name: h\n    type: webhook\n    webhook:\n      endpoints:\n        - name: a\n          url: https://h.example/\n          secrets: " + secret + "\n", "secrets"},
		{"webhook secrets from the environment", base + "sinks:\n  - name: h\n    type: webhook\n    webhook:\n      endpoints:\n        - name: a\n          url: https://h.example/\n          secrets: ${OUTBOX_TEST_SECRET}\n", "secrets"},
		{"webhook secrets in flow style", base + "sinks: [{name: h, type: webhook, webhook: {endpoints: [{name: a, url: 'https://h.example/', secrets: " + secret + "}]}}]\n", "secrets"},
		{"webhook headers as a scalar", base + "sinks:\n  - name: h\n    type: webhook\n    webhook:\n      endpoints:\n        - name: a\n          url: https://h.example/\n          headers: " + secret + "\n", "headers"},
		{"a kafka password as a list item", base + "sinks:\n  - name: k\n    type: kafka\n    kafka:\n      brokers: [k:9092]\n      sasl: {mechanism: plain, username: u, password: {x: " + secret + "}}\n", "password"},
		{"a kafka broker holding a password", base + "sinks:\n  - name: k\n    type: kafka\n    kafka:\n      brokers: ['relay:" + secret + "@127.0.0.1']\n", "brokers[0]"},
		{"a source password as a list", base + "sinks: [{name: o, type: stdout}]\nsource:\n  password: [" + secret + "]\n", "source.password"},
		{"a secret next to a bad port on one line", base + "sinks: [{name: o, type: stdout}]\nsource: {password: " + secret + ", port: " + secret + "}\n", "source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatal("Parse accepted it")
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("the error does not name %s: %v", tc.field, err)
			}
			for _, part := range []string{secret[:7], secret[6:12], "UNIQUE"} {
				if strings.Contains(err.Error(), part) {
					t.Fatalf("the error quotes the secret (%q): %v", part, err)
				}
			}
		})
	}
	// Values of other keys are still quoted: they help find the mistake.
	_, err := config.Parse([]byte(base + "sinks: [{name: o, type: stdout}]\ndelivery: {batch_size: lots}\n"))
	if err == nil || !strings.Contains(err.Error(), `"lots"`) {
		t.Errorf("a bad non-secret value is not quoted: %v", err)
	}
}
