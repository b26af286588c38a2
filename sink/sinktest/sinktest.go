// Package sinktest is the conformance suite every sink passes against its
// real server: the contract of package sink, as the pipeline relies on it.
//
// A sink's test calls Run with a Harness that makes a fresh destination per
// case (a unique stream, key, queue or topic on the server) and reads back
// what the server holds. The cases:
//
//   - an acknowledged batch is on the server, with ids, types, aggregate,
//     source position, extra columns and payload bytes unchanged;
//   - per aggregate, the order on the server is commit order;
//   - a permanent failure of one message fails that message only (it goes to
//     the dead-letter store) and the rest of the batch is delivered, in order;
//   - an event over one of the destination's hard limits (Harness.Limits:
//     a case each) fails alone, permanently, on the first attempt, with an
//     error wrapping sink.ErrOverLimit, never reaches the server, and the
//     rest of its batch and the next batch arrive;
//   - a retriable failure in the middle of a batch (the link cut after a few
//     KiB) loses nothing and keeps per-aggregate order of first deliveries
//     while the pipeline retries what failed;
//   - a write while the server is unreachable ends within its deadline with
//     retriable failures, and the sink delivers once the server is back;
//   - Close returns promptly, and after it every acknowledged event is on the
//     server (a Submitter's every ack has been called).
//
// The suite drives the sink as the pipeline does: Connect once, Write (or
// Submit) one batch at a time, retry only the failed events, in batch order,
// after a short wait, and count permanent failures as dead letters.
//
// Servers: Require dials a server and skips the test when it is unreachable,
// except under CI=true, where it fails: CI must run every sink's suite.
// StartServer runs a private server binary (nats-server, redis-server) for
// tests that need one configured their own way. RunProbes checks a
// sink.Prober (what `outbox-relay check` runs) against a table of cases.
package sinktest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Carries says which event fields a destination keeps beside the id and the
// payload bytes, which every sink must deliver unchanged.
type Carries struct {
	Type, Aggregate, Headers, Source bool
	// Trace: the W3C trace context (event.TraceParent, TraceState).
	Trace bool
}

// All: every field.
var All = Carries{Type: true, Aggregate: true, Headers: true, Source: true, Trace: true}

// Received is one message as the server holds it, decoded by the harness.
type Received struct {
	ID            string
	Type          string
	AggregateType string
	AggregateID   string
	Table         string
	GTID          string
	BinlogFile    string
	BinlogPos     uint32
	Headers       map[string]string // the event's extra columns
	// TraceParent and TraceState as the destination holds them ("" when absent).
	TraceParent, TraceState string
	Payload                 []byte
}

// Fault breaks the way from a sink to its server, retriably.
type Fault interface {
	// Break makes every send fail from now on until Heal.
	Break()
	// BreakMidWrite lets the next write start and makes it fail part way
	// (a few KiB in, or after the first requests), and every send after
	// that until Heal.
	BreakMidWrite()
	// Heal lets sends through again.
	Heal()
}

// Target is one fresh destination on the server and a sink for it.
type Target struct {
	// Sink is a new, unconnected sink delivering to the destination.
	Sink sink.Sink
	// Read returns every message the destination holds, in its order (for
	// a partitioned destination: each partition's order, interleaved). A
	// destination that says where it ends (Kafka's end offsets) is read to
	// there; another is waited for until it holds at least n. Either wait
	// is bounded only against a hang: a slow read must not look like a
	// loss.
	Read func(t *testing.T, n int) []Received
	// Fault breaks the sink's way to the server. Nil: the cases that need
	// it are skipped, naming why.
	Fault Fault
	// Poison changes e so that the server rejects it for good (too large,
	// unroutable, a wrong key type). Nil: the sink has no per-message
	// rejection (stdout).
	Poison func(e *event.Event)
}

// Harness connects the suite to one sink type.
type Harness struct {
	// Carries is what the destination keeps beside id and payload.
	Carries Carries
	// New makes a fresh destination for one case. It registers its own
	// cleanup with t.
	New func(t *testing.T) *Target
	// Limits are the destination's hard limits: a case each.
	Limits []Limit
}

// Limit is one hard limit of a destination (a size or a form the protocol,
// the client library or the server cannot take). The suite changes one
// event of a batch with Exceed and checks that the sink fails that event
// alone, permanently, on the first attempt (it goes to the dead letters),
// that no message of it is on the server, and that the rest of the batch and
// the next batch arrive.
type Limit struct {
	// Name says what is over the limit: "a message id over AMQP's 255-byte
	// short string".
	Name string
	// Exceed changes e so that it is over the limit.
	Exceed func(e *event.Event)
	// New, when not nil, makes the destination for this case in place of
	// Harness.New (a private server configured with a small limit).
	New func(t *testing.T) *Target
}

