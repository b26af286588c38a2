package config_test

import (
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/config"
)

// Parse never panics; what it accepts is valid (defaults applied, Validate
// passes); what it rejects is explained without Go's type names.
func FuzzParse(f *testing.F) {
	f.Add([]byte("tables: [{name: shop.outbox}]\nsinks: [{name: out, type: stdout}]\n"))
	f.Add([]byte("source: {hots: x}\ntables: [{name: a.b}]\nsinks: [{name: out, type: stdout}]\n"))
	f.Add([]byte("tables: [{name: a.b}]\nsinks: [{name: k, type: kafka, kafka: {brokers: [b:9092], topic: 'x.{{.AggregateType}}'}}]\n"))
	f.Add([]byte("tables: [{name: a.b}]\nsinks: [{name: h, type: webhook, webhook: {endpoints: [{name: e, url: 'http://x/'}]}}]\n"))
	f.Add([]byte("delivery: {linger: soon}\n"))
	f.Add([]byte("&a [1]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := config.Parse(b)
		if err != nil {
			if strings.Contains(err.Error(), "config.Config") {
				t.Fatalf("the error names a Go type: %v", err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate rejects: %v", err)
		}
	})
}
