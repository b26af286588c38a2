// Package walkthrough_test follows docs/adding-a-sink.md for two toy kinds,
// each declared in one test file alone: its section, its kind registered
// with sink.Register, and nothing else, no file outside it touched. toyline
// (this file) is parsed by config, warned about by check and run by the
// relay like any other; toylog (readback_test.go) has a server, a
// read-back and an audit flag, and its audit test runs here. The registry
// is the only way in. It lives in a package of its own so that its kinds
// are registered for this test only.
package walkthrough_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/check"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/relaytest"
	"github.com/outbox-relay/outbox-relay/sink"
	_ "github.com/outbox-relay/outbox-relay/sink/all"
)

// toyConfig is the toy kind's section, key "toyline".
type toyConfig struct {
	// Prefix starts every line. Default "toy".
	Prefix string `yaml:"prefix"`
	// Loud sends the lines "in clear text" (an insecure setting, for
	// check). Default false.
	Loud bool `yaml:"loud"`
}

func (c *toyConfig) Defaults() {
	if c.Prefix == "" {
		c.Prefix = "toy"
	}
}

func (c *toyConfig) Validate() error {
	if strings.ContainsAny(c.Prefix, " \n") {
		return fmt.Errorf("toyline.prefix: %q has a space or a line break; write one word", c.Prefix)
	}
	return nil
}

// toySink writes "<prefix> <aggregate id> <id>" per event, stdout-like.
type toySink struct {
	prefix string
	w      *lines
}

func (s *toySink) Connect(context.Context) error { return nil }
func (s *toySink) Close(context.Context) error   { return nil }
func (s *toySink) Write(_ context.Context, batch []*event.Event) error {
	for _, e := range batch {
		s.w.add(fmt.Sprintf("%s %s %s", s.prefix, e.AggregateID, e.ID))
	}
	return nil
}

// lines is where every toy sink writes: the relay hands New its Stdout.
type lines struct {
	mu sync.Mutex
	l  []string
}

func (l *lines) add(s string) { l.mu.Lock(); l.l = append(l.l, s); l.mu.Unlock() }
func (l *lines) Write(b []byte) (int, error) {
	return 0, errors.New("the toy sink writes through add")
}
func (l *lines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.l...)
}

func init() {
	sink.Register(sink.Kind{
		Type:   "toyline",
		Config: func() config.SinkConfig { return new(toyConfig) },
		New: func(p sink.Params) (sink.Sink, error) {
			w, ok := p.Stdout.(*lines)
			if !ok {
				return nil, fmt.Errorf("toyline: stdout is a %T", p.Stdout)
			}
			return &toySink{prefix: p.Config.(*toyConfig).Prefix, w: w}, nil
		},
		Insecure: func(sc config.SinkConfig) []sink.Warning {
			if sc.(*toyConfig).Loud {
				return []sink.Warning{{Detail: "toyline.loud is true: lines cross the network in clear text", Fix: "remove toyline.loud"}}
			}
			return nil
		},
	})
}

// TestAToyKindRunsThroughTheRegistryAlone: registered from this file only,
// the toy kind's section is decoded, defaulted and validated by config,
// check warns of its insecure setting, and the relay delivers every event
// to it.
func TestAToyKindRunsThroughTheRegistryAlone(t *testing.T) {
	if _, err := config.Parse([]byte("tables: [{name: shop.outbox}]\nsinks: [{name: t, type: toyline, toyline: {prefix: 'two words'}}]\n")); err == nil ||
		!strings.Contains(err.Error(), "toyline.prefix") {
		t.Fatalf("config did not validate the toy section through the registry: %v", err)
	}
	if _, err := config.Parse([]byte("tables: [{name: shop.outbox}]\nsinks: [{name: t, type: toyline, toyline: {prefx: a}}]\n")); err == nil ||
		!strings.Contains(err.Error(), "prefx") {
		t.Fatalf("config did not refuse an unknown key of the toy section: %v", err)
	}

	srv := testserver.Start(t, testserver.Options{})
	srv.Exec(t, "CREATE DATABASE shop", "USE shop; "+outboxtest.Schema)
	cfg, err := config.Parse(fmt.Appendf(nil, `
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: shop.outbox}]
checkpoint: {path: %s, interval: 100ms}
sinks:
  - {name: quiet, type: toyline}
  - {name: loud, type: toyline, toyline: {prefix: LOUD, loud: true}}
`, srv.Port, testserver.ServerID(), filepath.Join(t.TempDir(), "cp.json")))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Sinks[0].Config.(*toyConfig).Prefix; got != "toy" {
		t.Errorf("the toy section's default prefix is %q, want toy", got)
	}

	ctx := context.Background()
	rep, err := check.Run(ctx, cfg, check.Options{})
	if err != nil {
		t.Fatal(err)
	}
	warned := false
	for _, r := range rep.Get(check.NameInsecureSettings) {
		warned = warned || r.Status == check.Warn && strings.Contains(r.Detail, "toyline.loud")
	}
	if !warned {
		t.Errorf("check did not warn of the toy sink's insecure setting: %+v", rep.Get(check.NameInsecureSettings))
	}

	out := &lines{}
	defer relaytest.Start(t, cfg, relay.Options{Stdout: out, Logger: slog.New(slog.DiscardHandler)}).StopClean(t)
	// The relay starts at the server's current position: wait until both
	// toy sinks have saved a checkpoint, so the workload is after it.
	eventually.Within(t, time.Minute, "both toy sinks' first checkpoint", func() bool {
		b, _ := os.ReadFile(cfg.Checkpoint.Path)
		return bytes.Contains(b, []byte(`"quiet"`)) && bytes.Contains(b, []byte(`"loud"`))
	})
	w := &outboxtest.Workload{}
	outboxtest.Produce(ctx, t, srv.DB(t, "shop"), w, 2, 10, []int{1, 3}, 5)
	eventually.Within(t, time.Minute, "every event at both toy sinks", func() bool {
		return len(out.all()) >= 2*w.Events()
	})
	var quiet, loud int
	for _, l := range out.all() {
		switch {
		case strings.HasPrefix(l, "toy "):
			quiet++
		case strings.HasPrefix(l, "LOUD "):
			loud++
		}
	}
	if quiet != w.Events() || loud != w.Events() {
		t.Errorf("the toy sinks got %d and %d lines, want %d each", quiet, loud, w.Events())
	}
}
