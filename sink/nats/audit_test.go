package nats_test

import (
	"context"
	"fmt"
	"testing"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/sink/sinktest"
	"github.com/outbox-relay/outbox-relay/sink/sinktest/audittest"
)

// An audit of a healthy NATS JetStream run reports nothing; deleting
// messages from the stream makes it report exactly their ids.
func TestAuditNATSFindsExactlyTheDeletedMessages(t *testing.T) {
	sinktest.RequireServer(t, "nats")
	u := sinktest.Unique()
	stream, prefix := "A"+u, "a"+u
	nc, err := natsgo.Connect("nats://" + sharedServer)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	defer js.DeleteStream(context.Background(), stream)
	audittest.Stream(t, fmt.Sprintf(`
  - name: nats
    type: nats
    nats:
      urls: [nats://%s]
      stream: %s
      subject: %s.outbox.event.{{.AggregateType}}
      create_stream: {enabled: true, subjects: [%s.>], storage: memory}
`, sharedServer, stream, prefix, prefix), nil, func() ([]string, func(int)) {
		ctx := context.Background()
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return nil, nil
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		var seqs []uint64
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				continue // deleted
			}
			ids, seqs = append(ids, m.Header.Get("id")), append(seqs, seq)
		}
		return ids, func(i int) {
			if err := st.DeleteMsg(ctx, seqs[i]); err != nil {
				t.Fatal(err)
			}
		}
	})
}
