package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/receiver"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

// The idle-endpoint SIGKILL test's shape: idleKillRows endpoint rows, one
// tenant each; a wave of one event to each of idleKillWave of them, then
// traffic to idleKillBusy others; idleKillInFlight is the endpoints'
// webhook.gateway.max_in_flight, the most one crash may send again to one.
const (
	idleKillRows     = 10_000
	idleKillWave     = 2_000
	idleKillBusy     = 20
	idleKillInFlight = 16
	idleKillSecret   = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

// The relay binary runs a webhook sink of 10,000 endpoint rows (one tenant
// each, a file checkpoint: idle endpoints are index records, their cursor
// the shared one) and is SIGKILLed three times, each once the receiver has
// counted so many deliveries since the last start: mid-way through a wave
// of one event to each of 2,000 endpoints, then twice while 20 endpoints
// get steady traffic, once every endpoint of the wave has gone idle (its
// events acknowledged, its cursor passed by the shared one and deleted
// from the file). In the end every event was delivered at least once, to
// its endpoint only; an endpoint that was idle at a kill was sent nothing
// twice after it; any other was sent again at most its in-flight bound of
// what it had been sent before the kill.
func TestGatewaySIGKILLIdleEndpointsSendNothingTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("SIGKILL run skipped with -short")
	}
	bin := buildBinary(t)
	srv := testserver.Start(t, testserver.Options{ServerID: 42})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	for _, q := range []string{outboxtest.TenantSchema, webhook.EndpointsTableSchema} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	rc := receiver.Start(t, nil)
	endpointOf := func(path string) int {
		i, err := strconv.Atoi(strings.TrimPrefix(path, "/e/"))
		if err != nil {
			return -1
		}
		return i
	}
	// Endpoint i is row ep<i>, of tenant t<i>. The wave's are
	// idleKillBusy.., the busy ones 0..idleKillBusy-1.
	if err := outboxtest.InsertEndpoints(t.Context(), db, idleKillRows, func(i int) outboxtest.EndpointRow {
		return outboxtest.EndpointRow{ID: fmt.Sprintf("ep%05d", i), URL: fmt.Sprintf("%s/e/%d", rc.URL, i), Secrets: idleKillSecret, Tenant: fmt.Sprintf("t%d", i)}
	}); err != nil {
		t.Fatal(err)
	}
	key := func(i int) string { return fmt.Sprintf("hooks/ep%05d", i) }
	wave := make([]int, idleKillWave)
	for i := range wave {
		wave[i] = idleKillBusy + i
	}
	var waveAccepted, busyAccepted atomic.Int64
	rc.OnAccept(func(r receiver.Request) {
		if i := endpointOf(r.Path); i >= 0 && i < idleKillBusy {
			busyAccepted.Add(1)
		} else {
			waveAccepted.Add(1)
		}
	})

	dir := t.TempDir()
	cpPath := filepath.Join(dir, "checkpoints.json")
	relay := startKilledRelay(t, bin, dir, fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %[3]s.outbox, headers: [tenant]}]
checkpoint: {path: %[4]s, interval: 100ms}
log: {level: warn}
sinks:
  - name: hooks
    type: webhook
    webhook:
      gateway: {max_in_flight: %[5]d}
      endpoints_table:
        table: %[3]s.outbox_endpoints
        tenant_header: tenant
        defaults: {body: envelope, egress: {allow: [127.0.0.1]}, retry: {initial_backoff: 50ms, max_backoff: 500ms}}
