package replay_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/replay"
)

// listless is a file store whose List, which copies every key's
// checkpoint, is not to be called.
type listless struct {
	*checkpoint.File
	t *testing.T
}

func (l listless) List(context.Context) (map[string]checkpoint.Checkpoint, error) {
	l.t.Error("the replay jobs were listed by copying every checkpoint of the store (List)")
	return l.File.List(context.Background())
}

// The jobs of a store beside many endpoints' checkpoints are listed by
// their keys' prefix (what every replay.poll reads): the jobs, their
// progress and their requests to cancel, and no endpoint's checkpoint.
func TestStoreListsTheJobsKeysOnly(t *testing.T) {
	ctx := context.Background()
	f, err := checkpoint.OpenFile(filepath.Join(t.TempDir(), "checkpoint.json"))
	if err != nil {
		t.Fatal(err)
	}
	endpoints := map[string]checkpoint.Checkpoint{}
	for i := range 100 {
		endpoints[fmt.Sprintf("hooks/endpoint-%03d", i)] = checkpoint.Checkpoint{Flavor: "mariadb", UpdatedAt: time.Unix(1, 0).UTC()}
	}
	if err := f.SaveMany(ctx, endpoints); err != nil {
		t.Fatal(err)
	}
	jobs, err := replay.NewStore(listless{f, t})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"j1", "j2"} {
		if err := jobs.Put(ctx, replay.Job{ID: id, Sink: "hooks", Endpoint: "endpoint-001", Source: replay.SourceBinlog, State: replay.Pending}); err != nil {
			t.Fatal(err)
		}
	}
	if err := jobs.RequestCancel(ctx, "j2", "asked"); err != nil {
		t.Fatal(err)
	}
	if err := f.Save(ctx, replay.ProgressKey("j1"), checkpoint.Checkpoint{Flavor: "mariadb"}); err != nil {
		t.Fatal(err)
	}
	l, err := jobs.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Jobs) != 2 || l.Jobs[0].ID != "j1" && l.Jobs[1].ID != "j1" || len(l.Progress) != 1 || l.Cancel["j2"] != "asked" || len(l.Cancel) != 1 {
		t.Errorf("List = %+v; want jobs j1 and j2, j1's progress, j2's request to cancel", l)
	}
}
