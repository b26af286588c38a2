package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEveryCommandHasHelp(t *testing.T) {
	for _, c := range commands() {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := mainCode(context.Background(), []string{c.name, "--help"}, &out, &errOut)
			if code != 0 {
				t.Fatalf("%s --help exited %d", c.name, code)
			}
			if !strings.Contains(out.String()+errOut.String(), "Usage: outbox-relay "+c.name) {
				t.Fatalf("%s --help printed no usage:\n%s%s", c.name, out.String(), errOut.String())
			}
		})
	}
}

// TestHelpShowsNoSentinelDefault: a flag whose default is the config's says
// so in words, not with a sentinel such as "(default -1)".
func TestHelpShowsNoSentinelDefault(t *testing.T) {
	for _, c := range commands() {
		var out, errOut bytes.Buffer
		mainCode(context.Background(), []string{c.name, "--help"}, &out, &errOut)
		if help := out.String() + errOut.String(); strings.Contains(help, "(default -") {
			t.Errorf("%s --help shows a negative default:\n%s", c.name, help)
		}
	}
}

func TestUnknownCommandAndBadFlagAreUsageErrors(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := mainCode(context.Background(), []string{"frobnicate"}, &out, &errOut); code != 2 {
		t.Fatalf("unknown command exited %d", code)
	}
	if code := mainCode(context.Background(), []string{"run", "--nope"}, &out, &errOut); code != 2 {
		t.Fatalf("bad flag exited %d", code)
	}
	if code := mainCode(context.Background(), nil, &out, &errOut); code != 2 {
		t.Fatalf("no command exited %d", code)
	}
}

func TestHealthcheck(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) }))
	defer srv.Close()
	var out, errOut bytes.Buffer
	if code := mainCode(context.Background(), []string{"healthcheck", "--url", srv.URL}, &out, &errOut); code != 0 {
		t.Fatalf("healthy: exit %d: %s", code, errOut.String())
	}
	status = http.StatusServiceUnavailable
	if code := mainCode(context.Background(), []string{"healthcheck", "--url", srv.URL}, &out, &errOut); code != 1 {
		t.Fatalf("unhealthy: exit %d", code)
	}
}

func TestAuditRefusesAStdoutSink(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(cfg, []byte("tables: [{name: a.outbox}]\nsinks: [{name: out, type: stdout}]\n"), 0o600)
	code, _, errOut := runMain(t, context.Background(), "audit", "--config", cfg, "--sink", "out", "--from", "0-1-1")
	if code != 1 || !strings.Contains(errOut, "not auditable") {
		t.Fatalf("audit of a stdout sink: exit %d, %q", code, errOut)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"256MiB": 256 << 20, "256MB": 256 << 20, "1g": 1 << 30, "64KiB": 64 << 10, "1048576": 1 << 20, "1.5G": 3 << 29} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "lots", "12XB", "-1M"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q): no error", in)
		}
	}
}