// Require dials addr and returns when a server answers there. Otherwise it
// skips the test, or under CI=true fails it: CI runs every sink against its
// real server.
func Require(t testing.TB, what, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err == nil {
		c.Close()
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not reachable at %s under CI=true (.ci/run starts the servers the kinds declare, sink.Kind.Server): %v", what, addr, err)
	}
	t.Skipf("%s is not reachable at %s: %v", what, addr, err)
}

// RequireServer is Require for the server the kind typ declares for its
// tests (sink.Kind.Server), the one CI starts; it fails when typ declares
// none.
func RequireServer(t testing.TB, typ string) {
	t.Helper()
	k, ok := sink.KindOf(typ)
	if !ok || k.Server == nil {
		t.Fatalf("sink kind %q declares no server (sink.Kind.Server): declare the one its tests need, so CI starts it", typ)
	}
	Require(t, k.Server.Name, k.Server.Addr)
}

// Unique returns a short random name part, for per-test streams, keys,
// queues and topics on a shared server.
func Unique() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Events returns n events over aggregates aggregates (round robin), of
// aggregate type "order", with ids prefix-0, prefix-1, ...: JSON payloads,
// one binary payload that is not UTF-8, one empty, extra columns and a
// source position.
func Events(prefix string, n, aggregates int) []*event.Event {
	out := make([]*event.Event, n)
	for i := range out {
		payload := []byte(fmt.Sprintf(`{"n":%d,"text":"héllo \"world\" <&>","list":[1,2,3]}`, i))
		switch i % 37 {
		case 5:
			payload = []byte{0xff, 0x00, 0x80, '\n', 0xfe}
		case 11:
			payload = []byte{}
		}
		typ := "created"
		if i%3 == 1 {
			typ = "order.updated"
		}
		out[i] = &event.Event{
			ID: fmt.Sprintf("%s-%d", prefix, i), AggregateType: "order",
			AggregateID: fmt.Sprintf("agg-%d", i%aggregates), Type: typ, Payload: payload,
			Headers:    []event.Header{{Key: "tenant", Value: fmt.Sprintf("t-%d", i%4)}, {Key: "trace_id", Value: "tr ü " + prefix}},
			Table:      "shop.outbox",
			CommitTime: time.Unix(1700000000+int64(i), 0).UTC(),
			Source:     event.Source{GTID: fmt.Sprintf("0-1-%d", 100+i), File: "mysql-bin.000007", Pos: uint32(4000 + i)},
		}
		switch i % 3 { // a trace context with a state, one without, none
		case 0:
			out[i].TraceParent = fmt.Sprintf("00-%032x-%016x-01", 0xabc000+i, 0x5000+i)
			out[i].TraceState = "vendor=v" + strconv.Itoa(i)
		case 1:
			out[i].TraceParent = fmt.Sprintf("00-%032x-%016x-00", 0xdef000+i, 0x6000+i)
		}
	}
	return out
}

// Run runs every case against h.
func Run(t *testing.T, h Harness) {
	cases := []struct {
		name string
		run  func(t *testing.T, h Harness)
	}{
		{"an acknowledged batch is on the server with every field unchanged", testFields},
		{"per aggregate the server holds the events in commit order", testOrder},
		{"a permanent failure fails that event only and the rest go on", testPermanent},
		{"a retriable failure mid-batch loses nothing and keeps per-aggregate order", testMidBatch},
		{"a write while the server is unreachable fails retriably in time and the sink recovers", testOutage},
		{"close drains and returns", testClose},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, h) })
	}
	for _, l := range h.Limits {
		t.Run("an event with "+l.Name+" is dead-lettered and the next event arrives", func(t *testing.T) { testLimit(t, h, l) })
	}
}

func connect(t *testing.T, tg *Target) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := tg.Sink.Connect(ctx); err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = tg.Sink.Close(ctx) // idempotence is not part of the contract; closed sinks ignore it or error
	})
}

// result is what the pipeline would have made of a delivery.
type result struct {
	attempts  int
	failed    bool  // some attempt failed an event
	dead      []int // indexes dead-lettered, with their error
	deadErr   map[int]error
	firstFail error
}

