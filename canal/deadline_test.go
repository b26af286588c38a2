package canal

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// deadlineRecorder is a net.Conn that records the read deadlines set on it.
type deadlineRecorder struct {
	net.Conn
	set []time.Time
}

func (d *deadlineRecorder) SetReadDeadline(t time.Time) error {
	d.set = append(d.set, t)
	return nil
}

func TestReadDeadlinesMoveOnlyWhenTheSocketsWouldFireEarly(t *testing.T) {
	rec := &deadlineRecorder{}
	const slack = time.Second
	c := &lazyDeadlineConn{Conn: rec, slack: slack}
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	timeout := 15 * time.Second

	// One event every millisecond for 3 s, each asking for now+timeout:
	// the socket's deadline moves about once per slack, and is never before
	// what was asked.
	for i := range 3000 {
		asked := t0.Add(time.Duration(i)*time.Millisecond + timeout)
		if err := c.SetReadDeadline(asked); err != nil {
			t.Fatal(err)
		}
		if got := c.set; got.Before(asked) || got.Sub(asked) > slack {
			t.Fatalf("event %d: the socket's deadline %v is not within [asked, asked+slack] of %v", i, got, asked)
		}
	}
	if n := len(rec.set); n < 3 || n > 4 {
		t.Errorf("3,000 deadlines over 3 s with a 1 s slack set the socket's %d times, want 3 or 4", n)
	}

	// An earlier deadline (go-mysql wakes a read with now+100ms when its
	// context ends) is set at once, exactly.
	wake := t0.Add(3*time.Second + 100*time.Millisecond)
	before := len(rec.set)
	if err := c.SetReadDeadline(wake); err != nil {
		t.Fatal(err)
	}
	if len(rec.set) != before+1 || !rec.set[len(rec.set)-1].Equal(wake) {
		t.Errorf("an earlier deadline: socket's set to %v, want %v at once", rec.set[len(rec.set)-1], wake)
	}
	// No deadline is no deadline.
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if last := rec.set[len(rec.set)-1]; !last.IsZero() {
		t.Errorf("a zero deadline set the socket's to %v", last)
	}
	// A deadline after none gets the slack, and the next one within it is skipped.
	_ = c.SetReadDeadline(t0)
	n := len(rec.set)
	_ = c.SetReadDeadline(t0.Add(slack / 2))
	if len(rec.set) != n {
		t.Errorf("a deadline within the slack of the socket's was set again")
	}
}

func TestALazyReadDeadlineStillEndsASilentConnectionNeverEarly(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			defer c.Close()
			var b [1]byte
			_, _ = c.Read(b[:]) // silent until the client closes
		}
	}()
	conn, err := lazyDeadlineDialer(20*time.Millisecond)(context.Background(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, ok := conn.(*lazyDeadlineConn); !ok {
		t.Fatalf("the dialer returned a %T", conn)
	}
	const timeout = 50 * time.Millisecond
	// Moved forward several times, as go-mysql does after each event.
	for range 5 {
		if err := conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
			t.Fatal(err)
		}
	}
	asked := time.Now().Add(timeout)
	_ = conn.SetReadDeadline(asked)
	var b [1]byte
	_, err = conn.Read(b[:])
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read from a silent connection: %v, want a deadline error", err)
	}
	if now := time.Now(); now.Before(asked) {
		t.Errorf("the read ended %v before the deadline asked for", asked.Sub(now))
	}
}
