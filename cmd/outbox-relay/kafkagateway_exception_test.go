package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/gateway/kafkasource"
	"github.com/outbox-relay/outbox-relay/gateway/scaled"
)

// listen gives the replicas' metrics a loopback address (one replica at
// a time can run).
func (rig *kafkaGatewayRig) listen() string {
	rig.t.Helper()
	addr := freeAddr(rig.t.(*testing.T))
	f, err := os.OpenFile(rig.cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = fmt.Fprintf(f, "http: {listen: %s, pprof: true}\n", addr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		rig.t.Fatal(err)
	}
	return addr
}

// pipelineGoroutines counts the goroutines of the replica listening on
// listen that run a pipeline (pprof's goroutine dump).
func pipelineGoroutines(t *testing.T, listen string) int {
	t.Helper()
	n := 0
	for _, g := range strings.Split(fetch(t, "http://"+listen+"/debug/pprof/goroutine?debug=2"), "\n\n") {
		if strings.Contains(g, "outbox-relay/pipeline.(*Pipeline).Run") {
			n++
		}
	}
	return n
}

// cursorTable opens the rig's cursor table as the replicas do (creating
// it, before any has started).
func (rig *kafkaGatewayRig) cursorTable() *checkpoint.MySQL {
	rig.t.Helper()
	st, err := checkpoint.OpenMySQL(context.Background(), rig.db, scaled.DefaultCursorTable, nil)
	if err != nil {
		rig.t.Fatal(err)
	}
	return st
}

// cursorsOf reads the cursor table at once (one query): the endpoints' own
// cursors by key, and the partitions' shared cursors by partition.
func (rig *kafkaGatewayRig) cursorsOf(table *checkpoint.MySQL) (own map[string]checkpoint.Checkpoint, shared map[int]checkpoint.Checkpoint) {
	rig.t.Helper()
	all, err := table.List(context.Background())
	if err != nil {
		rig.t.Fatal(err)
	}
	own, shared = map[string]checkpoint.Checkpoint{}, map[int]checkpoint.Checkpoint{}
	for key, cp := range all {
		switch {
		case strings.HasPrefix(key, gateway.SharedKey("hooks@orders[")):
			var p int
			if _, err := fmt.Sscanf(strings.TrimPrefix(key, gateway.SharedKey("hooks")), "@orders[%d]", &p); err != nil {
				rig.t.Fatalf("shared cursor key %q: %v", key, err)
			}
			shared[p] = cp
		case checkpoint.Reserved(key):
		default:
			own[key] = cp
		}
	}
	return own, shared
}

// recordOf is where an event is in the topic.
type recordOf struct {
	partition int
	offset    int64
}

// records reads the topic back: where each produced event is.
func (rig *kafkaGatewayRig) records() map[string]recordOf {
	rig.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(rig.brokers...), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		rig.t.Fatal(err)
	}
	defer cl.Close()
	rig.mu.Lock()
	want := len(rig.produced)
	rig.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := map[string]recordOf{}
	for len(out) < want && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == "id" {
					out[string(h.Value)] = recordOf{int(r.Partition), r.Offset}
				}
			}
		})
	}
	if len(out) < want {
		rig.t.Fatalf("read back %d of the %d events produced", len(out), want)
	}
	return out
}

// offsets returns the group's committed offset and the end of every
// partition.
func (rig *kafkaGatewayRig) offsets() (committed, end map[int]int64) {
	rig.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(rig.brokers...))
	if err != nil {
		rig.t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := adm.FetchOffsets(ctx, "outbox-relay-gateway-hooks")
	if errors.Is(err, kerr.GroupIDNotFound) { // no replica has joined yet
		err = nil
	}
	if err != nil {
		rig.t.Fatal(err)
	}
	e, err := adm.ListEndOffsets(ctx, "orders")
	if err != nil {
		rig.t.Fatal(err)
	}
	committed, end = map[int]int64{}, map[int]int64{}
	for p := range rig.partitions {
		committed[p] = -1
		if o, ok := c.Lookup("orders", int32(p)); ok && o.Err == nil {
			committed[p] = o.At
		}
		if o, ok := e.Lookup("orders", int32(p)); ok && o.Err == nil {
			end[p] = o.Offset
		}
	}
	return committed, end
}

// offsetOf is the offset of the next record a cursor of the topic stands
// before.
func offsetOf(t testing.TB, cp checkpoint.Checkpoint) int64 {
	t.Helper()
	_, off, ok := kafkasource.Offset(cp.Position)
	if !ok {
		t.Fatalf("cursor %s is not a position in the topic", cp.Position)
	}
	return off
}

