package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	_ "github.com/outbox-relay/outbox-relay/sink/all"
)

func TestSinkStartBackfill(t *testing.T) {
	const base = "source: {host: 127.0.0.1}\ntables: [{name: shop.outbox}]\ncheckpoint: {path: /tmp/cp.json}\n"
	for _, tc := range []struct{ name, sinks, err string }{
		{"a backfill with a filter and an age is taken",
			`[{name: out, type: stdout, start: {backfill: true, where: "status = 'pending'", since: 168h}}]`, ""},
		{"a filter that ends the statement is refused, naming the fix",
			`[{name: out, type: stdout, start: {backfill: true, where: "1; DROP TABLE outbox"}}]`, "sinks[0].start.where: where filter"},
		{"a filter without a backfill is refused",
			`[{name: out, type: stdout, start: {where: "status = 'pending'"}}]`, "set start.backfill: true"},
		{"a webhook sink's backfill is refused",
			`[{name: hooks, type: webhook, start: {backfill: true}, webhook: {endpoints: [{name: a, url: "https://h.example/", secrets: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]}]}}]`, "replay to an endpoint instead"},
		{"an unknown key under start is named",
			`[{name: out, type: stdout, start: {backfil: true}}]`, `sinks[0].start.backfil: line`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(base + "sinks: " + tc.sinks + "\n"))
			if err == nil {
				err = cfg.Validate()
			}
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("got %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("got %v, want an error with %q", err, tc.err)
			case tc.err == "":
				st := cfg.Sinks[0].Start
				if !st.Backfill || st.Where != "status = 'pending'" || st.Since != 168*time.Hour || st.ChunkSize != 1000 {
					t.Errorf("start %+v", st)
				}
			}
		})
	}
}
