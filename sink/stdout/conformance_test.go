package stdout_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/outbox-relay/outbox-relay/sink/sinktest"
	"github.com/outbox-relay/outbox-relay/sink/stdout"
)

// pipe is what the sink writes to: it keeps every byte, and fails writes
// while broken (a closed pipe, a full disk), possibly part way.
type pipe struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	broken bool
	budget int // bytes accepted before breaking; <0 unlimited
}

func (p *pipe) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.broken {
		return 0, errors.New("write |1: broken pipe")
	}
	if p.budget >= 0 && len(b) > p.budget {
		n := p.budget
		p.buf.Write(b[:n])
		p.broken, p.budget = true, -1
		return n, errors.New("write |1: broken pipe")
	}
	if p.budget >= 0 {
		p.budget -= len(b)
	}
	return p.buf.Write(b)
}

func (p *pipe) Break()         { p.mu.Lock(); p.broken = true; p.mu.Unlock() }
func (p *pipe) BreakMidWrite() { p.mu.Lock(); p.budget = 8 << 10; p.mu.Unlock() }
func (p *pipe) Heal()          { p.mu.Lock(); p.broken, p.budget = false, -1; p.mu.Unlock() }

// read decodes every whole JSON line; a line torn by a failed write is not
// an event (the events on it are written again).
func (p *pipe) read(t *testing.T, _ int) []sinktest.Received {
	p.mu.Lock()
	data := append([]byte(nil), p.buf.Bytes()...)
	p.mu.Unlock()
	var out []sinktest.Received
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l stdout.Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Logf("torn line skipped: %.60q", sc.Bytes())
			continue
		}
		r := sinktest.Received{ID: l.ID, Type: l.Type, AggregateType: l.AggregateType, AggregateID: l.AggregateID,
			Table: l.Table, GTID: l.GTID, BinlogFile: l.BinlogFile, BinlogPos: l.BinlogPos, Headers: l.Headers, Payload: l.Payload}
		if l.PayloadEncoding == "base64" {
			var s string
			if err := json.Unmarshal(l.Payload, &s); err != nil {
				t.Fatal(err)
			}
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				t.Fatal(err)
			}
			r.Payload = b
		}
		out = append(out, r)
	}
	return out
}

func TestConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{
		Carries: sinktest.Carries{Type: true, Aggregate: true, Headers: true, Source: true},
		New: func(t *testing.T) *sinktest.Target {
			p := &pipe{budget: -1}
			return &sinktest.Target{Sink: stdout.New(stdout.Config{}, p), Read: p.read, Fault: p}
		},
	})
}
