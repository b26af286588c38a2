package faultproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/faultproxy"
)

// echoServer answers each line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, msg string, limit time.Duration) error {
	t.Helper()
	c.SetDeadline(time.Now().Add(limit))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != msg+"\n" {
		t.Fatalf("echo %q, want %q", line, msg)
	}
	return nil
}

func dial(t *testing.T, p *faultproxy.Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestEachFaultDoesWhatItSays(t *testing.T) {
	p := faultproxy.Start(t, echoServer(t))

	t.Run("a clean link forwards both ways", func(t *testing.T) {
		if err := roundTrip(t, dial(t, p), "hello", time.Second); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a silent cut gives no EOF and no answer: only a timeout notices", func(t *testing.T) {
		c := dial(t, p)
		if err := roundTrip(t, c, "before", time.Second); err != nil {
			t.Fatal(err)
		}
		p.CutSilently()
		err := roundTrip(t, c, "during", 300*time.Millisecond)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read on a silently cut link = %v, want a timeout", err)
		}
		if err := roundTrip(t, dial(t, p), "new during", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a new connection during the cut = %v, want a timeout", err)
		}
		p.Restore()
		if err := roundTrip(t, dial(t, p), "after", time.Second); err != nil {
			t.Fatalf("a new connection after Restore: %v", err)
		}
		if _, _, dropped := p.Stats(); dropped == 0 {
			t.Fatal("no bytes counted as dropped")
		}
	})
	t.Run("a hard cut closes open connections", func(t *testing.T) {
		c := dial(t, p)
		if err := roundTrip(t, c, "before", time.Second); err != nil {
			t.Fatal(err)
		}
		p.CutHard()
		if err := roundTrip(t, c, "during", time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read after a hard cut = %v, want EOF or reset", err)
		}
		p.Restore()
		if err := roundTrip(t, dial(t, p), "after", time.Second); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a cut after n bytes lets exactly n through upstream, then closes", func(t *testing.T) {
		defer p.Restore() // the next subtests need a link, whatever this one found
		c := dial(t, p)
		if err := roundTrip(t, c, "before", time.Second); err != nil {
			t.Fatal(err)
		}
		_, before, _ := p.Stats()
		p.CutHardAfter(10)
		c.SetDeadline(time.Now().Add(2 * time.Second))
		c.Write([]byte("0123456789abcdefghij\n"))
		echoed, err := io.ReadAll(c)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the link was not closed after the budget: read %q", echoed)
		}
		if string(echoed) != "0123456789"[:len(echoed)] {
			t.Fatalf("echoed %q after a 10-byte budget, want a prefix of 0123456789", echoed)
		}
		if _, after, _ := p.Stats(); after-before > 10+int64(len(echoed)) {
			t.Fatalf("%d bytes forwarded after the cut was set, want at most 10 upstream and the %d echoed", after-before, len(echoed))
		}
		if err := roundTrip(t, dial(t, p), "during", time.Second); err == nil {
			t.Fatal("a new connection after the cut was answered")
		}
		p.Restore()
		if err := roundTrip(t, dial(t, p), "after", time.Second); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("latency delays each round trip", func(t *testing.T) {
		p.SetLatency(100 * time.Millisecond)
		defer p.SetLatency(0)
		c := dial(t, p)
		start := time.Now()
		if err := roundTrip(t, c, "slow", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 200*time.Millisecond {
			t.Fatalf("round trip took %v, want at least 200ms (100ms each way)", d)
		}
	})
	t.Run("a bandwidth limit slows a large transfer", func(t *testing.T) {
		p.SetBandwidth(faultproxy.Downstream, 200<<10)
		defer p.SetBandwidth(faultproxy.Downstream, 0)
		c := dial(t, p)
		msg := make([]byte, 100<<10)
		for i := range msg {
			msg[i] = 'x'
		}
		start := time.Now()
		if err := roundTrip(t, c, string(msg), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 300*time.Millisecond {
			t.Fatalf("100 KiB at 200 KiB/s took %v, want about 0.5s", d)
		}
	})
}
