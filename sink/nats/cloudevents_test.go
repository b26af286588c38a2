package nats_test

import (
	"context"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/event/cloudevent"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/nats"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
	"github.com/outbox-relay/outbox-relay/sink/sinktest/cetest"
)

// NATS protocol binding: binary mode puts the attributes in ce-* headers
// and datacontenttype in content-type; structured mode a JSON document in
// the data. The SDK reads both as the event's CloudEvent.
func TestCloudEventsAreReadByTheSDK(t *testing.T) {
	sinktest.RequireServer(t, "nats")
	cetest.EachMode(t, func(t *testing.T, ce cloudevent.Config) (sink.Sink, func(int) cetest.Message) {
		u := sinktest.Unique()
		stream, prefix := "T"+u, "t"+u
		cfg := nats.Config{URLs: []string{"nats://" + sharedServer}, Stream: stream, Subject: prefix + ".ce",
			CreateStream: nats.CreateStreamConfig{Enabled: true, Subjects: []string{prefix + ".>"}, Storage: "memory"},
			CloudEvents:  ce}
		cfg.Defaults()
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		s, err := nats.New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteStream(t, stream) })
		nc, err := natsgo.Connect("nats://" + sharedServer)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return s, func(i int) cetest.Message {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st, err := js.Stream(ctx, stream)
			if err != nil {
				t.Fatal(err)
			}
			m, err := st.GetMsg(ctx, uint64(i+1))
			if err != nil {
				t.Fatalf("get message %d: %v", i+1, err)
			}
			msg := cetest.Message{Prefix: "ce-", Headers: map[string]string{}, ContentType: m.Header.Get("content-type"), Body: m.Data}
			for k, v := range m.Header {
				msg.Headers[k] = v[len(v)-1]
			}
			return msg
		}
	})
}
