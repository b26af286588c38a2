package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// The scenario in the scaled-out gateway: an endpoint row is
// invalid (its egress policy refuses its url) while 40 events are
// committed, and the consumer group commits its offsets past them. Once
// the row is fixed, the endpoint gets all 40: it kept a cursor of its own
// where it came into being. Two rows: one invalid when the replica starts,
// one inserted invalid while it runs; the replica is stopped and another
// takes the partitions over (from the committed offset) before the fix.
func TestKafkaGatewayInvalidRowGetsTheEventsCommittedWhileItWas(t *testing.T) {
	if testing.Short() {
		t.Skip("process run skipped with -short")
	}
	rig := newKafkaGatewayRig(t, 1, 1, 2, 0, "queue: 64")
	rig.args = []string{"--table-poll", "200ms"}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := rig.db.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	// Receivers 1 and 2; the egress policy allows 127.0.0.1 only.
	exec("INSERT INTO outbox_endpoints (id, url, tenant) VALUES ('bad-start', 'http://10.1.2.3/e/1', 't0')")
	rig.start()
	rig.settled(1)
	reads := rig.tableReads()
	exec("INSERT INTO outbox_endpoints (id, url, tenant) VALUES ('bad-live', 'http://10.1.2.4/e/2', 't0')")
	kgwWaitFor(t, 30*time.Second, "the replica to read the inserted row", func() bool { return rig.tableReads() > reads }, rig.logs)
	rig.produce(context.Background(), 40, 10, 0)
	all := rig.tenantEvents("t0", 0)
	kgwWaitFor(t, 60*time.Second, "the static endpoint to get the 40 events", func() bool { return len(rig.received(0)) >= len(all) }, rig.logs)
	kgwWaitFor(t, 60*time.Second, "the group to commit its offsets past the 40 events", rig.committedAtEnd, rig.logs)
	b, _ := os.ReadFile(filepath.Join(rig.dir, "replica-0.log"))
	for _, want := range []string{"endpoints that do not run (their table row is off or cannot be used) had no cursor", "endpoint does not run: its cursor is kept here"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the replica's log does not say %q", want)
		}
	}
	// The partitions change owner: the new one starts at the committed
	// offset, past the 40.
	if err := rig.procs[0].Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = rig.procs[0].Wait()
	rig.start()
	assigned := regexp.MustCompile(`kafka gateway: partitions assigned" group=\S+ generation=\d+ partitions=2`)
	kgwWaitFor(t, time.Minute, "the second replica to take both partitions", func() bool {
		b, _ := os.ReadFile(filepath.Join(rig.dir, "replica-1.log"))
		return assigned.Match(b)
	}, rig.logs)
	exec("UPDATE outbox_endpoints SET url = ? WHERE id = 'bad-start'", rig.url+"/e/1")
	exec("UPDATE outbox_endpoints SET url = ? WHERE id = 'bad-live'", rig.url+"/e/2")
	kgwWaitFor(t, 60*time.Second, "both fixed rows' endpoints to get the 40 events committed while they were invalid", func() bool {
		return len(rig.received(1)) >= len(all) && len(rig.received(2)) >= len(all)
	}, func() {
		t.Logf("bad-start got %d, bad-live %d of %d", len(rig.received(1)), len(rig.received(2)), len(all))
		rig.logs()
	})
	rig.produce(context.Background(), 10, 10, 0)
	all = rig.tenantEvents("t0", 0)
	kgwWaitFor(t, 60*time.Second, "every endpoint to get every event", func() bool {
		return len(rig.received(0)) >= len(all) && len(rig.received(1)) >= len(all) && len(rig.received(2)) >= len(all)
	}, rig.logs)
	for i := range 3 {
		got := rig.received(i)
		for _, id := range all {
			if got[id] == 0 {
				t.Errorf("receiver %d never got %s", i, id)
			}
		}
	}
	if t.Failed() {
		rig.logs()
	}
}

// committedAtEnd reports whether the gateway's consumer group has
// committed, on every partition, the partition's end.
func (rig *kafkaGatewayRig) committedAtEnd() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client := &kafkago.Client{Addr: kafkago.TCP(rig.brokers...)}
	parts := make([]int, rig.partitions)
	var last []kafkago.OffsetRequest
	for i := range parts {
		parts[i] = i
		last = append(last, kafkago.LastOffsetOf(i))
	}
	ends, err := client.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{"orders": last}})
	if err != nil {
		return false
	}
	committed, err := client.OffsetFetch(ctx, &kafkago.OffsetFetchRequest{GroupID: "outbox-relay-gateway-hooks", Topics: map[string][]int{"orders": parts}})
	if err != nil {
		return false
	}
	end := map[int]int64{}
	for _, p := range ends.Topics["orders"] {
		end[p.Partition] = p.LastOffset
	}
	n := 0
	for _, p := range committed.Topics["orders"] {
		if p.Error != nil || p.CommittedOffset < end[p.Partition] {
			return false
		}
		n++
	}
	return n == rig.partitions && len(end) == rig.partitions
}
