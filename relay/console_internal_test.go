package relay

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/config"
)

// Without console.listen the relay is as it was: console makes no member
// and touches nothing (this assembly has no source, store or relay, so
// reading any of them would panic), and needs no key.
func TestWithoutAConsoleNothingIsOpened(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_CONSOLE_KEY", "")
	cfg, err := config.Parse([]byte("tables: [{name: shop.outbox}]\nsinks: [{name: hooks, type: webhook, webhook: {endpoints: [{name: a, url: 'https://a.example/'}]}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Console.Listen != "" {
		t.Fatalf("console.listen defaults to %q, want off", cfg.Console.Listen)
	}
	m, on, err := (&assembly{cfg: cfg}).console(nil)
	if err != nil || on || m.run != nil {
		t.Errorf("console() without console.listen: member %+v, on %v, err %v; want nothing", m, on, err)
	}
	// With it set, the same assembly does build one (so the check above
	// is of the switch, not of a console that can never start): it fails
	// for want of a key before it listens.
	cfg.Console.Listen = "127.0.0.1:0"
	if _, _, err := (&assembly{cfg: cfg, r: &Relay{}}).console(nil); err == nil {
		t.Error("console() with console.listen and no key: no error")
	}
}