// settle delivers batch as the pipeline does: the failed events are retried,
// in batch order, alone, until each is acknowledged or permanently failed.
func settle(t *testing.T, s sink.Sink, batch []*event.Event, limit time.Duration) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	pending := make([]int, len(batch))
	for i := range pending {
		pending[i] = i
	}
	r := result{deadErr: map[int]error{}}
	for len(pending) > 0 {
		if ctx.Err() != nil {
			t.Fatalf("after %d attempts over %s, %d events are still not acknowledged (last failure: %v)", r.attempts, limit, len(pending), r.firstFail)
		}
		evs := make([]*event.Event, len(pending))
		for j, i := range pending {
			evs[j] = batch[i]
		}
		wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
		err := sink.Deliver(wctx, s, evs)
		wcancel()
		r.attempts++
		var again []int
		for j, i := range pending {
			e := sink.ErrorFor(err, j)
			if e == nil {
				continue
			}
			r.failed = true
			if r.firstFail == nil {
				r.firstFail = e
			}
			if sink.IsPermanent(e) {
				r.dead = append(r.dead, i)
				r.deadErr[i] = e
				continue
			}
			again = append(again, i)
		}
		pending = again
		if len(pending) > 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	return r
}

// check compares what the server holds with want (in commit order): every
// event is there with its fields, and per aggregate the first deliveries
// are in commit order. Duplicates are allowed only when dups is true. It
// returns the number of duplicates.
func check(t *testing.T, h Harness, want []*event.Event, got []Received, dups bool) int {
	t.Helper()
	byID := make(map[string]*event.Event, len(want))
	for _, e := range want {
		byID[e.ID] = e
	}
	seen := map[string]bool{}
	next := map[string]int{} // aggregate -> position of the next expected first delivery
	order := map[string][]string{}
	for _, e := range want {
		order[e.AggregateID] = append(order[e.AggregateID], e.ID)
	}
	duplicates := 0
	for k, r := range got {
		e := byID[r.ID]
		if e == nil {
			t.Fatalf("message %d has id %q, not one of the events written", k, r.ID)
		}
		compare(t, h.Carries, e, r)
		if seen[r.ID] {
			duplicates++
			continue
		}
		seen[r.ID] = true
		agg := e.AggregateID
		if exp := order[agg][next[agg]]; exp != r.ID {
			t.Fatalf("aggregate %s: first delivery of %s came before %s (commit order %v)", agg, r.ID, exp, order[agg])
		}
		next[agg]++
	}
	var missing []string
	for _, e := range want {
		if !seen[e.ID] {
			missing = append(missing, e.ID)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%d of %d acknowledged events are not on the server: %v", len(missing), len(want), head(missing))
	}
	if duplicates > 0 && !dups {
		t.Fatalf("%d duplicates in a run without failures", duplicates)
	}
	return duplicates
}

func head(s []string) []string {
	if len(s) > 10 {
		return s[:10]
	}
	return s
}

func compare(t *testing.T, c Carries, e *event.Event, r Received) {
	t.Helper()
	if !bytes.Equal(e.Payload, r.Payload) {
		t.Fatalf("event %s: payload %q, want the bytes written %q", e.ID, r.Payload, e.Payload)
	}
	if c.Type && r.Type != e.Type {
		t.Fatalf("event %s: type %q, want %q", e.ID, r.Type, e.Type)
	}
	if c.Aggregate && (r.AggregateType != e.AggregateType || r.AggregateID != e.AggregateID) {
		t.Fatalf("event %s: aggregate %q/%q, want %q/%q", e.ID, r.AggregateType, r.AggregateID, e.AggregateType, e.AggregateID)
	}
	if c.Source && (r.GTID != e.Source.GTID || r.BinlogFile != e.Source.File || r.BinlogPos != e.Source.Pos || r.Table != e.Table) {
		t.Fatalf("event %s: source %q %s:%d table %q, want %q %s:%d table %q", e.ID, r.GTID, r.BinlogFile, r.BinlogPos, r.Table,
			e.Source.GTID, e.Source.File, e.Source.Pos, e.Table)
	}
	if c.Trace && (r.TraceParent != e.TraceParent || r.TraceState != e.TraceState) {
		t.Fatalf("event %s: trace context %q %q, want %q %q", e.ID, r.TraceParent, r.TraceState, e.TraceParent, e.TraceState)
	}
	if c.Headers {
		for _, hd := range e.Headers {
			if v, ok := r.Headers[hd.Key]; !ok || v != hd.Value {
				t.Fatalf("event %s: header %q is %q (present %v), want %q", e.ID, hd.Key, v, ok, hd.Value)
			}
		}
	}
}

func testFields(t *testing.T, h Harness) {
	tg := h.New(t)
	connect(t, tg)
	evs := Events("f"+Unique(), 120, 7)
	r := settle(t, tg.Sink, evs, 30*time.Second)
	if r.attempts != 1 || r.failed {
		t.Fatalf("a batch to a healthy server took %d attempts (first failure: %v)", r.attempts, r.firstFail)
	}
	check(t, h, evs, tg.Read(t, len(evs)), false)
}

func testOrder(t *testing.T, h Harness) {
	tg := h.New(t)
	connect(t, tg)
	evs := Events("o"+Unique(), 600, 3) // 200 deep per aggregate, written in 3 batches
	for i := 0; i < len(evs); i += 200 {
		if r := settle(t, tg.Sink, evs[i:i+200], 60*time.Second); r.failed {
			t.Fatalf("batch at %d failed against a healthy server: %v", i, r.firstFail)
		}
	}
	check(t, h, evs, tg.Read(t, len(evs)), false)
}

func testPermanent(t *testing.T, h Harness) {
	tg := h.New(t)
	if tg.Poison == nil {
		t.Skip("this destination rejects no single message")
	}
	bad := 13
	evs, r := writeOneBad(t, tg, Events("p"+Unique(), 40, 2), bad, tg.Poison, "the poisoned event")
	t.Logf("permanent failure reported as: %v", r.deadErr[bad])
	want := append(append([]*event.Event(nil), evs[:bad]...), evs[bad+1:]...)
	check(t, h, want, tg.Read(t, len(want)), false)
}

func testLimit(t *testing.T, h Harness, l Limit) {
	newTarget := h.New
	if l.New != nil {
		newTarget = l.New
	}
	tg := newTarget(t)
	bad := 7
	evs, r := writeOneBad(t, tg, Events("l"+Unique(), 20, 2), bad, l.Exceed, "the event over the limit")
	if !errors.Is(r.deadErr[bad], sink.ErrOverLimit) {
		t.Errorf("the event over the limit failed with %v, want an error wrapping sink.ErrOverLimit (checked before sending)", r.deadErr[bad])
	}
	t.Logf("over the limit: %v", r.deadErr[bad])
	next := Events("n"+Unique(), 6, 2)
	if r := settle(t, tg.Sink, next, 30*time.Second); r.failed {
		t.Fatalf("the batch after the event over the limit failed: %v", r.firstFail)
	}
	want := append(append(append([]*event.Event(nil), evs[:bad]...), evs[bad+1:]...), next...)
	check(t, h, want, tg.Read(t, len(want)), false)
}

// writeOneBad connects tg and writes evs, event bad of them changed by
// spoil to fail for good (what it is then: "the poisoned event"), and
// holds that it failed alone, permanently, on the first attempt.
func writeOneBad(t *testing.T, tg *Target, evs []*event.Event, bad int, spoil func(*event.Event), what string) ([]*event.Event, result) {
	t.Helper()
	connect(t, tg)
	spoil(evs[bad])
	r := settle(t, tg.Sink, evs, 60*time.Second)
	if len(r.dead) != 1 || r.dead[0] != bad {
		t.Fatalf("dead-lettered %v, want only %s, %d (errors %v; first failure %v)", r.dead, what, bad, r.deadErr, r.firstFail)
	}
	if r.attempts != 1 {
		t.Errorf("%s took %d attempts; it must be reported as permanent on the first", what, r.attempts)
	}
	return evs, r
}

// faulty returns h's target, connected, for a test that injects a fault;
// the test is skipped when the destination has none.
func faulty(t *testing.T, h Harness) *Target {
	tg := h.New(t)
	if tg.Fault == nil {
		t.Skip("this destination has no fault to inject")
	}
	connect(t, tg)
	return tg
}

func testMidBatch(t *testing.T, h Harness) {
	tg := faulty(t, h)
	evs := Events("m"+Unique(), 400, 10)
	tg.Fault.BreakMidWrite()
	var heal sync.WaitGroup
	heal.Go(func() { time.Sleep(1500 * time.Millisecond); tg.Fault.Heal() })
	r := settle(t, tg.Sink, evs, 90*time.Second)
	heal.Wait()
	if len(r.dead) > 0 {
		t.Fatalf("a broken link failed %d events permanently (event %d: %v); it is retriable", len(r.dead), r.dead[0], r.deadErr[r.dead[0]])
	}
	_, submitter := tg.Sink.(sink.Submitter)
	if !submitter && !r.failed {
		t.Fatal("the write succeeded whole: the fault did not fire, the case tested nothing")
	}
	got := tg.Read(t, len(evs))
	d := check(t, h, evs, got, true)
	t.Logf("mid-batch failure: %d attempts, %d messages for %d events (%d duplicates); first failure: %v", r.attempts, len(got), len(evs), d, r.firstFail)
}

func testOutage(t *testing.T, h Harness) {
	tg := faulty(t, h)
	evs := Events("u"+Unique(), 60, 4)
	if r := settle(t, tg.Sink, evs[:20], 30*time.Second); r.failed {
		t.Fatalf("before the outage: %v", r.firstFail)
	}
	tg.Fault.Break()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	start := time.Now()
	err := sink.Deliver(ctx, tg.Sink, evs[20:40])
	took := time.Since(start)
	cancel()
	if took > 8*time.Second {
		t.Errorf("a write to an unreachable server took %s with a 3s deadline", took)
	}
	if err == nil {
		t.Fatal("a write to an unreachable server succeeded")
	}
	for i := range 20 {
		if e := sink.ErrorFor(err, i); e != nil && sink.IsPermanent(e) {
			t.Fatalf("an outage failed event %d permanently: %v", i, e)
		}
	}
	time.Sleep(500 * time.Millisecond)
	tg.Fault.Heal()
	if r := settle(t, tg.Sink, evs[20:], 60*time.Second); len(r.dead) > 0 {
		t.Fatalf("after the outage: dead letters %v", r.dead)
	}
	check(t, h, evs, tg.Read(t, len(evs)), true)
}

func testClose(t *testing.T, h Harness) {
	tg := h.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := tg.Sink.Connect(ctx); err != nil {
		t.Fatalf("connect: %v", err)
	}
	evs := Events("c"+Unique(), 50, 5)
	if r := settle(t, tg.Sink, evs, 30*time.Second); r.failed {
		t.Fatalf("write: %v", r.firstFail)
	}
	more := Events("c2"+Unique(), 10, 5)
	acks := 0
	var mu sync.Mutex
	if sub, ok := tg.Sink.(sink.Submitter); ok {
		sub.Submit(ctx, more, func(int, error) { mu.Lock(); acks++; mu.Unlock() })
	}
	start := time.Now()
	if err := tg.Sink.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("close took %s", d)
	}
	if _, ok := tg.Sink.(sink.Submitter); ok {
		mu.Lock()
		n := acks
		mu.Unlock()
		if n != len(more) {
			t.Fatalf("close returned with %d of %d acks called", n, len(more))
		}
	}
	got := tg.Read(t, len(evs))
	var ours []Received
	for _, r := range got {
		if strings.HasPrefix(r.ID, evs[0].ID[:strings.LastIndexByte(evs[0].ID, '-')+1]) {
			ours = append(ours, r)
		}
	}
	check(t, h, evs, ours, false)
}

