package prune_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/prune"
	_ "github.com/outbox-relay/outbox-relay/sink/all"
)

// A webhook sink's endpoints without a cursor of their own are at its
// shared cursor: prune is bounded by it in their place, and by the
// cursors the others have. Without a shared cursor (a checkpoint of an
// earlier version), every endpoint's key bounds it, as before.
func TestPruneKeysReadTheSharedCursorForEndpointsWithoutTheirOwn(t *testing.T) {
	cfg, err := config.Parse([]byte(`
source: {host: 127.0.0.1, user: root}
tables: [{name: shop.outbox}]
sinks:
  - {name: all, type: stdout}
  - name: hooks
    type: webhook
    webhook:
      endpoints:
        - {name: a, url: "https://a.example/"}
        - {name: b, url: "https://b.example/"}
`))
	if err != nil {
		t.Fatal(err)
	}
	st, err := checkpoint.OpenFile(filepath.Join(t.TempDir(), "cp.json"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := st.Save(ctx, "hooks/a", checkpoint.Checkpoint{}); err != nil {
		t.Fatal(err)
	}
	if got, want := sorted(prune.Keys(ctx, st, cfg)), []string{"all", "hooks/a", "hooks/b"}; !slices.Equal(got, want) {
		t.Fatalf("without a shared cursor: keys %v, want %v", got, want)
	}
	if err := st.Save(ctx, gateway.SharedKey("hooks"), checkpoint.Checkpoint{}); err != nil {
		t.Fatal(err)
	}
	if got, want := sorted(prune.Keys(ctx, st, cfg)), []string{gateway.SharedKey("hooks"), "all", "hooks/a"}; !slices.Equal(got, want) {
		t.Fatalf("with a shared cursor: keys %v, want %v", got, want)
	}
}

func sorted(s []string) []string { slices.Sort(s); return s }
