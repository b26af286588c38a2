package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

// gatewayReplayMaxInFlight is the rig's replay.max_in_flight.
const gatewayReplayMaxInFlight = 8

// An endpoint of the scaled-out gateway recovers since a time (outbox-relay
// endpoints replay --kafka, against two replicas of the built binary, a
// kfake broker and a real HTTP receiver): --dry-run counts the window (the
// endpoint's events since the time; the other tenant's are passed over);
// the job's replica sends them again, marked with the job's id
// (webhook-replay), while live traffic goes on to every endpoint; the
// receiver refuses replayed events after the first 40, so the replay
// cannot have ended when the replica running it is SIGKILLed; the other
// replica takes the job over and resumes it from its saved progress. In
// the end: every event of the window replayed to that endpoint, at most
// replay.max_in_flight twice, per aggregate in order, nothing from before
// the time or after the job was made, nothing to the other endpoints; and
// the live stream delivered every event to every endpoint, per aggregate in
// order, with live deliveries to the endpoint going on while its replay was
// stalled. A second job, cancelled while it runs, ends cancelled and sends
// nothing.
func TestKafkaGatewayEndpointRecoversSinceAndResumesAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("process run skipped with -short")
	}
	const partitions = 4
	rig := newKafkaGatewayRig(t, 4, 2, partitions, 0, "queue: 16")
	rig.replayCap = 40
	f, err := os.OpenFile(rig.cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "replay: {poll: 200ms, max_in_flight: %d}\n", gatewayReplayMaxInFlight)
	f.Close()
	rig.start()
	rig.start()
	rig.settled(2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	rig.produce(ctx, 100, 10, 5*time.Millisecond) // before the window
	// The window's start: a millisecond (Kafka timestamps' unit) after
	// every event so far, before every later one.
	since := time.Now().Truncate(time.Millisecond).Add(time.Millisecond)
	for !time.Now().After(since) {
		time.Sleep(time.Millisecond)
	}
	rig.produce(ctx, 300, 10, 5*time.Millisecond) // the window
	rig.mu.Lock()
	window := append([]*event.Event(nil), rig.produced[100:]...)
	rig.mu.Unlock()
	kgwWaitFor(t, time.Minute, "the live stream to deliver the first events", func() bool { return rig.missing() == 0 }, rig.logs)
	mine := 0 // the window's events of e0000's tenant
	for _, e := range window {
		if e.Headers[0].Value == "t0" {
			mine++
		}
	}

	args := []string{"endpoints", "replay", "--config", rig.cfg, "hooks/e0000", "--kafka", "orders", "--since", since.Format(time.RFC3339Nano)}
	code, out := run(ctx, append(args, "--dry-run")...)
	if want := fmt.Sprintf("dry run: %d events would be sent to hooks/e0000, %d passed over", mine, len(window)-mine); code != 0 || !strings.Contains(out, want) {
		t.Fatalf("endpoints replay --dry-run (exit %d) printed\n%s\nwant %q", code, out, want)
	}
	code, out = run(ctx, args...)
	m := jobIDRe.FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("endpoints replay (exit %d) made no job:\n%s", code, out)
	}
	id := m[1]
	t.Logf("%s", strings.TrimSpace(out))
	stateOf := func(id string) string {
		_, out := run(ctx, "replay", "list", "--gateway", "--config", rig.cfg)
		if m := regexp.MustCompile(regexp.QuoteMeta(id) + `\s+(\S+)\s+hooks/e0000`).FindStringSubmatch(out); m != nil {
			return m[1]
		}
		return ""
	}
	state := func() string { return stateOf(id) }

	// Live traffic while the replay runs (after the window's end).
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		rig.produce(ctx, 200, 5, 20*time.Millisecond)
	}()
	// Mid-replay: the receiver took 40 replayed events and refuses the rest.
	kgwWaitFor(t, time.Minute, "the replay to stall after 40 replayed events", func() bool {
		return rig.replayOK.Load() >= rig.replayCap && state() == "running"
	}, rig.logs)
	// Live deliveries to the same endpoint go on meanwhile.
	rig.mu.Lock()
	liveBefore := len(rig.got[0])
	rig.mu.Unlock()
	kgwWaitFor(t, time.Minute, "live deliveries to hooks/e0000 while its replay is stalled", func() bool {
		rig.mu.Lock()
		defer rig.mu.Unlock()
		return len(rig.got[0]) >= liveBefore+10
	}, rig.logs)
	// A second job for the same endpoint runs beside it (replay.max_running
	// is 2), gets only refusals, and is cancelled: it ends cancelled, and
	// sends nothing once the receiver accepts again.
	code, out = run(ctx, args...)
	m2 := jobIDRe.FindStringSubmatch(out)
	if code != 0 || m2 == nil {
		t.Fatalf("a second endpoints replay (exit %d) made no job:\n%s", code, out)
	}
	id2 := m2[1]
	kgwWaitFor(t, time.Minute, "the second job to run", func() bool { return stateOf(id2) == "running" }, rig.logs)
	if code, out := run(ctx, "replay", "cancel", "--gateway", "--config", rig.cfg, id2); code != 0 {
		t.Fatalf("replay cancel --gateway exited %d:\n%s", code, out)
	}
	kgwWaitFor(t, time.Minute, "the second job to be cancelled", func() bool { return stateOf(id2) == "cancelled" }, rig.logs)
	runner := -1
	for i := range rig.procs {
		b, _ := os.ReadFile(filepath.Join(rig.dir, fmt.Sprintf("replica-%d.log", i)))
		if strings.Contains(string(b), "this replica runs the gateway's replay jobs") {
			runner = i
		}
	}
	if runner < 0 {
		rig.logs()
		t.Fatal("no replica logged that it runs the replay jobs")
	}
	if err := rig.procs[runner].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = rig.procs[runner].Wait()
	if s := state(); s != "running" {
		t.Fatalf("job %s was %q at the kill, want running", id, s)
	}
	rig.replayOpen.Store(true)
	rig.start() // a replacement; the surviving replica takes the job's lock first
	kgwWaitFor(t, 90*time.Second, "the resumed replay to be done", func() bool { return state() == "done" }, rig.logs)
	<-produced
	kgwWaitFor(t, time.Minute, "the live stream to deliver every event to every endpoint", func() bool { return rig.missing() == 0 }, rig.logs)
	rig.check() // live: every event of its tenant, per aggregate in order

	rig.mu.Lock()
	defer rig.mu.Unlock()
	order := map[string]int{}
	inWindow := map[string]*event.Event{}
	for k, e := range rig.produced {
		order[e.ID] = k
	}
	for _, e := range window {
		if e.Headers[0].Value == "t0" {
			inWindow[e.ID] = e
		}
	}
	seen, dups := map[string]bool{}, 0
	last := map[string]int{}
	for _, r := range rig.replayed[0] {
		if r.Job != id {
			t.Errorf("event %s replayed with webhook-replay %q, want the job's id %s", r.ID, r.Job, id)
		}
		e := inWindow[r.ID]
		if e == nil {
			t.Errorf("event %s replayed: not an event of hooks/e0000's window", r.ID)
			continue
		}
		if seen[r.ID] {
			dups++
			continue
		}
		seen[r.ID] = true
		if o, ok := last[e.AggregateID]; ok && o > order[r.ID] {
			t.Errorf("replay: %s first received after a later event of aggregate %s", r.ID, e.AggregateID)
		}
		last[e.AggregateID] = order[r.ID]
	}
	if len(seen) != len(inWindow) {
		t.Errorf("the replay sent %d of the window's %d events to hooks/e0000", len(seen), len(inWindow))
	}
	if dups > gatewayReplayMaxInFlight {
		t.Errorf("the resumed replay sent %d events twice, more than replay.max_in_flight (%d): it did not resume from its progress", dups, gatewayReplayMaxInFlight)
	}
	if s := stateOf(id2); s != "cancelled" {
		t.Errorf("the cancelled job is %q in the end", s)
	}
	for i := 1; i < rig.n; i++ {
		if len(rig.replayed[i]) > 0 {
			t.Errorf("endpoint e%04d got %d replayed events: only hooks/e0000 was replayed", i, len(rig.replayed[i]))
		}
	}
	t.Logf("replayed to hooks/e0000: %d of the window's %d events (%d passed over), %d duplicates; live: %d events to %d endpoints",
		len(seen), len(inWindow), len(window)-len(inWindow), dups, len(rig.produced), rig.n)
	for _, cmd := range rig.procs {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
	}
	if t.Failed() {
		rig.logs()
	}
}

