package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/config"
)

// A command that reads only some sections (status, dlq list, prune) needs
// only their environment variables; run and check (Load) need every one.
func TestLoadSectionsNeedsOnlyTheVariablesOfItsSections(t *testing.T) {
	t.Setenv("OUTBOX_TEST_SOURCE_PW", "pw")
	os.Unsetenv("OUTBOX_TEST_UNSET")
	const base = `
source: {host: 127.0.0.1, password: "${OUTBOX_TEST_SOURCE_PW}"}
tables: [{name: shop.outbox}]
checkpoint: {path: /tmp/cp.json}
`
	webhook := `
sinks:
  - {name: out, type: stdout}
  - name: hooks
    type: webhook
    webhook: {endpoints: [{name: a, url: "https://h.example/", secrets: ["${OUTBOX_TEST_UNSET}"]}]}
`
	for _, tc := range []struct {
		name, yaml string
		sections   []string
		wantErr    string // "" when it loads
	}{
		{"an unset webhook secret does not stop a reader of the source and checkpoints",
			base + webhook, []string{"source", "checkpoint"}, ""},
		{"an unset variable of a section it reads stops it",
			base + webhook, []string{"source", "checkpoint", "sinks"}, "OUTBOX_TEST_UNSET is not set"},
		{"an unset variable that leaves the config undecodable is the error",
			base + "sinks: [{name: out, type: stdout}]\ndelivery:\n  max_in_flight: ${OUTBOX_TEST_UNSET}\n", []string{"source", "checkpoint"}, "OUTBOX_TEST_UNSET is not set"},
		{"another sink's problem is still reported",
			base + webhook + "  - {name: k, type: kafka}\n", []string{"source", "checkpoint"}, "sinks[2]"},
		{"the source's password is read",
			strings.Replace(base, "OUTBOX_TEST_SOURCE_PW", "OUTBOX_TEST_UNSET", 1) + "sinks: [{name: out, type: stdout}]\n", []string{"source", "checkpoint"}, "OUTBOX_TEST_UNSET is not set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "relay.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := config.LoadSections(path, tc.sections...)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("LoadSections: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("LoadSections: want an error with %q, got %v", tc.wantErr, err)
			case tc.wantErr == "" && cfg.Source.Password.Reveal() != "pw":
				t.Errorf("the source's password is %q, want it from the environment", cfg.Source.Password.Reveal())
			}
			// Load (run, check) needs every variable, with the clear error.
			if _, err := config.Load(path); strings.Contains(tc.yaml, "${OUTBOX_TEST_UNSET}") && (err == nil || !strings.Contains(err.Error(), "environment variable OUTBOX_TEST_UNSET is not set: export it")) {
				t.Errorf("Load: want the unset variable's error, got %v", err)
			}
		})
	}
}
