package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/console"
)

// console token prints a token and the hash line of that very token; a
// console made with that line takes the token.
func TestConsoleTokenPrintsATokenAndItsHash(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := mainCode(context.Background(), []string{"console", "token", "--tenant", "acme"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	m := regexp.MustCompile(`(?s)^token .*?\n  (orc_\S+)\n.*name: tenant-acme\n    hash: (sha256:[0-9a-f]{64})\n    tenant: acme\n$`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("output:\n%s", out.String())
	}
	if console.HashToken(m[1]) != m[2] {
		t.Errorf("the hash line is not the token's hash")
	}
	s, err := console.New(console.Options{Config: config.Console{RateLimit: 10, Session: time.Hour, Tokens: []config.ConsoleToken{{Name: "tenant-acme", Hash: m[2], Tenant: "acme"}}},
		Key: []byte(strings.Repeat("k", 32))})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/api/v1/endpoints", nil)
	r.Header.Set("Authorization", "Bearer "+m[1])
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Errorf("the printed token is refused: %d %s", w.Code, w.Body)
	}
}

func TestConsoleLinkNeedsTheKeyAndAListener(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "relay.yaml")
	_, hash := console.NewToken()
	cfg := "tables: [{name: shop.outbox}]\nsinks: [{name: out, type: stdout}]\nconsole: {listen: '127.0.0.1:9465', tokens: [{name: ops, hash: '" + hash + "'}]}\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := mainCode(context.Background(), append([]string{"console", "link", "--config", path}, args...), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	t.Setenv("OUTBOX_RELAY_CONSOLE_KEY", "short")
	if code, out := run("--tenant", "acme"); code == 0 || !strings.Contains(out, "OUTBOX_RELAY_CONSOLE_KEY") {
		t.Errorf("a short key: exit %d: %s", code, out)
	}
	t.Setenv("OUTBOX_RELAY_CONSOLE_KEY", strings.Repeat("k", 32))
	if code, out := run(); code == 0 || !strings.Contains(out, "--tenant") {
		t.Errorf("no tenant: exit %d: %s", code, out)
	}
	code, out := run("--tenant", "acme", "--ttl", "5m")
	if code != 0 || !regexp.MustCompile(`^http://127\.0\.0\.1:9465/t/l1\.[A-Za-z0-9_-]+\.\d+\.[A-Za-z0-9_-]+/\n$`).MatchString(out) {
		t.Errorf("link: exit %d: %q", code, out)
	}
}
