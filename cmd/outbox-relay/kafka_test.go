package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// The relay process, with Kafka as its sink, is SIGKILLed mid-stream several
// times: every event ends up in the topic, and an event is there twice only
// if it came after the checkpoint the relay resumed from.
func TestKafkaCrashRunAtLeastOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("crash run skipped with -short")
	}
	bin := buildBinary(t)
	k, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	srv := testserver.Start(t, testserver.Options{ServerID: 11})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "relay.yaml")
	cpPath := filepath.Join(dir, "cp.json")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: 950, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 100ms}
delivery: {batch_size: 200}
sinks:
  - name: kafka
    type: kafka
    kafka: {brokers: [%s], create_topics: {enabled: true, partitions: 4}}
log: {level: warn}
`, srv.Port, dbname, cpPath, k.ListenAddrs()[0])), 0o600)
	logf, _ := os.Create(filepath.Join(dir, "relay.log"))
	defer logf.Close()
	start := func() *exec.Cmd { return startRelay(t, bin, cfgPath, logf, logf) }
	cmd := start()
	waitForFile(t, cpPath, 30*time.Second)
	stopProducing := make(chan struct{})
	w := &outboxtest.Workload{Until: stopProducing}
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		outboxtest.Produce(context.Background(), t, db, w, 4, 100000, []int{1, 4, 7, 2}, 40)
	}()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	var resumeSeqs []int // the checkpoint each restart resumed from
	kills := 0
	for kills < 5 { // producers commit until the last kill
		time.Sleep(time.Duration(150+r.IntN(500)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		kills++
		resumeSeqs = append(resumeSeqs, checkpointSeq(t, cpPath, "kafka"))
		cmd = start()
	}
	close(stopProducing)
	<-produced
	total := w.Events()

	cl, err := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...), kgo.ConsumeTopics("outbox.event.order"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var delivered []outboxtest.Delivered
	seqOf := map[string]int{}
	seen := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for len(seen) < total && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(rec *kgo.Record) {
			var p struct {
				ID string `json:"id"`
			}
			json.Unmarshal(rec.Value, &p)
			for _, h := range rec.Headers {
				if h.Key == "gtid" {
					seqOf[p.ID], _ = strconv.Atoi(string(h.Value[strings.LastIndexByte(string(h.Value), '-')+1:]))
				}
			}
			seen[p.ID] = true
			delivered = append(delivered, outboxtest.Delivered{ID: p.ID, AggregateID: string(rec.Key)})
		})
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("relay exited with %v after SIGTERM", err)
	}
	rep := outboxtest.Check(t, w, delivered, false)
	// A duplicate must come from a restart that resumed before it.
	count := map[string]int{}
	for _, d := range delivered {
		count[d.ID]++
	}
	minResume := resumeSeqs[0]
	for _, s := range resumeSeqs {
		minResume = min(minResume, s)
	}
	for id, n := range count {
		if n > 1 && seqOf[id] <= minResume {
			t.Errorf("event %s (gtid seq %d) was delivered %d times though every restart resumed after seq %d", id, seqOf[id], n, minResume)
		}
	}
	t.Logf("kafka crash run: %d SIGKILLs, %d committed, %d records, %d duplicates", kills, rep.Committed, rep.Delivered, rep.Duplicates)
	if t.Failed() {
		log, _ := os.ReadFile(filepath.Join(dir, "relay.log"))
		t.Logf("relay log:\n%s", tail(log))
	}
}

// checkpointSeq is the sequence number of the last GTID of sink's
// checkpoint in the file store at path.
func checkpointSeq(t *testing.T, path, sink string) int {
	st, err := checkpoint.OpenFileReadOnly(path)
	if err != nil {
		t.Fatalf("checkpoint after SIGKILL: %v", err)
	}
	cp, err := st.Load(context.Background(), sink)
	if err != nil {
		t.Fatal(err)
	}
	return gtidSeq(cp.Position.GTIDSet)
}
