package config_test

import (
	"slices"
	"testing"

	"github.com/outbox-relay/outbox-relay/config"
)

// TestSinkReplicaIDsFollowTheRule: sink i's stream registers with
// server_id+i whatever its kind, and the webhook sinks' catch-up streams
// take the ids after every sink's stream, in sink order, and the replay
// jobs' slots the ids after those: together, the relay's range.
func TestSinkReplicaIDsFollowTheRule(t *testing.T) {
	cfg, err := config.Parse([]byte(`
source: {host: 127.0.0.1, server_id: 100}
tables: [{name: shop.outbox}]
sinks:
  - {name: hooks, type: webhook, webhook: {gateway: {max_catch_up: 2}, endpoints: [{name: a, url: "http://127.0.0.1:1/"}]}}
  - {name: out, type: stdout}
  - {name: more, type: webhook, webhook: {gateway: {max_catch_up: 1}, endpoints: [{name: b, url: "http://127.0.0.1:1/"}]}}
  - {name: last, type: stdout}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		stream  uint32
		catchUp []uint32
	}{
		{100, []uint32{104, 105}},
		{101, nil},
		{102, []uint32{106}},
		{103, nil},
	}
	var all []uint32
	for i, w := range want {
		stream, catchUp := cfg.SinkReplicaIDs(i)
		if stream != w.stream || !slices.Equal(catchUp, w.catchUp) {
			t.Errorf("sink %d (%s): ids %d %v, want %d %v", i, cfg.Sinks[i].Name, stream, catchUp, w.stream, w.catchUp)
		}
		all = append(append(all, stream), catchUp...)
	}
	if got := cfg.ReplayReplicaIDs(); !slices.Equal(got, []uint32{107, 108}) {
		t.Errorf("replay slots' ids %v, want [107 108] (replay.max_running 2, after the sinks' 7)", got)
	}
	all = append(all, cfg.ReplayReplicaIDs()...)
	slices.Sort(all)
	if n := cfg.ReplicaIDs(); len(all) != n || all[0] != 100 || all[len(all)-1] != 100+uint32(n)-1 || len(slices.Compact(all)) != n {
		t.Errorf("the sinks' and replays' ids %v are not the %d ids from source.server_id on (Config.ReplicaIDs)", all, n)
	}
}
