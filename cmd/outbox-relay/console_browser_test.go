package main

import (
	"context"

	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/outbox-relay/outbox-relay/internal/eventually"
)

// chromiumPath returns Debian's Chromium, skipping the test when it is not
// installed, unless under CI, where the test must run (.ci/run installs it).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "chromium"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed and CI=true: the browser test must run (apt-get install -y chromium)")
	}
	t.Skip("chromium is not installed (apt-get install -y chromium): the console's browser test is skipped")
	return ""
}

// pageErrors collects what a page reports as broken: console errors,
// uncaught exceptions, error log entries (failed loads, CSP refusals) and
// securitypolicyviolation events.
type pageErrors struct {
	mu   sync.Mutex
	errs []string
}

func (pe *pageErrors) add(s string) {
	pe.mu.Lock()
	pe.errs = append(pe.errs, s)
	pe.mu.Unlock()
}

func (pe *pageErrors) list() []string {
	pe.mu.Lock()
	defer pe.mu.Unlock()
	return append([]string(nil), pe.errs...)
}

// cspListener is evaluated in every document before the page's own
// scripts (from outside the page: the page's policy does not apply to it).
const cspListener = `document.addEventListener("securitypolicyviolation", function (e) {
  console.error("securitypolicyviolation: " + e.violatedDirective + " blocked " + e.blockedURI);
});`

// The console walked in a real browser: sign in, find a failed event,
// read the endpoint's answer, resend it, see the new attempt arrive at the
// receiver and on the page; then a tenant's signed link. No page may log
// a console error or break its Content-Security-Policy.
func TestTheConsoleInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary against MariaDB and a browser")
	}
	chromium := chromiumPath(t)
	cr := startConsoleRelay(t)
	cr.addEndpoint(t, cr.t1, "shop-one", "/one")
	cr.insert("evt-web", "t1")
	eventually.Within(t, 30*time.Second, "evt-web delivered after a 500", func() bool {
		got := cr.attempts(t, cr.op, "event_id=evt-web")
		return len(got) == 2 && got[0].Status == 200
	}, cr.showLog)

	alloc, cancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()))
	defer cancel()
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	defer cancel()
	// The first Run starts the browser (no timeout on it: it would stop
	// the browser); the page's messages are read from then on.
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: cspListener}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	pe := &pageErrors{}
	messages := chromedp.Console(ctx)
	var reading sync.WaitGroup
	reading.Go(func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				pe.add(m.String() + " " + m.URL)
			}
		}
	})
	defer reading.Wait()
	defer cancel()
	must := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		actx, acancel := context.WithTimeout(ctx, 90*time.Second)
		defer acancel()
		if err := chromedp.Do(actx, actions...); err != nil {
			t.Fatalf("%s: %v (page errors: %v)", what, err, pe.list())
		}
	}
	text := func(what string, sel chromedp.CSS) string {
		t.Helper()
		actx, acancel := context.WithTimeout(ctx, 30*time.Second)
		defer acancel()
		s, err := chromedp.Run(actx, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("%s: %v (page errors: %v)", what, err, pe.list())
		}
		return s
	}

	// Sign in with the operator token.
	must("sign in",
		chromedp.Navigate(cr.url+"/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), cr.op),
		chromedp.Click(chromedp.ID("sign-in")),
		chromedp.WaitVisible(chromedp.ID("endpoints")))
	overview := text("read the overview", "main")
	for _, want := range []string{"hooks", ".shop-one", "attached", "evt-web"} {
		if !strings.Contains(overview, want) {
			t.Errorf("the overview does not show %q:\n%s", want, overview)
		}
	}

	// Find the failed event among the recent failures, open its endpoint.
	must("open the failed event's endpoint",
		chromedp.Click(chromedp.CSS(`#failures tr.attempt a`)),
		chromedp.WaitVisible(chromedp.ID("attempts")))
	failedRow := `#attempts tr.attempt.outcome-retry[data-event="evt-web"]`
	must("open the failed attempt's answer",
		chromedp.Click(chromedp.CSS(failedRow+` details summary`)),
		chromedp.WaitVisible(chromedp.CSS(failedRow+` pre.answer`)))
	if answer := text("read the answer", chromedp.CSS(failedRow+` pre.answer`)); !strings.Contains(answer, "warming up") {
		t.Errorf("the failed attempt's answer reads %q, want the receiver's body", answer)
	}

	// Resend it: the page waits for the new attempt and reloads.
	before := len(cr.rc.Accepted("/one"))
	must("resend", chromedp.Click(chromedp.CSS(failedRow+` button.resend`)))
	eventually.Within(t, 90*time.Second, "the resent event at the receiver", func() bool {
		return len(cr.rc.Accepted("/one")) > before
	}, cr.showLog)
	re := cr.rc.Accepted("/one")[before]
	if re.EventID != "evt-web" || re.Replay == "" {
		t.Errorf("the resent request: event %q replay %q, want evt-web from a replay job", re.EventID, re.Replay)
	}
	must("the new attempt on the page",
		chromedp.WaitVisible(chromedp.CSS(`#attempts tr.attempt.outcome-delivered[data-event="evt-web"] .tag`)))
	actx, acancel := context.WithTimeout(ctx, 30*time.Second)
	nodes, err := chromedp.Run(actx, chromedp.Nodes(chromedp.CSSAll(`#attempts tr.attempt[data-event="evt-web"]`)))
	acancel()
	if err != nil || len(nodes) != 3 {
		t.Errorf("%d attempts of evt-web on the page (%v), want 3 (500, 200, the resend's 200)", len(nodes), err)
	}

	// A tenant's signed link (outbox-relay console link) opens t1's view.
	out, err := exec.Command(cr.bin, "console", "link", "--config", cr.cfgPath, "--tenant", "t1", "--ttl", "5m").CombinedOutput()
	if err != nil {
		t.Fatalf("console link: %v\n%s", err, out)
	}
	link := strings.TrimSpace(string(out))
	if !strings.HasPrefix(link, cr.url+"/t/") {
		t.Fatalf("console link printed %q", link)
	}
	must("the tenant's link",
		chromedp.Navigate(link),
		chromedp.WaitVisible(chromedp.ID("endpoints")),
		chromedp.Click(chromedp.CSS(`#endpoints a`)),
		chromedp.WaitVisible(chromedp.ID("attempts")))
	tenantView := text("the tenant's endpoint", "main")
	if !strings.Contains(tenantView, ".shop-one") || !strings.Contains(tenantView, "evt-web") {
		t.Errorf("the tenant's view:\n%s", tenantView)
	}
	if errs := pe.list(); len(errs) > 0 {
		t.Errorf("the pages reported errors:\n%s", strings.Join(errs, "\n"))
	}
}
