package relay

import (
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
)

// A reload applies console.tokens only; every other console key that
// changed is named, for the log to say a restart applies it.
func TestAReloadNamesTheConsoleKeysOnlyARestartApplies(t *testing.T) {
	was := config.Console{Listen: "127.0.0.1:9465", RateLimit: 20, Session: 8 * time.Hour, Tokens: []config.ConsoleToken{{Name: "ops"}}}
	now := was
	now.Tokens = []config.ConsoleToken{{Name: "ops2"}}
	if got := restartOnly(was, now); len(got) != 0 {
		t.Errorf("only the tokens changed: %v named", got)
	}
	now.Session, now.TrustedProxies = time.Hour, []string{"10.0.0.0/8"}
	if got := restartOnly(was, now); !slices.Equal(got, []string{"console.session", "console.trusted_proxies"}) {
		t.Errorf("named %v, want console.session and console.trusted_proxies", got)
	}
}
