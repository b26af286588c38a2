package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/sink"
)

// The servers that do not answer are listed once each, as .ci/run reads
// them (packages, a tab, the start command); -wait names those still
// missing.
func TestListsTheDeclaredServersThatDoNotAnswer(t *testing.T) {
	up := &sink.Server{Name: "up", Addr: "127.0.0.1:1", Packages: []string{"up-server"}, Start: "up-server &"}
	down := &sink.Server{Name: "down", Addr: "127.0.0.1:2", Packages: []string{"down-server", "down-tools"}, Start: "down-server --daemonize"}
	kinds := []sink.Kind{{Type: "a", Server: up}, {Type: "b", Server: down}, {Type: "c", Server: down}, {Type: "d"}}
	answers := func(addr string) bool { return addr == up.Addr }
	var out bytes.Buffer
	if err := run(&out, kinds, 0, answers); err != nil {
		t.Fatal(err)
	}
	if want := "down-server down-tools\tdown-server --daemonize\n"; out.String() != want {
		t.Errorf("listed %q, want %q", out.String(), want)
	}
	err := run(&out, kinds, time.Millisecond, answers)
	if err == nil || !strings.Contains(err.Error(), "down at 127.0.0.1:2") || strings.Contains(err.Error(), "up at") {
		t.Errorf("-wait with a server down: %v", err)
	}
	if err := run(&out, kinds, time.Millisecond, func(string) bool { return true }); err != nil {
		t.Errorf("-wait with every server up: %v", err)
	}
}

// Every registered kind that declares a server names it and says how CI
// gets it.
func TestEveryDeclaredServerSaysHowToGetIt(t *testing.T) {
	n := 0
	for _, k := range sink.Kinds() {
		s := k.Server
		if s == nil {
			continue
		}
		n++
		if s.Name == "" || !strings.HasPrefix(s.Addr, "127.0.0.1:") || len(s.Packages) == 0 || s.Start == "" {
			t.Errorf("kind %s: server %+v: give its name, an address on 127.0.0.1, its Debian packages and a start command", k.Type, *s)
		}
	}
	if n == 0 {
		t.Fatal("no registered kind declares a server")
	}
}
