package retry

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestWaitIsCappedExponentialWithJitter(t *testing.T) {
	p := Policy{Initial: 100 * time.Millisecond, Max: 30 * time.Second}
	tests := []struct {
		n       int
		ceiling time.Duration
	}{
		{1, 100 * time.Millisecond},
		{2, 200 * time.Millisecond},
		{5, 1600 * time.Millisecond},
		{9, 25600 * time.Millisecond},
		{10, 30 * time.Second},
		{1000, 30 * time.Second},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("retry %d waits between half the ceiling and the ceiling", tc.n), func(t *testing.T) {
			if c := p.Ceiling(tc.n); c != tc.ceiling {
				t.Fatalf("Ceiling(%d) = %s, want %s", tc.n, c, tc.ceiling)
			}
			lo, hi := tc.ceiling, time.Duration(0)
			for range 2000 {
				d := p.Wait(tc.n)
				lo, hi = min(lo, d), max(hi, d)
			}
			if lo < tc.ceiling/2 || hi > tc.ceiling {
				t.Fatalf("Wait(%d) ranged over [%s, %s], want within [%s, %s]", tc.n, lo, hi, tc.ceiling/2, tc.ceiling)
			}
			if hi-lo < tc.ceiling/4 {
				t.Fatalf("Wait(%d) ranged over [%s, %s]: no jitter", tc.n, lo, hi)
			}
		})
	}
}

func TestZeroPolicyUsesTheDefaults(t *testing.T) {
	var p Policy
	if c := p.Ceiling(1); c != DefaultInitial {
		t.Fatalf("first ceiling %s, want %s", c, DefaultInitial)
	}
	if c := p.Ceiling(1 << 20); c != DefaultMax {
		t.Fatalf("last ceiling %s, want %s", c, DefaultMax)
	}
}

var refused = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}

func TestConnectionFailuresAreProbedAtLeastEverySecond(t *testing.T) {
	b := Backoff{Policy: Policy{Initial: 100 * time.Millisecond, Max: 10 * time.Minute}}
	answered := errors.New("503 service unavailable")
	for range 20 {
		b.Next(answered) // a long outage where the destination answered
	}
	for i := range 1000 { // then it went away entirely
		if d := b.Next(refused); d > DefaultProbe {
			t.Fatalf("connection failure %d: wait %s, want at most %s", i+1, d, DefaultProbe)
		}
	}
	if d := b.Next(answered); d < 5*time.Minute {
		t.Fatalf("an answered failure after the outage waits %s: its own backoff (at the cap) was lost", d)
	}
	b.Reset()
	if d := b.Next(answered); d > 100*time.Millisecond {
		t.Fatalf("after Reset the first wait is %s, want at most Initial", d)
	}
}

func TestAConnectionOutageDoesNotGrowTheAnsweredBackoff(t *testing.T) {
	b := Backoff{Policy: Policy{Initial: 100 * time.Millisecond, Max: 30 * time.Second}}
	for range 100 {
		b.Next(fmt.Errorf("write: %w", io.ErrUnexpectedEOF))
	}
	// The broker is back and answers "topic missing, will be created".
	if d := b.Next(errors.New("unknown topic or partition")); d > 100*time.Millisecond {
		t.Fatalf("first answered failure after a 100-attempt outage waits %s, want at most 100ms", d)
	}
	if b.Failures() != 101 {
		t.Fatalf("Failures() = %d, want 101", b.Failures())
	}
}

func TestIsConnectionError(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"a refused dial", fmt.Errorf("produce: %w", refused), true},
		{"a connection closed mid-request", fmt.Errorf("kafka.(*Client).Produce: %w", io.ErrUnexpectedEOF), true},
		{"an EOF", io.EOF, true},
		{"a reset", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{"an unresolvable host", &net.DNSError{Err: "no such host", Name: "nowhere.invalid", IsNotFound: true}, true},
		{"a dial timeout", &net.OpError{Op: "dial", Err: timeoutErr{}}, true},
		{"a client library's own word for a lost connection", fmt.Errorf("publish: %w: nats: outbound buffer limit exceeded", ErrNotConnected), true},
		{"a read timeout on an established connection", &net.OpError{Op: "read", Err: timeoutErr{}}, false},
		{"an answer of the destination", errors.New("not enough replicas"), false},
		{"nil", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsConnectionError(tc.err); got != tc.want {
				t.Fatalf("IsConnectionError(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
