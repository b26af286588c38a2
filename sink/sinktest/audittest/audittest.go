// Package audittest runs `outbox-relay audit` against a sink kind's real
// destination, for the audit test every kind with a read-back has
// (sink.Kind.Audit; docs/adding-a-sink.md): Stream runs the whole story in
// the kind's own package, Audit audits one run a test made itself. The
// relay, the audit's reader and the kind's Auditor are the ones the
// commands use; each test gets a private MariaDB (internal/testserver).
//
// Its functions are called from a test's goroutine.
package audittest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/audit"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/relaytest"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/source"
)

// Audit audits cfg's first sink over (from, to] with the Auditor its kind
// declares (sink.Kind.Audit), allowing a minute of clock skew; flags are
// the kind's audit flags (sink.Kind.AuditFlags), as the command passes
// them.
func Audit(t testing.TB, cfg *config.Config, from, to event.Position, opts audit.Options, flags map[string]string) (audit.Report, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, err := source.Open(ctx, cfg.Source)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	info, err := source.Inspect(ctx, db, cfg.Source)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := audit.Reader(cfg, info, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	kind, ok := sink.KindOf(cfg.Sinks[0].Type)
	if !ok || kind.Audit == nil {
		t.Fatalf("sink type %s declares no read-back", cfg.Sinks[0].Type)
	}
	a, err := kind.Audit(sink.AuditParams{Config: cfg.Sinks[0].Config, ClockSkew: time.Minute, Flags: flags})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rng := audit.Range{From: audit.Bound{GTID: from.GTIDSet}, To: audit.Bound{GTID: to.GTIDSet}}
	return audit.Run(ctx, opts, rc, rng, from, cur, cfg.Sinks[0].Name, a)
}

// Healthy fails unless r found every one of n events and nothing else
// wrong.
func Healthy(t testing.TB, r audit.Report, n int) {
	t.Helper()
	if r.Events != n || !r.OK() || r.UnexpectedCount != 0 || r.OrderCount != 0 {
		t.Fatalf("a healthy run: %d events (want %d), missing %v, unexpected %v, order %v", r.Events, n, MissingIDs(r), r.Unexpected, r.Order)
	}
}

// MissingIDs are the ids r reports missing, sorted.
func MissingIDs(r audit.Report) []string {
	var out []string
	for _, m := range r.Missing {
		out = append(out, m.ID)
	}
	slices.Sort(out)
	return out
}

// Stream runs a relay on a private MariaDB with one sink, sinkYAML (an
// item of sinks:, in flow or block style, indented by two spaces), commits
// a workload, waits until read (the destination's ids in its order, and a
// function that deletes the i-th) holds every event, and checks that an
// audit (with the kind's audit flags) finds the run healthy and, after
// every 7th id is deleted from the destination, exactly those missing.
func Stream(t *testing.T, sinkYAML string, flags map[string]string, read func() (ids []string, del func(i int))) {
	t.Helper()
	srv := testserver.Start(t, testserver.Options{})
	srv.Exec(t, "CREATE DATABASE shop", "USE shop; "+outboxtest.Schema)
	db := srv.DB(t, "shop")
	cfg, err := config.Parse(fmt.Appendf(nil, `
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: shop.outbox}]
checkpoint: {path: %s, interval: 200ms}
delivery: {batch_size: 500, retry_backoff: 50ms, max_retry_backoff: 500ms}
sinks:
%s`, srv.Port, testserver.ServerID(), filepath.Join(t.TempDir(), "cp.json"), sinkYAML))
	if err != nil {
		t.Fatal(err)
	}
	relaytest.Start(t, cfg, relay.Options{Logger: slog.New(slog.DiscardHandler)}).StopAtEnd(t)
	ctx := context.Background()
	// The relay starts at the server's position: its first checkpoint
	// says it is reading, so the workload is after its start.
	eventually.Within(t, 30*time.Second, "the relay's first checkpoint", func() bool {
		_, err := os.Stat(cfg.Checkpoint.Path)
		return err == nil
	})
	info, err := source.ReadInfo(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	from, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	w := &outboxtest.Workload{}
	outboxtest.Produce(ctx, t, db, w, 2, 30, []int{1, 3, 2}, 8)
	var ids []string
	var del func(int)
	eventually.Within(t, 60*time.Second, fmt.Sprintf("%d events at the destination", w.Events()), func() bool {
		ids, del = read()
		return len(slices.Compact(slices.Sorted(slices.Values(ids)))) >= w.Events()
	})
	to, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	auditRange := func() audit.Report {
		r, err := Audit(t, cfg, from, to, audit.Options{}, flags)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	Healthy(t, auditRange(), w.Events())

	var lost []string
	for i, id := range ids {
		if i%7 == 3 {
			lost = append(lost, id)
		}
	}
	for i, id := range ids { // every copy of a lost id
		if slices.Contains(lost, id) {
			del(i)
		}
	}
	slices.Sort(lost)
	lost = slices.Compact(lost)
	r := auditRange()
	if got := MissingIDs(r); !slices.Equal(got, lost) || r.Events != w.Events() {
		t.Fatalf("after deleting %d ids: %d events, missing %v; want exactly %v", len(lost), r.Events, got, lost)
	}
}
