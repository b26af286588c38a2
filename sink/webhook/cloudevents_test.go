package webhook_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/outbox-relay/outbox-relay/event/cloudevent"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
	"github.com/outbox-relay/outbox-relay/sink/sinktest/cetest"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

// In both modes the CloudEvents SDK's HTTP binding reads every request as
// the event's CloudEvent, and the Standard Webhooks signature verifies
// over the body as sent.
func TestCloudEventsAreReadByTheSDK(t *testing.T) {
	secret := "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	for _, mode := range []string{cloudevent.Binary, cloudevent.Structured} {
		t.Run(mode, func(t *testing.T) {
			var (
				mu  sync.Mutex
				got = map[string]*cloudevents.Event{}
			)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				if err := webhook.Verify([]string{secret}, r.Header, body, time.Now(), time.Minute); err != nil {
					t.Errorf("signature: %v", err)
				}
				r.Body = io.NopCloser(bytes.NewReader(body))
				ce, err := binding.ToEvent(r.Context(), cehttp.NewMessageFromHttpRequest(r))
				if err != nil {
					t.Errorf("the SDK cannot read request %s (Content-Type %q): %v", r.Header.Get("webhook-id"), r.Header.Get("Content-Type"), err)
					w.WriteHeader(http.StatusBadRequest)
					return
				}
				mu.Lock()
				got[ce.ID()] = ce
				mu.Unlock()
				w.WriteHeader(http.StatusNoContent)
			}))
			defer srv.Close()
			e, err := webhook.NewEndpoint(webhook.EndpointConfig{Name: "ce", URL: srv.URL, Secrets: []string{secret},
				CloudEvents: cloudevent.Config{Mode: mode}}.WithDefaults(), nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := e.Connect(ctx); err != nil {
				t.Fatal(err)
			}
			defer e.Close(ctx)
			evs := sinktest.Events("ce", 40, 3)
			if err := sink.Deliver(ctx, e, evs); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, ev := range evs {
				ce := got[ev.ID]
				if ce == nil {
					t.Fatalf("event %s: no request", ev.ID)
				}
				cetest.Check(t, ev, ce, cetest.Source)
			}
		})
	}
}
