package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/event"
)

// A dead letter whose event the endpoint's filter no longer selects is not
// "delivered" by being filtered out: replay keeps it and says why.
func TestDLQReplayKeepsARecordTheFilterNoLongerSelects(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "relay.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`
tables: [{name: shop.outbox}]
checkpoint: {path: %s}
sinks:
  - name: hooks
    type: webhook
    webhook: {endpoints: [{name: a, url: "%s", filter: {event_types: ["order.*"]}}]}
`, filepath.Join(dir, "cp.json"), srv.URL)), 0o600)
	store, err := deadletter.OpenFile(filepath.Join(dir, "dead-letters"))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(context.Background(), deadletter.Letter{Sink: "hooks/a", Reason: "410", First: time.Now(), Last: time.Now(),
		Event: &event.Event{ID: "e1", AggregateID: "a", Type: "invoice.paid", Payload: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := mainCode(context.Background(), []string{"dlq", "replay", "--config", cfgPath, "--all"}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "no longer selects it") {
		t.Fatalf("replay exited %d: %s%s", code, out.String(), errOut.String())
	}
	if hits.Load() != 0 {
		t.Fatal("the filtered event was sent")
	}
	if recs, _ := store.List(context.Background(), deadletter.Filter{}); len(recs) != 1 {
		t.Fatalf("the record was not kept: %d left", len(recs))
	}
}
