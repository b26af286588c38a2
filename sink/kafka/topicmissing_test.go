package kafka

import (
	"errors"
	"fmt"
	"testing"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/produce"
)

// A topic is missing whether the broker says so or kafka-go's cached
// metadata does (seen in CI: a broker that came back empty, answered by the
// client itself with "fetch request error: topic not found", so the topic
// was never created again and the pipeline backed off for minutes).
func TestTopicMissing(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"the broker's unknown topic or partition", fmt.Errorf("produce: %w", kafkago.UnknownTopicOrPartition), true},
		{"the client's topic not found, wrapped as kafka-go's Produce wraps it", fmt.Errorf("kafka.(*Client).Produce: %w", produce.NewError(protocol.ErrNoTopic)), true},
		{"a refused connection", errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), false},
		{"no leader yet", produce.NewError(protocol.ErrNoLeader), false},
	} {
		if got := topicMissing(tc.err); got != tc.want {
			t.Errorf("%s: topicMissing(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
