package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/sink"
)

// permanentCodes are the broker error codes that retrying the same message
// cannot fix.
var permanentCodes = map[kafkago.Error]bool{
	kafkago.MessageSizeTooLarge:        true,
	kafkago.RecordListTooLarge:         true,
	kafkago.InvalidTopic:               true,
	kafkago.TopicAuthorizationFailed:   true,
	kafkago.ClusterAuthorizationFailed: true,
	kafkago.InvalidRecord:              true,
	kafkago.InvalidTimestamp:           true,
	kafkago.PolicyViolation:            true,
}

// classify marks err Permanent when its broker error code says retrying
// cannot help, and returns it as is otherwise (retriable).
func classify(err error) error {
	if err == nil || sink.IsPermanent(err) {
		return err
	}
	var code kafkago.Error
	if errors.As(err, &code) && permanentCodes[code] {
		return sink.Permanent(err)
	}
	return err
}

// tooLarge reports whether the broker rejected a record batch for its size.
func tooLarge(err error) bool {
	return errors.Is(err, kafkago.MessageSizeTooLarge) || errors.Is(err, kafkago.RecordListTooLarge)
}

// errNotSent is the error of the messages of a Write that were not sent
// because an earlier round failed: sending them could have put them ahead
// of an earlier message of the same key.
type errNotSent struct{ cause error }

func (e errNotSent) Error() string {
	return fmt.Sprintf("not sent: an earlier message of the batch failed: %v", e.cause)
}

func (e errNotSent) Unwrap() error { return e.cause }

// readBackError is err, an error of Recover's reads, as the pipeline should
// take it: as is (retried) when the brokers could not be reached or said to
// try again, and otherwise wrapping sink.ErrCannotRecover, so that an answer
// the read does not expect makes the restart fall back to at-least-once
// (logged and counted) instead of retrying it for ever.
func readBackError(err error) error {
	var code kafkago.Error
	var ne net.Error
	switch {
	case err == nil, errors.Is(err, sink.ErrCannotRecover):
		return err
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &code):
		if code.Temporary() {
			return err
		}
	case errors.As(err, &ne), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return err
	}
	return fmt.Errorf("%w: %w", err, sink.ErrCannotRecover)
}
