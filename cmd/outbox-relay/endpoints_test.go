package main

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
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
