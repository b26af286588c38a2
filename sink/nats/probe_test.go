package nats_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/sink/nats"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
)

// startNATS runs a private nats-server with JetStream and extra arguments
// on a free port until the test ends.
func startNATS(t *testing.T, args ...string) string {
	t.Helper()
	return sinktest.StartServer(t, "nats-server", func(port int) []string {
		return append([]string{"-a", "127.0.0.1", "-p", fmt.Sprint(port), "-js", "-sd", t.TempDir()}, args...)
	})
}

func newSink(c nats.Config) (sinktest.ProbingSink, error) { return nats.New(c, nil) }

// Probe (what `outbox-relay check` runs) says whether the stream is there,
// will be created, or what to do; it creates nothing.
func TestProbe(t *testing.T) {
	sinktest.RequireServer(t, "nats")
	u := sinktest.Unique()
	stream, prefix := "P"+u, "p"+u
	nc, err := natsgo.Connect("nats://" + sharedServer)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ".>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	defer js.DeleteStream(ctx, stream)
	url := []string{"nats://" + sharedServer}
	missing := "M" + u
	withAuth := []string{"nats://" + startNATS(t, "--user", "relay", "--pass", "right")}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := l.Addr().String()
	l.Close()

	sinktest.RunProbes(t, newSink, []sinktest.ProbeCase[nats.Config]{
		{Name: "an existing stream passes with its subjects", Config: nats.Config{URLs: url, Stream: stream, Subject: prefix + ".outbox.{{.AggregateType}}"},
			Found: fmt.Sprintf("stream %q exists (subjects %s.>", stream, prefix)},
		{Name: "a fixed subject the stream captures passes", Config: nats.Config{URLs: url, Stream: stream, Subject: prefix + ".orders"},
			Found: fmt.Sprintf("captures %q", prefix+".orders")},
		{Name: "a fixed subject the stream does not capture fails", Config: nats.Config{URLs: url, Stream: stream, Subject: "elsewhere.orders"},
			Problem: `does not capture nats.subject "elsewhere.orders"`, Fix: `add "elsewhere.orders" to the stream's subjects`},
		{Name: "a missing stream fails with how to create it", Config: nats.Config{URLs: url, Stream: missing},
			Problem: fmt.Sprintf("nats stream %q does not exist", missing), Fix: "create_stream.enabled: true"},
		{Name: "a missing stream that Connect creates passes", Config: nats.Config{URLs: url, Stream: missing, CreateStream: nats.CreateStreamConfig{Enabled: true}},
			Found: "Connect creates it"},
		{Name: "a wrong password fails naming the credentials", Config: nats.Config{URLs: withAuth, User: "relay", Password: "wrong"},
			Problem: "Authorization", Fix: "check nats.user and the password"},
		{Name: "the right password passes", Config: nats.Config{URLs: withAuth, User: "relay", Password: "right", Stream: "S", CreateStream: nats.CreateStreamConfig{Enabled: true}},
			Found: `stream "S" does not exist yet`},
		{Name: "an unreachable server fails naming it", Config: nats.Config{URLs: []string{"nats://" + closed}, Timeout: time.Second},
			Problem: closed},
	})
	if _, err := js.Stream(ctx, missing); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("after the probes, stream %s: %v; a probe must create nothing", missing, err)
	}
}
