package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// transcript collects every output of the commands a test runs, and the
// files they leave, to be searched for planted secrets.
type transcript struct {
	t     *testing.T
	parts []string // "what:\n<text>"
	human []string // outputs meant for a terminal (tables, errors)
}

// run runs one command in-process and records its stdout and stderr.
func (tr *transcript) run(ctx context.Context, args ...string) (int, string, string) {
	tr.t.Helper()
	code, out, errOut := runMain(tr.t, ctx, args...)
	tr.add(strings.Join(args[:min(2, len(args))], " ")+" stdout", out, true)
	tr.add(strings.Join(args[:min(2, len(args))], " ")+" stderr", errOut, true)
	return code, out, errOut
}

func (tr *transcript) add(what, text string, human bool) {
	tr.parts = append(tr.parts, what+":\n"+text)
	if human {
		tr.human = append(tr.human, what+":\n"+text)
	}
}

// addFiles records every file under dir.
func (tr *transcript) addFiles(dir string) {
	tr.t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := os.ReadFile(p)
			tr.add("file "+p, string(b), false)
		}
		return nil
	})
}

// assertClean fails for every planted secret found in any output, and for
// a raw control character (other than a line break or tab) in a human one.
func (tr *transcript) assertClean(secrets ...string) {
	tr.t.Helper()
	all := strings.Join(tr.parts, "\n")
	for _, s := range secrets {
		if i := strings.Index(all, s); i >= 0 {
			tr.t.Errorf("secret %q leaked: …%s…", s, all[max(0, i-300):min(len(all), i+100)])
		}
	}
	for _, h := range tr.human {
		for _, r := range h {
			if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f {
				i := strings.IndexRune(h, r)
				tr.t.Errorf("a raw control character %q reaches the terminal: %q", r, h[max(0, i-200):min(len(h), i+50)])
				break
			}
		}
	}
	if tr.t.Failed() {
		tr.t.Logf("transcript:\n%s", all)
	}
}

