package config_test

import (
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/config"
)

func TestTableSwitchOver(t *testing.T) {
	const head = "source: {host: 127.0.0.1}\ncheckpoint: {path: /tmp/cp.json}\nsinks: [{name: out, type: stdout}]\n"
	for _, tc := range []struct{ name, tables, err string }{
		{"an empty section takes the defaults", `[{name: shop.outbox, switch_over: {}}]`, ""},
		{"the same status for pending and claimed is refused", `[{name: shop.outbox, switch_over: {claimed: pending}}]`,
			"tables[0].switch_over: pending (\"pending\") and claimed (\"pending\") must be set and differ"},
		{"a status column that is not a name is refused", `[{name: shop.outbox, switch_over: {status_column: "status; x"}}]`,
			"tables[0].switch_over.status_column"},
		{"an unknown key is named", `[{name: shop.outbox, switch_over: {claim: relayed}}]`, "switch_over.claim"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(head + "tables: " + tc.tables + "\n"))
			if err == nil {
				err = cfg.Validate()
			}
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("got %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("got %v, want an error with %q", err, tc.err)
			case tc.err == "":
				so := cfg.Tables[0].SwitchOver
				if so == nil || so.StatusColumn != "status" || so.Pending != "pending" || so.Claimed != "relayed" {
					t.Errorf("switch_over %+v", so)
				}
			}
		})
	}
	cfg, err := config.Parse([]byte(head + "tables: [{name: shop.outbox}]\n"))
	if err != nil || cfg.Tables[0].SwitchOver != nil {
		t.Errorf("without the section: %v, %+v (want no claim)", err, cfg.Tables[0].SwitchOver)
	}
}
