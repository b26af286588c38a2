package canal

import (
	"context"
	"net"
	"sync"
	"time"
)

// go-mysql's BinlogSyncer moves its connection's read deadline forward by
// ReadTimeout after every binlog event it receives: one runtime timer
// update per event, about 6 % of the relay's CPU on a backlog (issue 32's
// profile). lazyDeadlineConn keeps the meaning of the deadline — a
// connection that receives nothing for ReadTimeout is ended, never sooner —
// while moving the socket's deadline only when a requested one passes it:
// then to the requested one plus slack. A deadline may so fire up to slack
// late, never early, and an earlier deadline than the socket's (go-mysql
// sets now+100 ms to wake a read when its context ends) is set at once.

// deadlineSlack is how late a read deadline may fire: a sixteenth of the
// timeout, at most a second (the default timeout is 15 s).
func deadlineSlack(timeout time.Duration) time.Duration {
	return min(timeout/16, time.Second)
}

// lazyDeadlineDialer dials as net.Dialer does and returns connections whose
// read deadlines move lazily, by slack.
func lazyDeadlineDialer(slack time.Duration) func(ctx context.Context, network, address string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, address)
		if err != nil || slack <= 0 {
			return c, err
		}
		return &lazyDeadlineConn{Conn: c, slack: slack}, nil
	}
}

// lazyDeadlineConn is a net.Conn whose SetReadDeadline sets the socket's
// only when the socket's would fire before the one asked for, or more than
// slack after it (see above). SetDeadline sets both, as asked.
type lazyDeadlineConn struct {
	net.Conn
	slack time.Duration

	mu  sync.Mutex
	set time.Time // the socket's read deadline (zero: none)
}

func (c *lazyDeadlineConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !t.IsZero() && !c.set.IsZero() && !c.set.Before(t) && c.set.Sub(t) <= c.slack {
		return nil // the socket's fires at t or up to slack after it
	}
	if !t.IsZero() && (c.set.IsZero() || t.After(c.set)) {
		t = t.Add(c.slack) // moving it forward: far enough to skip the next ones
	}
	if err := c.Conn.SetReadDeadline(t); err != nil {
		return err
	}
	c.set = t
	return nil
}

func (c *lazyDeadlineConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.Conn.SetDeadline(t); err != nil {
		return err
	}
	c.set = t
	return nil
}