// A config whose secrets are written wrong must not print them: a webhook
// url that does not parse (userinfo, query token), a Kafka broker with
// credentials, a signing secret written where a list is expected. Every
// command that loads the config is run.
func TestConfigMistakesNeverPrintTheirSecrets(t *testing.T) {
	const pw, token, brokerPW, whsec = "PLANTEDpw1111", "PLANTEDtoken2222", "PLANTEDbroker3333", "whsec_PLANTEDsecret4444"
	dir := t.TempDir()
	configs := map[string]string{
		"unparsable url": `
tables: [{name: shop.outbox}]
checkpoint: {path: ` + filepath.Join(dir, "cp.json") + `}
sinks:
  - name: hooks
    type: webhook
    webhook: {endpoints: [{name: a, url: "http://user:` + pw + `@hooks.example.com/ok%zz?token=` + token + `"}]}
`,
		"unparsable host": `
tables: [{name: shop.outbox}]
sinks:
  - name: hooks
    type: webhook
    webhook: {endpoints: [{name: a, url: "http://user:` + pw + `/x@hooks.example.com/?token=` + token + `"}]}
`,
		"url whose password holds a question mark": `
tables: [{name: shop.outbox}]
sinks:
  - name: hooks
    type: webhook
    webhook: {endpoints: [{name: a, url: "https://user:` + pw + `?` + token + `@hooks.example.com/in"}]}
`,
		"url whose password holds a hash": `
tables: [{name: shop.outbox}]
sinks:
  - name: hooks
    type: webhook
    webhook: {endpoints: [{name: a, url: "https://user:` + pw + `#` + token + `@hooks.example.com/in"}]}
`,
		"source server with credentials": `
source: {servers: ["relay:` + pw + `@127.0.0.1:3306"]}
tables: [{name: shop.outbox}]
sinks: [{name: out, type: stdout}]
`,
		"source host with credentials": `
source: {host: "relay:` + pw + `@127.0.0.1", port: 1}
tables: [{name: shop.outbox}]
sinks: [{name: out, type: stdout}]
`,
		"redis address with credentials": `
tables: [{name: shop.outbox}]
sinks: [{name: r, type: redis, redis: {addr: "` + pw + `@127.0.0.1:1"}}]
`,
		"checkpoint dsn that does not parse": `
tables: [{name: shop.outbox}]
checkpoint: {store: mysql, dsn: "relay:PLANTEDdsn/` + pw + `%zz@tcp(127.0.0.1:1)"}
sinks: [{name: out, type: stdout}]
`,
		"checkpoint dsn with a bad parameter after a slash in the password": `
tables: [{name: shop.outbox}]
checkpoint: {store: mysql, dsn: "relay:PLANTEDdsn/db?parseTime=` + pw + `@tcp(127.0.0.1:1)"}
sinks: [{name: out, type: stdout}]
`,
		"broker with credentials": `
tables: [{name: shop.outbox}]
sinks: [{name: k, type: kafka, kafka: {brokers: ["relay:` + brokerPW + `@127.0.0.1"]}}]
`,
		"secret as a scalar": `
tables: [{name: shop.outbox}]
sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints:
        - name: a
          url: https://hooks.example.com/
          secrets: ` + whsec + `
`,
	}
	ctx := context.Background()
	for name, text := range configs {
		t.Run(name, func(t *testing.T) {
			tr := &transcript{t: t}
			cfg := writeFile(t, "relay.yaml", text)
			for _, args := range [][]string{
				{"check", "--config", cfg}, {"run", "--config", cfg}, {"status", "--config", cfg},
				{"dlq", "list", "--config", cfg}, {"dlq", "replay", "--config", cfg, "--all"}, {"dlq", "purge", "--config", cfg, "--all"},
			} {
				if code, _, errOut := tr.run(ctx, args...); code != 1 || !strings.Contains(errOut, "config") {
					t.Errorf("%v: exit %d, want 1 with a config error: %s", args, code, errOut)
				}
			}
			tr.assertClean(pw, token, brokerPW, whsec, "PLANTED", "whsec_P")
			if strings.Contains(name, "with credentials") && !strings.Contains(strings.Join(tr.human, "\n"), "credentials do not belong") {
				t.Errorf("no error says the credentials belong elsewhere:\n%s", strings.Join(tr.human, "\n"))
			}
		})
	}
}

