package main

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

const testWebhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func encryptSecretCmd(t *testing.T, input string, args ...string) (code int, out, errOut string) {
	t.Helper()
	old := stdin
	stdin = strings.NewReader(input)
	defer func() { stdin = old }()
	var o, e bytes.Buffer
	code = mainCode(context.Background(), append([]string{"endpoints", "encrypt-secret"}, args...), &o, &e)
	return code, o.String(), e.String()
}

// The printed value decrypts, with the same key, to the secret read, in
// the row it was encrypted for and in no other.
func TestEndpointsEncryptSecret(t *testing.T) {
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	row := []string{"--table", "s.t", "--id", "a", "--url", "https://a.example/"}
	fromRow := func(id, url, secrets string) (webhook.TableEndpoint, error) {
		return webhook.TableConfig{Table: "s.t", SecretsKey: key}.FromRow(map[string]any{
			"id": id, "url": url, "secrets": secrets, "tenant": nil,
			"event_types": nil, "aggregate_types": nil, "rate_limit": nil, "enabled": int64(1)})
	}
	check := func(t *testing.T, out string) {
		t.Helper()
		enc := strings.TrimSpace(out)
		if !strings.HasPrefix(enc, "enc:v2:") || strings.Contains(enc, testWebhookSecret[6:]) {
			t.Fatalf("printed %q", out)
		}
		ep, err := fromRow("a", "https://a.example/", enc)
		if err != nil || len(ep.Config.Secrets) != 1 || ep.Config.Secrets[0] != testWebhookSecret {
			t.Fatalf("the printed value does not decrypt to the secret: %v", err)
		}
		if _, err := fromRow("b", "https://a.example/", enc); err == nil {
			t.Error("the printed value decrypts in another row")
		}
		if _, err := fromRow("a", "https://b.example/", enc); err == nil {
			t.Error("the printed value decrypts in its row with another url")
		}
	}
	t.Run("the key from the environment", func(t *testing.T) {
		t.Setenv(secretsKeyEnv, key)
		code, out, errOut := encryptSecretCmd(t, testWebhookSecret+"\n", row...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		check(t, out)
	})
	t.Run("the key from --key-file", func(t *testing.T) {
		t.Setenv(secretsKeyEnv, "")
		code, out, errOut := encryptSecretCmd(t, testWebhookSecret, append([]string{"--key-file", keyFile}, row...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		check(t, out)
	})
	t.Run("an enc:v1 value is encrypted again for the row", func(t *testing.T) {
		t.Setenv(secretsKeyEnv, key)
		code, out, errOut := encryptSecretCmd(t, encryptV1(t, key, testWebhookSecret), row...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		check(t, out)
	})
	t.Run("--type webhook names the kind", func(t *testing.T) {
		t.Setenv(secretsKeyEnv, key)
		code, out, errOut := encryptSecretCmd(t, testWebhookSecret, append([]string{"--type", "webhook"}, row...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		check(t, out)
	})
	t.Run("--type of a kind with no such table", func(t *testing.T) {
		t.Setenv(secretsKeyEnv, key)
		code, out, errOut := encryptSecretCmd(t, testWebhookSecret, append([]string{"--type", "kafka"}, row...)...)
		if code != 1 || out != "" || !strings.Contains(errOut, `--type "kafka": no sink type of that name has an endpoints table with encrypted secrets; pass one of webhook`) {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})
	t.Run("no row", func(t *testing.T) {
		t.Setenv(secretsKeyEnv, key)
		code, out, errOut := encryptSecretCmd(t, testWebhookSecret, "--id", "a")
		if code != 1 || out != "" || !strings.Contains(errOut, "name the row the secret is for with --table, --url") {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})
	for _, tc := range []struct{ name, env, input, want string }{
		{"no key", "", testWebhookSecret, "no secrets key: set $OUTBOX_RELAY_SECRETS_KEY or --key-file"},
		{"a short key", base64.StdEncoding.EncodeToString(make([]byte, 8)), testWebhookSecret, "decodes to 8 bytes, not 32"},
		{"no secret", key, "\n", "no secret on standard input"},
		{"two secrets", key, testWebhookSecret + " " + testWebhookSecret, "more than one word"},
		{"not a webhook secret", key, "hunter2hunter2hunter2", `does not start with "whsec_"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(secretsKeyEnv, tc.env)
			code, out, errOut := encryptSecretCmd(t, tc.input, row...)
			if code != 1 || out != "" || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and %q", code, out, errOut, tc.want)
			}
			if strings.Contains(errOut, "hunter2") || strings.Contains(errOut, testWebhookSecret[6:]) {
				t.Fatalf("the error quotes the secret: %s", errOut)
			}
		})
	}
}

// encryptV1 encrypts secret as versions before enc:v2 did: AES-256-GCM
// with no associated data.
func encryptV1(t *testing.T, key, secret string) string {
	t.Helper()
	k, err := base64.StdEncoding.DecodeString(key)
	if err != nil {
		t.Fatal(err)
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		t.Fatal(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	nonce := make([]byte, aead.NonceSize())
	return "enc:v1:" + base64.StdEncoding.EncodeToString(aead.Seal(nonce, nonce, []byte(secret), nil))
}

// `endpoints enable` clears a disabled endpoint's flag and keeps its
// cursor; it refuses while a relay holds the checkpoint file, and names an
// unknown endpoint.
func TestEndpointsEnable(t *testing.T) {
	dir := t.TempDir()
	cpPath := filepath.Join(dir, "cp.json")
	cfgPath := filepath.Join(dir, "relay.yaml")
	if err := os.WriteFile(cfgPath, []byte(`
source: {host: 127.0.0.1, port: 1, user: root}
tables: [{name: shop.outbox}]
checkpoint: {path: `+cpPath+`}
sinks: [{name: hooks, type: webhook, webhook: {endpoints: [{name: a, url: "https://a.example/"}]}}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := checkpoint.OpenFile(cpPath)
	if err != nil {
		t.Fatal(err)
	}
	pos := event.Position{GTIDSet: "0-1-7"}
	if err := st.Save(context.Background(), "hooks/a", checkpoint.Checkpoint{Flavor: "mariadb", Position: pos, Disabled: "failing"}); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string) {
		var o, e bytes.Buffer
		code := mainCode(context.Background(), append([]string{"endpoints", "enable", "--config", cfgPath}, args...), &o, &e)
		return code, o.String() + e.String()
	}
	// A relay holds the file: refused, nothing changed.
	unlock, _, err := st.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if code, out := run("hooks/a"); code == 0 || !strings.Contains(out, "stop it first") {
		t.Fatalf("enable while the file is locked: exit %d, %q", code, out)
	}
	unlock()
	if code, out := run("hooks/a", "hooks/nope"); code == 0 || !strings.Contains(out, "hooks/a enabled") || !strings.Contains(out, "hooks/nope has no checkpoint") {
		t.Fatalf("enable: exit %d, %q", code, out)
	}
	st, err = checkpoint.OpenFile(cpPath)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := st.Load(context.Background(), "hooks/a")
	if err != nil || cp.Disabled != "" || cp.Position != pos {
		t.Fatalf("after enable: %+v, %v; want the same cursor, not disabled", cp, err)
	}
	if code, out := run("hooks/a"); code != 0 || !strings.Contains(out, "is not disabled") {
		t.Fatalf("enable again: exit %d, %q", code, out)
	}
}

// TestDocsEncryptSecretExamplesRun runs each `outbox-relay endpoints
// encrypt-secret` command of the docs' shell examples as written.
func TestDocsEncryptSecretExamplesRun(t *testing.T) {
	t.Setenv(secretsKeyEnv, base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")))
	ran := 0
	for _, page := range []string{"../../docs/commands/endpoints.md", "../../docs/sinks/webhook.md"} {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, block := range strings.Split(string(b), "```sh\n")[1:] {
			block, _, _ = strings.Cut(block, "```")
			block = strings.ReplaceAll(block, "\\\n", " ")
			for _, line := range strings.Split(block, "\n") {
				line, _, _ = strings.Cut(line, "#")
				args, ok := strings.CutPrefix(strings.TrimSpace(line), "outbox-relay endpoints encrypt-secret")
				if !ok {
					continue
				}
				args, _, _ = strings.Cut(args, "<")
				ran++
				code, out, errOut := encryptSecretCmd(t, testWebhookSecret+"\n", strings.Fields(args)...)
				if code != 0 || !strings.HasPrefix(out, "enc:v2:") {
					t.Errorf("%s: %q: exit %d: %s%s", page, line, code, out, errOut)
				}
			}
		}
	}
	if ran < 2 {
		t.Fatalf("found %d examples in the docs, want one on each page", ran)
	}
}

// endpointRow is what the test reads back of an endpoints table row.
type endpointRow struct {
	url, secrets       string
	tenant, eventTypes sql.NullString
	rateLimit          sql.NullFloat64
	enabled            bool
}

// endpoints add, update, rotate-secret and delete write a real MariaDB
// endpoints table through the console's table writer, each with the
// console's audit line; they refuse what the console refuses: an endpoint
// of the configuration, an id in a tenant's namespace, a row the relay
// could not use, a row that exists or does not.
func TestEndpointsTableCommands(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{ServerID: 44})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(webhook.EndpointsTableSchema); err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, "relay.yaml", fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d}
tables: [{name: %[3]s.outbox, headers: [tenant]}]
checkpoint: {path: /nonexistent/checkpoints.json}
sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints: [{name: static, url: "https://static.example/in"}]
      endpoints_table: {table: %[3]s.outbox_endpoints, tenant_header: tenant}
  - {name: out, type: stdout}
log: {level: info}
`, srv.Port, testserver.ServerID(), dbname))
	run := func(t *testing.T, args ...string) (int, string, string) {
		t.Helper()
		return runMain(t, context.Background(), append(append([]string{"endpoints"}, args[:1]...), append([]string{"--config", cfg}, args[1:]...)...)...)
	}
	read := func(t *testing.T, id string) (endpointRow, error) {
		t.Helper()
		var r endpointRow
		err := db.QueryRow("SELECT url, COALESCE(secrets, ''), tenant, event_types, rate_limit, enabled FROM outbox_endpoints WHERE id = ?", id).
			Scan(&r.url, &r.secrets, &r.tenant, &r.eventTypes, &r.rateLimit, &r.enabled)
		return r, err
	}
	audited := func(t *testing.T, stderr, action, target, result string) {
		t.Helper()
		for _, line := range strings.Split(stderr, "\n") {
			if strings.Contains(line, "console audit") && strings.Contains(line, "component=cli") && strings.Contains(line, "who=cli:") &&
				strings.Contains(line, fmt.Sprintf("action=%q", action)) && strings.Contains(line, "target="+target) && strings.Contains(line, "result="+result) {
				return
			}
		}
		t.Errorf("no audit line of %s %s with result %s in:\n%s", action, target, result, stderr)
	}

	code, out, stderr := run(t, "add", "hooks/acme", "--url", "https://acme.example/in", "--tenant", "t1", "--event-type", "order.*", "--rate-limit", "5")
	if code != 0 {
		t.Fatalf("add: exit %d: %s", code, stderr)
	}
	first := strings.TrimSpace(out)
	row, err := read(t, "acme")
	if err != nil || !strings.HasPrefix(first, "whsec_") || row.url != "https://acme.example/in" || row.tenant.String != "t1" ||
		row.eventTypes.String != "order.*" || row.rateLimit.Float64 != 5 || !row.enabled || row.secrets != first {
		t.Fatalf("add printed %q and wrote %+v (%v)", out, row, err)
	}
	audited(t, stderr, "create endpoint", "hooks/acme", "ok")

	if code, _, stderr = run(t, "update", "hooks/acme", "--url", "https://acme.example/v2", "--rate-limit", ""); code != 0 {
		t.Fatalf("update: exit %d: %s", code, stderr)
	}
	row, err = read(t, "acme")
	if err != nil || row.url != "https://acme.example/v2" || row.tenant.String != "t1" || row.eventTypes.String != "order.*" || row.rateLimit.Valid {
		t.Fatalf("update wrote %+v (%v); want the new url, no rate limit, the rest kept", row, err)
	}
	audited(t, stderr, "update endpoint", "hooks/acme", "ok")

	code, out, stderr = run(t, "rotate-secret", "hooks/acme", "--keep-old")
	second := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(second, "whsec_") || second == first {
		t.Fatalf("rotate-secret: exit %d, printed %q: %s", code, out, stderr)
	}
	if row, err = read(t, "acme"); err != nil || row.secrets != second+" "+first {
		t.Fatalf("rotate-secret --keep-old left secrets %q (%v); want the new one, then the old", row.secrets, err)
	}
	audited(t, stderr, "rotate secret", "hooks/acme", "ok")

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"an endpoint of the configuration is not updated", []string{"update", "hooks/static", "--url", "https://x.example/"}, "is in the configuration"},
		{"an endpoint of the configuration is not deleted", []string{"delete", "hooks/static"}, "is in the configuration"},
		{"a row does not take the name of an endpoint of the configuration", []string{"add", "hooks/Static", "--url", "https://x.example/"}, "cannot take over an endpoint of the configuration"},
		{"an id in a tenant's namespace is refused", []string{"add", "hooks/t0123456789abcdef.x", "--url", "https://x.example/"}, "namespace of another tenant"},
		{"a url the relay would not use is refused", []string{"add", "hooks/bad", "--url", "ftp://x.example/"}, "ftp"},
		{"a row that exists is not added again", []string{"add", "hooks/acme", "--url", "https://x.example/"}, "exists"},
		{"a row that does not exist is not updated", []string{"update", "hooks/nope", "--url", "https://x.example/"}, "no such endpoint row"},
		{"a sink without an endpoints table", []string{"delete", "out/acme"}, "no webhook sink \"out\""},
		{"an endpoint not named as SINK/ID", []string{"delete", "acme"}, "SINK/ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := run(t, tc.args...)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want a failure naming %q", code, stderr, tc.want)
			}
		})
	}
	for _, verb := range []string{"add", "update", "delete", "rotate-secret"} {
		code, out, stderr := runMain(t, context.Background(), "endpoints", verb, "--help")
		if code != 0 || !strings.Contains(out+stderr, "Usage: outbox-relay endpoints "+verb+" --config FILE SINK/ID") {
			t.Errorf("endpoints %s --help: exit %d:\n%s%s", verb, code, out, stderr)
		}
	}
	for _, id := range []string{"Static", "t0123456789abcdef.x", "bad"} {
		if _, err := read(t, id); !errors.Is(err, sql.ErrNoRows) {
			t.Errorf("a refused add wrote the row %s: %v", id, err)
		}
	}

	if code, out, stderr = run(t, "delete", "hooks/acme"); code != 0 {
		t.Fatalf("delete: exit %d: %s", code, stderr)
	}
	if _, err := read(t, "acme"); !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("delete left the row: %v", err)
	}
	audited(t, stderr, "delete endpoint", "hooks/acme", "ok")
}
