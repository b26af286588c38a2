package canal

// This file owns how the stream's events reach the reader: on the syncer's
// own goroutine, as each is parsed (go-mysql's SynchronousEventHandler), not
// through its channel to a second goroutine.
//
// At a steady trickle each binlog packet wakes the process from idle. Through
// the channel every event of a transaction (GTID, table map, rows, XID) made
// the reader's goroutine runnable again and the scheduler woke a thread for
// it; handled inline, a transaction costs the one wake-up of the goroutine
// that reads the socket. On a backlog the channel let the parse of the next
// events overlap the decoding of the last; inline, the pipeline's delivery
// goroutine still runs beside the reading one.

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/go-mysql-org/go-mysql/replication"
)

// inlineFunc is a func as go-mysql's EventHandler.
type inlineFunc func(*replication.BinlogEvent) error

func (f inlineFunc) HandleEvent(e *replication.BinlogEvent) error { return f(e) }

// inlineEnd is how the handler ended the stream, written on the syncer's
// goroutine before it ends (so read by stream only after the streamer's
// error has arrived, or the syncer was closed).
type inlineEnd struct {
	err      error // the handler's own error, not the stream's
	panicked any   // the handler panicked with this, at stack
	stack    []byte
}

// errInlinePanic stands for a handler's panic on its way out of go-mysql,
// which would otherwise recover it into a stream error (and a reconnect).
var errInlinePanic = errors.New("binlog event handler panicked")

// inline makes fn go-mysql's synchronous event handler: fn's error ends the
// stream and is kept in end, and so is a panic, to be raised again on the
// goroutine that runs the stream (end.result), not retried as a stream error.
func inline(fn func(*replication.BinlogEvent) error, end *inlineEnd) replication.EventHandler {
	return inlineFunc(func(e *replication.BinlogEvent) (err error) {
		defer func() {
			if p := recover(); p != nil {
				end.panicked, end.stack = p, debug.Stack()
				err = errInlinePanic
			}
		}()
		if err := fn(e); err != nil {
			end.err = err
			return err
		}
		return nil
	})
}

// wait blocks until the stream ends (the handler's error, the connection's,
// or ctx) and returns why: the handler's error as it is, the stream's
// classified (sent is the GTID set the dump sent), or ctx's.
func (end *inlineEnd) wait(ctx context.Context, streamer *replication.BinlogStreamer, sent string) error {
	for {
		// With a synchronous handler the streamer carries no events, only
		// the error that ends the stream.
		if _, err := streamer.GetEvent(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err() // the syncer's goroutine may still run: end is not read
			}
			if end.panicked != nil {
				panic(fmt.Sprintf("%v\n\nthe handler's goroutine:\n%s", end.panicked, end.stack))
			}
			if end.err != nil {
				return end.err
			}
			return classifyDump(err, sent)
		}
	}
}