// A receiver that echoes the request's headers and url in its error reply,
// with terminal escapes, and one that redirects to a url holding
// credentials: neither the configured secrets nor the escapes reach the
// logs, the dead-letter files, dlq list (table and JSON), dlq replay's
// output, status, check, or the error a run stops with when there is no
// dead-letter store.
func TestReceiverRepliesNeverLeakSecretsOrDriveTheTerminal(t *testing.T) {
	const (
		bearer = "PLANTEDbearer5555"
		apiKey = "PLANTEDapikey6666"
		query  = "PLANTEDquery7777"
		locPW  = "PLANTEDlocpw8888"
		locSig = "PLANTEDlocsig9999"
	)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/moved":
			w.Header().Set("Location", "https://u:"+locPW+"@elsewhere.example/next?sig="+locSig)
			w.WriteHeader(http.StatusFound)
		default:
			var b strings.Builder
			b.WriteString("\x1b[2J\x1b[H\x1b[32mALL EVENTS DELIVERED\x1b[0m\a ")
			keys := make([]string, 0, len(r.Header))
			for k := range r.Header {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(r.Header[k], ","))
			}
			fmt.Fprintf(&b, "url: %s", r.URL)
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, b.String())
		}
	}))
	t.Cleanup(rc.Close)

	srv := testserver.Start(t, testserver.Options{ServerID: 11})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := func(cpPath, deadLetter, extra string) string {
		return writeFile(t, "relay.yaml", fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 100ms}
dead_letter: {store: %s}
sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints:
        - {name: echo, url: "%s/echo?token=%s", headers: {Authorization: "Bearer %s", X-Api-Key: "%s"}}
%s
log: {level: debug}
`, srv.Port, testserver.ServerID(), dbname, cpPath, deadLetter, rc.URL, query, bearer, apiKey, extra))
	}
	moved := fmt.Sprintf(`        - {name: moved, url: "%s/moved?token=%s", headers: {Authorization: "Bearer %s"}}`, rc.URL, query, bearer)
	stateDir := filepath.Join(dir, "state")
	cfg := config(filepath.Join(stateDir, "checkpoints.json"), "file", moved)
	tr := &transcript{t: t}

	// run, until every event is dead-lettered at both endpoints.
	ctx, cancel := context.WithCancel(context.Background())
	var relayOut syncBuffer
	exited := make(chan int, 1)
	go func() { exited <- mainCode(ctx, []string{"run", "--config", cfg}, &relayOut, &relayOut) }()
	eventually.Within(t, 30*time.Second, "the start checkpoint", func() bool {
		_, err := os.Stat(filepath.Join(stateDir, "checkpoints.json"))
		return err == nil
	}, func() { t.Log(relayOut.String()) })
	w := &outboxtest.Workload{}
	outboxtest.Produce(ctx, t, db, w, 1, 2, []int{1}, 2)
	eventually.Within(t, 20*time.Second, "dead letters", func() bool {
		return len(dlqList(t, cfg)) >= 2*w.Events()
	}, func() { t.Log(relayOut.String()) })
	cancel()
	if code := <-exited; code != 0 {
		t.Errorf("run: exit %d", code)
	}
	tr.add("run log", relayOut.String(), true)
	if !strings.Contains(relayOut.String(), "insecure setting") || !strings.Contains(relayOut.String(), "header Authorization") {
		t.Errorf("run did not warn of an Authorization header sent over http://:\n%s", relayOut.String())
	}

	bg := context.Background()
	if code, out, _ := tr.run(bg, "dlq", "list", "--config", cfg); code != 0 || !strings.Contains(out, `\x1b[2J`) {
		t.Errorf("dlq list: exit %d, want the escape shown escaped:\n%s", code, out)
	}
	tr.run(bg, "dlq", "list", "--config", cfg, "--json")
	tr.addFiles(stateDir) // the dead-letter files and the checkpoint
	if code, _, _ := tr.run(bg, "dlq", "replay", "--config", cfg, "--all"); code != 1 {
		t.Errorf("dlq replay to endpoints that still fail: exit %d, want 1", code)
	}
	if code, out, _ := tr.run(bg, "check", "--config", cfg); !strings.Contains(out, "WARN  insecure_settings") {
		t.Errorf("check: exit %d, no insecure_settings WARN:\n%s", code, out)
	}
	tr.run(bg, "status", "--config", cfg)

	// With no dead-letter store, the first rejection stops the relay with
	// an error that quotes the reply.
	cfg2 := config(filepath.Join(dir, "state2", "checkpoints.json"), "none", "")
	ctx2, cancel2 := context.WithTimeout(bg, 60*time.Second)
	defer cancel2()
	var out2 syncBuffer
	exited2 := make(chan int, 1)
	go func() { exited2 <- mainCode(ctx2, []string{"run", "--config", cfg2}, &out2, &out2) }()
	eventually.Within(t, 30*time.Second, "the second relay's checkpoint", func() bool {
		_, err := os.Stat(filepath.Join(dir, "state2", "checkpoints.json"))
		return err == nil
	}, func() { t.Log(out2.String()) })
	outboxtest.Produce(ctx2, t, db, &outboxtest.Workload{Prefix: "second-"}, 1, 1, []int{1}, 1)
	if code := <-exited2; code != 1 || !strings.Contains(out2.String(), "400 Bad Request") {
		t.Errorf("run with dead_letter none: exit %d, want 1 with the rejection:\n%s", code, out2.String())
	}
	tr.add("run (no dead-letter store)", out2.String(), true)

	tr.assertClean(bearer, apiKey, query, locPW, locSig, "PLANTED")
}

// status and dlq list only read: on a checkpoint database where the relay's
// user may only SELECT, with no tables yet, they succeed and create nothing.
func TestReadOnlyCommandsCreateNothing(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{ServerID: 12})
	dbname := srv.NewDatabase(t)
	srv.Exec(t, "CREATE USER 'reader'@'%' IDENTIFIED BY 'readerpw'", "GRANT SELECT ON `"+dbname+"`.* TO 'reader'@'%'")
	cfg := writeFile(t, "relay.yaml", fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root}
tables: [{name: %s.outbox}]
checkpoint: {store: mysql, dsn: "reader:readerpw@tcp(127.0.0.1:%d)/%s"}
dead_letter: {store: mysql}
sinks: [{name: out, type: stdout}]
`, srv.Port, dbname, srv.Port, dbname))
	ctx := context.Background()
	code, out, errOut := runMain(t, ctx, "status", "--config", cfg)
	if code != 0 || !strings.Contains(out, "(none: starts at checkpoint.start current)") {
		t.Errorf("status: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runMain(t, ctx, "dlq", "list", "--config", cfg)
	if code != 0 || !strings.Contains(out, "0 dead letters") {
		t.Errorf("dlq list: exit %d\n%s%s", code, out, errOut)
	}
	var n int
	if err := srv.DB(t, dbname).QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", dbname).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d tables in the checkpoint database after status and dlq list (%v), want 0", n, err)
	}

	// The file stores: nothing is created either.
	dir := filepath.Join(t.TempDir(), "absent")
	cfg = writeFile(t, "relay.yaml", fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root}