`, srv.Port, testserver.ServerID(), dbname, cpPath, idleKillInFlight))
	showLog := relay.showLog
	waitForFile(t, cpPath, 30*time.Second) // the shared cursor's first save fixes the start
	// kill SIGKILLs the relay and starts it again: the receiver's
	// requests from then on are of the next generation, the kill's
	// number.
	kill := func() {
		t.Helper()
		relay.kill()
		rc.NextGen()
		relay.start()
	}
	// owned returns the endpoints of is that have a cursor of their own
	// in the checkpoint file now.
	owned := func(is []int) []int {
		st, err := checkpoint.OpenFileReadOnly(cpPath)
		if err != nil {
			t.Fatal(err)
		}
		cps, err := st.List(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var out []int
		for _, i := range is {
			if _, ok := cps[key(i)]; ok {
				out = append(out, i)
			}
		}
		return out
	}

	// The wave, killed half-way through.
	w := &outboxtest.TenantWorkload{}
	outboxtest.CommitEach(t.Context(), t, db, w, "wave", wave, 100)
	eventually.Within(t, 2*time.Minute, "half the wave delivered", func() bool { return waveAccepted.Load() >= idleKillWave/2 }, showLog)
	kill()
	eventually.Within(t, 2*time.Minute, "the whole wave delivered", func() bool {
		return receiver.Unique(rc.Accepted("")) >= idleKillWave
	}, showLog)
	// Every endpoint of the wave goes idle: its pipeline let go, its
	// cursor passed by the shared one and deleted.
	eventually.Within(t, 2*time.Minute, "the wave's endpoints to go idle, their cursors deleted", func() bool { return len(owned(wave)) == 0 }, showLog)

	// Traffic to the busy endpoints, killed twice.
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		outboxtest.ProduceTenants(context.Background(), t, db, w, outboxtest.TenantLoad{Producers: 4, Txns: 1200, Tenants: idleKillBusy, Every: 10 * time.Millisecond})
	}()
	// idle[k] are the endpoints idle at kill k+1 (the first: none of
	// the wave's; every untouched one is idle at every kill).
	idle := [][]int{nil}
	for k := 1; k <= 2; k++ {
		from := busyAccepted.Load()
		eventually.Within(t, 2*time.Minute, fmt.Sprintf("500 busy deliveries before kill %d", k+1), func() bool { return busyAccepted.Load() >= from+500 }, showLog)
		// No event of the wave's endpoints comes after the wave: those
		// without a cursor of their own now are idle at the kill. One
		// with a cursor again was woken with nothing new to send.
		o := owned(wave)
		if len(o) > 0 {
			t.Errorf("before kill %d, %d endpoints of the wave have a cursor of their own again (first %s): they had no event since they went idle", k+1, len(o), key(o[0]))
		}
		idle = append(idle, slices.DeleteFunc(slices.Clone(wave), func(i int) bool { return slices.Contains(o, i) }))
		kill()
	}
	<-produced
	complete := func() bool {
		got := map[string]bool{}
		for _, r := range rc.Accepted("") {
			got[r.EventID] = true
		}
		return len(got) >= w.Events()
	}
	eventually.Within(t, 2*time.Minute, "every event to be delivered", complete, showLog)
	if err := relay.stop(); err != nil {
		t.Errorf("relay exited with %v after SIGTERM", err)
	}

	// Every event at least once, to its endpoint only, first receipts in
	// per-aggregate order.
	reqs := rc.Accepted("")
	per := map[int][]receiver.Request{}
	for _, r := range reqs {
		i := endpointOf(r.Path)
		if i < 0 || i >= idleKillRows {
			t.Fatalf("a request to %s: no endpoint's", r.Path)
		}
		per[i] = append(per[i], r)
	}
	for i, rs := range per {
		ids := make([]string, len(rs))
		for j, r := range rs {
			ids[j] = r.EventID
		}
		rep := outboxtest.CheckTenant(w, i, ids)
		if len(rep.Foreign) > 0 || len(rep.OutOfOrder) > 0 {
			t.Errorf("%s: %d events of another tenant (first %q), %d first receipts out of per-aggregate order", key(i), len(rep.Foreign), rep.Foreign[:min(1, len(rep.Foreign))], len(rep.OutOfOrder))
		}
	}
	var lost []string
	for i := range idleKillRows {
		ids := []string{}
		for _, r := range per[i] {
			ids = append(ids, r.EventID)
		}
		lost = append(lost, outboxtest.CheckTenant(w, i, ids).Missing...)
	}
	if len(lost) > 0 {
		t.Errorf("%d events lost, e.g. %v", len(lost), lost[:min(5, len(lost))])
	}

	// Per kill k, what each endpoint was sent again after it: events it
	// had been sent before it.
	dups, worst := 0, 0
	perKill := make([]int, 3)
	resentIdle, overBound := make([][]string, 3), make([][]string, 3)
	for k := 1; k <= 3; k++ {
		idleAt := map[int]bool{}
		for _, i := range idle[k-1] {
			idleAt[i] = true
		}
		for i, rs := range per {
			before := map[string]bool{}
			again := 0
			for _, r := range rs {
				switch {
				case r.Gen < int64(k):
					before[r.EventID] = true
				case r.Gen == int64(k) && before[r.EventID]:
					again++
				}
			}
			dups += again
			perKill[k-1] += again
			worst = max(worst, again)
			switch {
			case again > 0 && idleAt[i]:
				resentIdle[k-1] = append(resentIdle[k-1], fmt.Sprintf("%s (%d)", key(i), again))
			case again > idleKillInFlight:
				overBound[k-1] = append(overBound[k-1], fmt.Sprintf("%s (%d)", key(i), again))
			}
		}
		if n := len(resentIdle[k-1]); n > 0 {
			slices.Sort(resentIdle[k-1])
			t.Errorf("kill %d: %d endpoints that were idle (every event acknowledged, no cursor of its own) were sent events again, e.g. %v", k, n, resentIdle[k-1][:min(5, n)])
		}
		if n := len(overBound[k-1]); n > 0 {
			slices.Sort(overBound[k-1])
			t.Errorf("kill %d: %d endpoints were sent more events again than their in-flight bound (%d), e.g. %v", k, n, idleKillInFlight, overBound[k-1][:min(5, n)])
		}
	}
	t.Logf("idle-endpoint SIGKILL run: %d endpoint rows, a wave to %d, traffic to %d; %d events committed in %d transactions, %d requests accepted; 3 kills, %v endpoints of the wave idle at each (untouched ones: at every kill); sent again per kill: %v events (endpoints idle at the kill sent any: %d, %d, %d), at most %d to one endpoint after one kill (bound %d); %d lost",
		idleKillRows, idleKillWave, idleKillBusy, w.Events(), w.Txns(), len(reqs), []int{len(idle[0]), len(idle[1]), len(idle[2])}, perKill,
		len(resentIdle[0]), len(resentIdle[1]), len(resentIdle[2]), worst, idleKillInFlight, len(lost))
	if t.Failed() {
		showLog()
	}
}
