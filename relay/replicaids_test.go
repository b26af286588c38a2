package relay

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	_ "github.com/outbox-relay/outbox-relay/sink/all"
	"github.com/outbox-relay/outbox-relay/source"
)

// TestReplicaIDsDoNotDependOnTheOrderOfAssembly: whichever of the plain
// sinks' streams and the webhook sinks' gateways are built first, sink i's
// stream registers with source.server_id+i and the catch-up streams with
// the ids after every sink's, in sink order (config.SinkReplicaIDs).
func TestReplicaIDsDoNotDependOnTheOrderOfAssembly(t *testing.T) {
	cfg, err := config.Parse(fmt.Appendf(nil, `
source: {host: 127.0.0.1, server_id: 100}
tables: [{name: shop.outbox}]
checkpoint: {path: %s}
sinks:
  - {name: hooks, type: webhook, webhook: {gateway: {max_catch_up: 2}, endpoints: [{name: a, url: "http://127.0.0.1:1/"}]}}
  - {name: out, type: stdout}
  - {name: more, type: webhook, webhook: {gateway: {max_catch_up: 1}, endpoints: [{name: b, url: "http://127.0.0.1:1/"}]}}
  - {name: last, type: stdout}
`, filepath.Join(t.TempDir(), "cp.json")))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]uint32{"hooks": {100, 104, 105}, "out": {101}, "more": {102, 106}, "last": {103}}
	for i, s := range cfg.Sinks {
		stream, catchUp := cfg.SinkReplicaIDs(i)
		if got := append([]uint32{stream}, catchUp...); !slices.Equal(got, want[s.Name]) {
			t.Fatalf("config.SinkReplicaIDs(%d) = %v, want %v", i, got, want[s.Name])
		}
	}
	for _, order := range []string{"streams first", "gateways first"} {
		t.Run(order, func(t *testing.T) {
			got := assembledIDs(t, cfg, order == "gateways first")
			for name, ids := range want {
				if !slices.Equal(got[name], ids) {
					t.Errorf("sink %s registers with %v, want %v (all: %v)", name, got[name], ids, got)
				}
			}
		})
	}
}

// assembledIDs builds cfg's streams and gateways as Run does (without
// running them or touching a server), in the order asked, and returns the
// replica ids of each member by name.
func assembledIDs(t *testing.T, cfg *config.Config, gatewaysFirst bool) map[string][]uint32 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := New(cfg, Options{Registerer: prometheus.NewRegistry()})
	m, stop, err := r.startMetrics()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	r.metrics = m
	targets, err := r.Targets()
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.OpenFile(cfg.Checkpoint.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	src := &sourceConn{info: source.ServerInfo{Flavor: "mariadb", ServerID: 1}, tables: canal.TablesOf(cfg.Tables)}
	a, err := r.newAssembly(src, store, &held{lose: func() {}}, nil, event.Position{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	var members []member
	build := []func() ([]member, error){
		func() ([]member, error) { return a.streams(targets) },
		func() ([]member, error) { return a.gateways(ctx, targets) },
	}
	if gatewaysFirst {
		slices.Reverse(build)
	}
	for _, b := range build {
		ms, err := b()
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, ms...)
	}
	out := map[string][]uint32{}
	for _, mb := range members {
		out[mb.name] = mb.replicaIDs
	}
	return out
}