tables: [{name: %s.outbox}]
checkpoint: {path: %s}
sinks: [{name: out, type: stdout}]
`, srv.Port, dbname, filepath.Join(dir, "checkpoints.json")))
	for _, args := range [][]string{{"status", "--config", cfg}, {"dlq", "list", "--config", cfg}} {
		if code, out, errOut := runMain(t, ctx, args...); code != 0 {
			t.Errorf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("status or dlq list created %s", dir)
	}
}

// Insecure settings are named by check, and logged at WARN by run, even
// when the source cannot be reached.
func TestInsecureSettingsAreWarnedOf(t *testing.T) {
	cfg := writeFile(t, "relay.yaml", `
source: {host: 127.0.0.1, port: 1, tls: {enabled: true, insecure_skip_verify: true}}
tables: [{name: shop.outbox}]
sinks:
  - {name: k, type: kafka, kafka: {brokers: ["127.0.0.1:1"], sasl: {mechanism: plain, username: u, password_env: KPW}}}
  - {name: k2, type: kafka, kafka: {brokers: ["127.0.0.1:1"], tls: {enabled: true, insecure_skip_verify: true}}}
  - name: hooks
    type: webhook
    webhook: {endpoints: [{name: a, url: "http://hooks.example.com/in?token=PLANTEDq", headers: {Authorization: "Bearer PLANTEDb"}}]}
`)
	tr := &transcript{t: t}
	ctx := context.Background()
	want := []string{
		"source.tls.insecure_skip_verify is true",
		"sinks[0] (k): kafka.sasl.mechanism is plain without kafka.tls",
		"sinks[1] (k2): kafka.tls.insecure_skip_verify is true",
		"sinks[2].webhook.endpoints[0] (hooks/a): url http://hooks.example.com/in?token=xxxxx is http://, so the header Authorization",
	}
	_, out, _ := tr.run(ctx, "check", "--config", cfg)
	for _, w := range want {
		if !strings.Contains(out, "WARN  insecure_settings         "+w) {
			t.Errorf("check does not say %q:\n%s", w, out)
		}
	}
	_, _, errOut := tr.run(ctx, "run", "--config", cfg)
	for _, w := range want {
		if !strings.Contains(errOut, `level=WARN msg="insecure setting: `+w) {
			t.Errorf("run does not warn %q:\n%s", w, errOut)
		}
	}
	tr.assertClean("PLANTED")
}
