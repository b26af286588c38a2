package nats_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink/internal/route"
	"github.com/outbox-relay/outbox-relay/sink/nats"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
)

const sharedServer = "127.0.0.1:4222"

// readStream returns every message of stream, in stream order, waiting up
// to a few seconds for at least n.
func readStream(addr, stream string) func(t *testing.T, n int) []sinktest.Received {
	return func(t *testing.T, n int) []sinktest.Received {
		t.Helper()
		nc, err := natsgo.Connect("nats://" + addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		var out []sinktest.Received
		var seq uint64
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			info, err := st.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for seq < info.State.LastSeq {
				seq++
				m, err := st.GetMsg(ctx, seq)
				if errors.Is(err, jetstream.ErrMsgNotFound) {
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, received(m.Header, m.Data))
			}
			if len(out) >= n || time.Now().After(deadline) {
				return out
			}
		}
	}
}

func received(h natsgo.Header, data []byte) sinktest.Received {
	pos, _ := strconv.ParseUint(h.Get(route.HeaderBinlogPos), 10, 32)
	hs := map[string]string{}
	for k, v := range h {
		hs[k] = v[len(v)-1]
	}
	if data == nil {
		data = []byte{}
	}
	return sinktest.Received{ID: h.Get(route.HeaderID), Type: h.Get(route.HeaderType), AggregateType: h.Get(route.HeaderAggregateType),
		AggregateID: h.Get(route.HeaderAggregateID), Table: h.Get(route.HeaderTable), GTID: h.Get(route.HeaderGTID),
		BinlogFile: h.Get(route.HeaderBinlogFile), BinlogPos: uint32(pos), Headers: hs,
		TraceParent: h.Get(route.HeaderTraceParent), TraceState: h.Get(route.HeaderTraceState), Payload: data}
}

func TestConformance(t *testing.T) {
	sinktest.RequireServer(t, "nats")
	nc, err := natsgo.Connect("nats://" + sharedServer)
	if err != nil {
		t.Fatal(err)
	}
	maxPayload := int(nc.MaxPayload())
	nc.Close()
	sinktest.Run(t, sinktest.Harness{
		Carries: sinktest.All,
		New:     func(t *testing.T) *sinktest.Target { return target(t, 16<<10) },
		Limits: []sinktest.Limit{
			{Name: "headers over JetStream's 64 KiB", New: func(t *testing.T) *sinktest.Target { return target(t, 0) },
				Exceed: func(e *event.Event) {
					e.Headers = append(e.Headers, event.Header{Key: "big", Value: strings.Repeat("v", 64<<10)})
				}},
			{Name: "a message over the server's max_payload", New: func(t *testing.T) *sinktest.Target { return target(t, 0) },
				Exceed: func(e *event.Event) { e.Payload = make([]byte, maxPayload) }},
		},
	})
}

// target is a fresh stream with a max_msg_size of maxMsgSize (0: none),
// written to through a sinktest.Link.
func target(t *testing.T, maxMsgSize int32) *sinktest.Target {
	u := sinktest.Unique()
	stream, prefix := "T"+u, "t"+u
	link := sinktest.StartLink(t, sharedServer)
	s, err := nats.New(nats.Config{URLs: []string{"nats://" + link.Addr()}, Stream: stream,
		Subject: prefix + ".outbox.event.{{.AggregateType}}", AckTimeout: 2 * time.Second, Timeout: 2 * time.Second,
		ReconnectWait: 100 * time.Millisecond,
		CreateStream:  nats.CreateStreamConfig{Enabled: true, Subjects: []string{prefix + ".>"}, Storage: "memory", MaxMsgSize: maxMsgSize}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteStream(t, stream) })
	return &sinktest.Target{Sink: s, Read: readStream(sharedServer, stream), Fault: link,
		Poison: func(e *event.Event) { e.Payload = []byte(`{"blob":"` + strings.Repeat("x", 20<<10) + `"}`) }}
}

func deleteStream(t *testing.T, stream string) {
	nc, err := natsgo.Connect("nats://" + sharedServer)
	if err != nil {
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = js.DeleteStream(ctx, stream)
}