// moment is the cursor table read at once and what the receivers had got
// just after.
type moment struct {
	own       map[string]checkpoint.Checkpoint
	shared    map[int]checkpoint.Checkpoint
	delivered []map[string]bool
}

func (rig *kafkaGatewayRig) moment(table *checkpoint.MySQL) moment {
	m := moment{}
	m.own, m.shared = rig.cursorsOf(table)
	rig.mu.Lock()
	defer rig.mu.Unlock()
	for i := range rig.n {
		got := map[string]bool{}
		for _, id := range rig.got[i] {
			got[id] = true
		}
		m.delivered = append(m.delivered, got)
	}
	return m
}

// The scaled-out gateway keeps cursors by exception: per partition, one
// shared cursor, and an endpoint's own only while it is behind it. 200
// endpoints of one tenant each, idle, cost the replica no goroutine; each
// gets one event and goes idle again: no pipeline is left running, and the
// cursor table holds the partitions' shared cursors and nothing else
// (before, 200 × 3 rows). Then three of them get traffic, and the replica
// is SIGKILLed mid-stream and another takes over:
//   - at every moment the table was read (what a SIGKILL then would
//     leave), no endpoint's cursor (its own, or its partition's shared
//     one) was past an event of its it had not received;
//   - the table never held more than the busy endpoints' own cursors, and
//     the idle endpoints received nothing twice; the busy ones at most
//     their in-flight window per partition;
//   - the group's committed offset (what Kafka's tools and retention
//     alerts see) is the oldest cursor: with one endpoint's receiver down,
//     its own cursor, behind the shared ones; once it is back, the end.
func TestKafkaGatewayKeepsCursorsByException(t *testing.T) {
	if testing.Short() {
		t.Skip("process run skipped with -short")
	}
	const n, partitions = 200, 3
	busy := []int{0, 1, 2}
	rig := newKafkaGatewayRig(t, n, n, partitions, 0, "queue: 16, max_catch_up: 2")
	listen := rig.listen()
	table := rig.cursorTable()
	rig.start()
	rig.settled(1)
	goroutines := func() float64 { return scrape(t, "http://"+listen+"/metrics")["go_goroutines"] }
	kgwWaitFor(t, time.Minute, "the replica's metrics", func() bool {
		resp, err := http.Get("http://" + listen + "/metrics")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, rig.logs)
	idle := goroutines()
	if idle >= n {
		t.Errorf("a replica whose %d endpoints are idle on %d partitions runs %.0f goroutines: one per endpoint or more", n, partitions, idle)
	}
	ctx := t.Context()
	rig.produce(ctx, n, 50, 0) // one event for each endpoint
	kgwWaitFor(t, time.Minute, "every endpoint to receive its event", func() bool { return rig.missing() == 0 }, rig.logs)
	kgwWaitFor(t, time.Minute, "the shared cursors to pass the endpoints' own cursors, deleted with them", func() bool {
		own, shared := rig.cursorsOf(table)
		return len(own) == 0 && len(shared) == partitions
	}, rig.logs)
	// Each woken endpoint was let go once it had saved: none runs a
	// pipeline any more. (The receivers' keep-alive connections, pooled
	// per host, not per endpoint, close after 30 s idle.)
	pipelines := 0
	kgwWaitFor(t, time.Minute, "the endpoints' pipelines to end once they are idle again", func() bool {
		pipelines = pipelineGoroutines(t, listen)
		return pipelines == 0
	}, func() { t.Logf("%d goroutines of endpoints' pipelines left", pipelines) })
	t.Logf("goroutines: %.0f with %d endpoints idle on %d partitions, %.0f once each has had an event and gone idle (none of a pipeline)", idle, n, partitions, goroutines())

	// Traffic to three endpoints; the replica is killed mid-stream.
	rig.only = busy
	var moments []moment
	most := 0
	for b := range 30 {
		// Read before the batch is produced: its events are delivered
		// after, however fast the replica caught up with the batches
		// before (read after, a quick replica had nothing left to send).
		from := rig.receipts.Load()
		rig.produce(ctx, 30, 30, 0)
		if b == 10 {
			kgwWaitFor(t, 30*time.Second, "deliveries under way", func() bool { return rig.receipts.Load() > from }, rig.logs)
			if err := rig.procs[0].Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = rig.procs[0].Wait()
			rig.start()
		}
		m := rig.moment(table)
		most = max(most, len(m.own))
		moments = append(moments, m)
	}
	kgwWaitFor(t, time.Minute, "every endpoint to receive every event of its tenant", func() bool { return rig.missing() == 0 }, rig.logs)
	for range 10 { // and while it drains what it holds
		m := rig.moment(table)
		most = max(most, len(m.own))
		moments = append(moments, m)
	}
	dups := rig.check()
	for i, d := range dups {
		switch {
		case i < len(busy) && d > partitions*kgwMaxInFlight:
			t.Errorf("busy endpoint %d received %d duplicates; its in-flight window bounds them at %d", i, d, partitions*kgwMaxInFlight)
		case i >= len(busy) && d > 0:
			t.Errorf("idle endpoint %d received %d events twice after the SIGKILL", i, d)
		}
	}
	if bound := len(busy) * partitions; most > bound {
		t.Errorf("the cursor table held %d cursors of endpoints' own with %d endpoints, %d of them busy; want at most %d (the busy ones per partition)", most, n, len(busy), bound)
	}
	at := rig.records()
	checked := 0
	for k, m := range moments {
		for i := range rig.n {
			tenant := fmt.Sprintf("t%d", i)
			for p := range partitions {
				cp, ok := m.own[fmt.Sprintf("hooks/e%04d@orders[%d]", i, p)]
				if !ok {
					if cp, ok = m.shared[p]; !ok {
						continue
					}
				}
				upTo := offsetOf(t, cp)
				for _, e := range rig.produced {
					if r := at[e.ID]; e.Headers[0].Value == tenant && r.partition == p && r.offset < upTo && !m.delivered[i][e.ID] {
						t.Fatalf("moment %d: endpoint %d's cursor on partition %d is at offset %d, past its event %s (offset %d) it had not received: a SIGKILL then loses it", k, i, p, upTo, e.ID, r.offset)
					}
				}
				checked++
			}
		}
	}
	t.Logf("%d moments, %d cursors checked; at most %d own cursors in the table; duplicates of the busy endpoints: %v", len(moments), checked, most, dups[:len(busy)])

	// One endpoint's receiver down, then traffic to the others only: the
	// stream moves on past it on some partition, where the shared cursor
	// passes its own cursor, which holds the committed offset back.
	down := fmt.Sprintf("hooks/e%04d@orders[", busy[0])
	rig.down.Store(int64(busy[0]) + 1)
	before := len(rig.produced)
	rig.produce(ctx, 30, 30, 0)
	rig.only = busy[1:]
	rig.produce(ctx, 30, 30, 0)
	for _, i := range busy[1:] {
		want := rig.tenantEvents(fmt.Sprintf("t%d", i), before)
		kgwWaitFor(t, time.Minute, fmt.Sprintf("endpoint %d to receive its events", i), func() bool {
			got := rig.received(i)
			for _, id := range want {
				if got[id] == 0 {
					return false
				}
			}
			return true
		}, rig.logs)
	}
	// leastOf is the least of each partition's shared cursor and the own
	// cursors on it; passed, the partitions whose shared cursor is past the
	// down endpoint's own cursor (neither moves back, nor its own while it
	// is down).
	leastOf := func() (least map[int]int64, passed []int) {
		own, shared := rig.cursorsOf(table)
		least = map[int]int64{}
		for p := range partitions {
			cp, ok := shared[p]
			if !ok {
				return nil, nil
			}
			least[p] = offsetOf(t, cp)
			if mine, ok := own[fmt.Sprintf("%s%d]", down, p)]; ok && offsetOf(t, mine) < least[p] {
				passed = append(passed, p)
			}
		}
		for key, cp := range own {
			var p int
			if _, err := fmt.Sscanf(key[strings.LastIndexByte(key, '@'):], "@orders[%d]", &p); err != nil {
				t.Fatalf("cursor key %q: %v", key, err)
			}
			least[p] = min(least[p], offsetOf(t, cp))
		}
		return least, passed
	}
	var least map[int]int64
	var passed []int
	kgwWaitFor(t, time.Minute, "some partition's shared cursor to pass the own cursor of the endpoint whose receiver is down", func() bool {
		least, passed = leastOf()
		return len(passed) > 0
	}, func() { t.Logf("least cursors %v", least); rig.logs() })
	var committed map[int]int64
	kgwWaitFor(t, time.Minute, "the committed offsets to be the least of the shared cursors and the endpoints' own", func() bool {
		least, passed = leastOf()
		committed, _ = rig.offsets()
		for p := range partitions {
			if committed[p] != least[p] {
				return false
			}
		}
		return true
	}, func() { t.Logf("committed %v, least cursors %v", committed, least); rig.logs() })
	at = rig.records()
	for _, e := range rig.produced[before:] {
		if r := at[e.ID]; e.Headers[0].Value == fmt.Sprintf("t%d", busy[0]) && committed[r.partition] > r.offset {
			t.Errorf("partition %d's committed offset %d is past event %s (offset %d) of the endpoint whose receiver is down", r.partition, committed[r.partition], e.ID, r.offset)
		}
	}
	_, shared := rig.cursorsOf(table)
	for _, p := range passed {
		if s := offsetOf(t, shared[p]); committed[p] >= s {
			t.Errorf("partition %d's committed offset %d is not before its shared cursor %d: the down endpoint's own cursor does not hold it back", p, committed[p], s)
		}
	}
	t.Logf("receiver %d down: committed offsets %v; the shared cursor passed its own cursor on partitions %v", busy[0], committed, passed)
	rig.down.Store(0)
	kgwWaitFor(t, time.Minute, "every endpoint to receive every event of its tenant", func() bool { return rig.missing() == 0 }, rig.logs)
	kgwWaitFor(t, time.Minute, "the committed offsets to reach the partitions' ends", func() bool {
		committed, end := rig.offsets()
		for p := range partitions {
			if committed[p] != end[p] {
				return false
			}
		}
		return true
	}, func() { c, e := rig.offsets(); t.Logf("committed %v, ends %v", c, e); rig.logs() })
	_ = rig.procs[1].Process.Signal(syscall.SIGTERM)
	if err := rig.procs[1].Wait(); err != nil {
		t.Errorf("replica 1 exited with %v after SIGTERM", err)
	}
	if t.Failed() {
		rig.logs()
	}
}

// exactly reports whether receiver i got the events ids, each once, and
// nothing else (so far: ok false while some are still to come).
func (rig *kafkaGatewayRig) exactly(i int, ids []string) (ok bool, wrong string) {
	got := rig.received(i)
	for _, id := range ids {
		if got[id] == 0 {
			return false, ""
		}
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	for id, k := range got {
		switch {
		case !want[id]:
			return false, fmt.Sprintf("received %s, which it had before its cursor or is not of its tenant", id)
		case k > 1:
			return false, fmt.Sprintf("received %s %d times", id, k)
		}
	}
	return true, ""
}

// A cursor table of a version before the shared cursors (a cursor per
// endpoint per partition, none shared) works: every endpoint resumes from
// its own cursor on each partition (half of them at the first record,
// half at the end) and gets every event after it once; then the shared
// cursors pass those cursors and they are deleted; a replica that starts
// from what is left then sends nothing twice.
func TestKafkaGatewayAnOldCursorTableRestartsWithoutLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("process run skipped with -short")
	}
	const n, groups, partitions = 20, 5, 3
	rig := newKafkaGatewayRig(t, n, groups, partitions, 0, "queue: 16")
	table := rig.cursorTable()
	ctx := t.Context()
	rig.produce(ctx, 150, 30, 0) // before the old cursors
	_, end := rig.offsets()
	old := map[string]checkpoint.Checkpoint{}
	now := time.Now().UTC()
	for i := range n {
		for p := range partitions {
			at := end[p]
			if i%2 == 0 {
				at = 0
			}
			old[fmt.Sprintf("hooks/e%04d@orders[%d]", i, p)] = checkpoint.Checkpoint{Flavor: "kafka",
				Position: kafkasource.Position("orders", p, at), CommitTime: now, UpdatedAt: now}
		}
	}
	if err := table.SaveMany(ctx, old); err != nil {
		t.Fatal(err)
	}
	a := len(rig.produced)
	want := func(i int) []string {
		from := a
		if i%2 == 0 {
			from = 0
		}
		return rig.tenantEvents(fmt.Sprintf("t%d", i%groups), from)
	}
	receivedAll := func(what string) {
		t.Helper()
		for i := range n {
			var wrong string
			kgwWaitFor(t, time.Minute, fmt.Sprintf("endpoint %d %s", i, what), func() bool {
				var ok bool
				ok, wrong = rig.exactly(i, want(i))
				return ok || wrong != ""
			}, rig.logs)
			if wrong != "" {
				t.Fatalf("endpoint %d %s", i, wrong)
			}
		}
	}
	rig.start()
	rig.produce(ctx, 90, 30, 0)
	receivedAll("to receive every event of its tenant after its old cursor, once")
	kgwWaitFor(t, time.Minute, "the shared cursors to pass the old cursors, deleted with them", func() bool {
		own, shared := rig.cursorsOf(table)
		return len(own) == 0 && len(shared) == partitions
	}, rig.logs)
	if err := rig.procs[0].Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := rig.procs[0].Wait(); err != nil {
		t.Errorf("replica 0 exited with %v after SIGTERM", err)
	}
	rig.start()
	rig.produce(ctx, 60, 30, 0)
	receivedAll("to receive the events after the restart, and nothing twice")
	_ = rig.procs[1].Process.Signal(syscall.SIGTERM)
	if err := rig.procs[1].Wait(); err != nil {
		t.Errorf("replica 1 exited with %v after SIGTERM", err)
	}
	if t.Failed() {
		rig.logs()
	}
}