// ProbeCase is one case of a sink's Probe test: the sink's config, and what
// the probe must say. With Problem "", it passes with Found in its text;
// otherwise its error holds Problem, and when Fix is not "" it is a
// *sink.Problem whose Fix holds Fix.
type ProbeCase[C any] struct {
	Name                string
	Config              C
	Found, Problem, Fix string
}

// ProbingSink is a sink that can probe its destination.
type ProbingSink interface {
	sink.Sink
	sink.Prober
}

// RunProbes makes a sink of each case's config with newSink, probes and
// closes it, and checks what the probe said.
func RunProbes[C any](t *testing.T, newSink func(C) (ProbingSink, error), cases []ProbeCase[C]) {
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			s, err := newSink(tc.Config)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			found, err := s.Probe(context.Background())
			var p *sink.Problem
			switch {
			case tc.Problem == "":
				if err != nil || !strings.Contains(found, tc.Found) {
					t.Fatalf("probe = %q, %v; want a pass saying %q", found, err, tc.Found)
				}
			case err == nil || !strings.Contains(err.Error(), tc.Problem):
				t.Fatalf("probe = %q, %v; want an error saying %q", found, err, tc.Problem)
			case tc.Fix != "" && (!errors.As(err, &p) || !strings.Contains(p.Fix, tc.Fix)):
				t.Fatalf("probe error %v; want a problem whose fix says %q", err, tc.Fix)
			}
		})
	}
}

// StartServer runs a private server of the binary name (nats-server,
// redis-server) on a free loopback port until the test ends, with the
// arguments args returns for that port, and returns its address once it
// accepts connections. A missing binary skips the test, or fails it under
// CI=true.
func StartServer(t *testing.T, name string, args func(port int) []string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed under CI=true: %v", name, err)
		}
		t.Skipf("%s is not installed: %v", name, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, args(port)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s did not start", name, addr)
		}
	}
}
