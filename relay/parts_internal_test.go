package relay

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/config"
)

// gatewayParts starts what a replica of the scaled-out gateway runs with,
// for the webhook sink it names, and its stop lets all of it go: the
// metrics it registered register again on the same registry. A sink not in
// the configuration is an error that starts nothing.
func TestGatewayPartsAreTheWebhookSinksAndStopLetsThemGo(t *testing.T) {
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: 3306, user: root, server_id: 1}
tables: [{name: shop.outbox}]
checkpoint: {path: %s}
sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints:
        - {name: a, url: "http://127.0.0.1:1/hook", secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]}
`, filepath.Join(t.TempDir(), "cp.json"))))
	if err != nil {
		t.Fatal(err)
	}
	rl := New(cfg, Options{Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	if _, _, err := rl.gatewayParts(ctx, "nope"); err == nil || !strings.Contains(err.Error(), `no webhook sink named "nope"`) {
		t.Fatalf("parts of a sink not in the configuration: %v", err)
	}
	for round := range 2 { // the second registers again what the first's stop let go
		p, stop, err := rl.gatewayParts(ctx, "hooks")
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if p.Endpoints.Sink != "hooks" || p.Endpoints.Config != cfg.Sinks[0].Config || p.Endpoints.States == nil || p.Endpoints.Health != p.Health {
			t.Errorf("round %d: endpoint parameters are not the webhook sink's as the relay builds them: %+v", round, p.Endpoints)
		}
		if p.Metrics == nil || p.Gateways == nil || p.Health == nil || p.Logger == nil || p.DeadLetters == nil || p.Targets != rl {
			t.Errorf("round %d: parts not all started: %+v", round, p)
		}
		stop()
	}
}