// endpoints replay --kafka refuses what it cannot do, saying what to give
// instead; replay cancel --gateway refuses an unknown job.
func TestKafkaGatewayReplayRefusesBadInput(t *testing.T) {
	if testing.Short() {
		t.Skip("process run skipped with -short")
	}
	rig := newKafkaGatewayRig(t, 2, 2, 2, 0, "queue: 16")
	ctx := context.Background()
	since := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	base := []string{"endpoints", "replay", "--config", rig.cfg}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"an unknown kafka sink", []string{"hooks/e0000", "--kafka", "nosuch", "--since", since}, `no kafka sink named "nosuch"`},
		{"a GTID start", []string{"hooks/e0000", "--kafka", "orders", "--from", "0-1-5"}, "bounded by times"},
		{"an unknown endpoint", []string{"hooks/nosuch", "--kafka", "orders", "--since", since}, `has no endpoint "nosuch"`},
		{"a where filter", []string{"hooks/e0000", "--kafka", "orders", "--since", since, "--where", "1=1"}, "--where selects rows of the outbox table"},
		{"a time in the future", []string{"hooks/e0000", "--kafka", "orders", "--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, "is in the future"},
		{"an empty window (nothing produced)", []string{"hooks/e0000", "--kafka", "orders", "--since", since}, "the window is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := run(ctx, append(base, tc.args...)...)
			if code == 0 || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, output:\n%s\nwant an error containing %q", code, out, tc.want)
			}
		})
	}
	if code, out := run(ctx, "replay", "list", "--gateway", "--config", rig.cfg); code != 0 || !strings.Contains(out, "no replay jobs") {
		t.Fatalf("replay list --gateway before any gateway ran: exit %d, output:\n%s", code, out)
	}
	if code, out := run(ctx, "replay", "cancel", "--gateway", "--config", rig.cfg, "20261202-000000-abcd"); code == 0 || !strings.Contains(out, "no such replay job") {
		t.Fatalf("replay cancel --gateway of an unknown job: exit %d, output:\n%s", code, out)
	}
	if code, out := run(ctx, "replay", "list", "--gateway", "--config", rig.cfg); code != 0 || !strings.Contains(out, "no replay jobs") {
		t.Fatalf("replay list --gateway: exit %d, output:\n%s", code, out)
	}
}
