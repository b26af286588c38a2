package nats_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
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
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("nats-server is not installed under CI=true: %v", err)
		}
		t.Skipf("nats-server is not installed: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, append([]string{"-a", "127.0.0.1", "-p", fmt.Sprint(port), "-js", "-sd", t.TempDir()}, args...)...)
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
			t.Fatalf("nats-server on %s did not start", addr)
		}
	}
}

func probe(t *testing.T, cfg nats.Config) (string, error) {
	t.Helper()
	s, err := nats.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	return s.Probe(context.Background())
}

// Probe (what `outbox-relay check` runs) says whether the stream is there,
// will be created, or what to do; it creates nothing.
func TestProbe(t *testing.T) {
	sinktest.Require(t, "nats-server (JetStream)", sharedServer)
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

	for _, tc := range []struct {
		name    string
		cfg     nats.Config
		found   string // in the result when it passes
		problem string // in the error when it fails; "" passes
		fix     string // in the Problem's fix
	}{
		{"an existing stream passes with its subjects", nats.Config{URLs: url, Stream: stream, Subject: prefix + ".outbox.{{.AggregateType}}"},
			fmt.Sprintf("stream %q exists (subjects %s.>", stream, prefix), "", ""},
		{"a fixed subject the stream captures passes", nats.Config{URLs: url, Stream: stream, Subject: prefix + ".orders"},
			fmt.Sprintf("captures %q", prefix+".orders"), "", ""},
		{"a fixed subject the stream does not capture fails", nats.Config{URLs: url, Stream: stream, Subject: "elsewhere.orders"},
			"", "does not capture nats.subject \"elsewhere.orders\"", "add \"elsewhere.orders\" to the stream's subjects"},
		{"a missing stream fails with how to create it", nats.Config{URLs: url, Stream: missing},
			"", fmt.Sprintf("nats stream %q does not exist", missing), "create_stream.enabled: true"},
		{"a missing stream that Connect creates passes", nats.Config{URLs: url, Stream: missing, CreateStream: nats.CreateStreamConfig{Enabled: true}},
			"Connect creates it", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			found, err := probe(t, tc.cfg)
			sinktest.CheckProbe(t, found, err, tc.found, tc.problem, tc.fix)
		})
	}
	if _, err := js.Stream(ctx, missing); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("after the probes, stream %s: %v; a probe must create nothing", missing, err)
	}
}

func TestProbeAuthAndReachability(t *testing.T) {
	addr := startNATS(t, "--user", "relay", "--pass", "right")
	_, err := probe(t, nats.Config{URLs: []string{"nats://" + addr}, User: "relay", Password: "wrong"})
	sinktest.CheckProbe(t, "", err, "", "Authorization", "check nats.user and the password")

	found, err := probe(t, nats.Config{URLs: []string{"nats://" + addr}, User: "relay", Password: "right", Stream: "S",
		CreateStream: nats.CreateStreamConfig{Enabled: true}})
	sinktest.CheckProbe(t, found, err, `stream "S" does not exist yet`, "", "")

	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := l.Addr().String()
	l.Close()
	if _, err := probe(t, nats.Config{URLs: []string{"nats://" + closed}, Timeout: time.Second}); err == nil || !strings.Contains(err.Error(), closed) {
		t.Errorf("probe of a closed port: %v, want an error naming %s", err, closed)
	}
}
