package stdout

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

func TestWriteOneJSONLinePerEvent(t *testing.T) {
	var buf bytes.Buffer
	s := New(Config{}, &buf)
	evs := []*event.Event{
		{ID: "1", AggregateID: "a", Type: "t", Payload: []byte(`{"x": [1, 2.50]}`), Headers: []event.Header{{Key: "tenant", Value: "acme"}},
			Table: "db.outbox", CommitTime: time.Unix(10, 0).UTC(), Source: event.Source{GTID: "0-1-9", File: "binlog.000001", Pos: 42}},
		{ID: "2", AggregateID: "a", Payload: []byte{0xff, 0x00}},
		{ID: "3", AggregateID: "b"},
		{ID: "4", AggregateID: "b", Payload: []byte("null")},
	}
	if err := s.Write(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("got %d lines, want 4:\n%s", len(lines), buf.String())
	}
	var l Line
	if err := json.Unmarshal([]byte(lines[0]), &l); err != nil {
		t.Fatal(err)
	}
	if string(l.Payload) != `{"x":[1,2.50]}` || l.Headers["tenant"] != "acme" || l.GTID != "0-1-9" || l.BinlogPos != 42 {
		t.Fatalf("line 0 = %+v (payload %s)", l, l.Payload)
	}
	json.Unmarshal([]byte(lines[1]), &l)
	if l.PayloadEncoding != "base64" || string(l.Payload) != `"/wA="` {
		t.Fatalf("a payload that is not JSON must be base64: %s", lines[1])
	}
	l = Line{}
	json.Unmarshal([]byte(lines[2]), &l)
	if string(l.Payload) != "null" || l.PayloadEncoding != "sql_null" {
		t.Fatalf("a SQL NULL payload must be null with payload_encoding sql_null: %s", lines[2])
	}
	l = Line{}
	json.Unmarshal([]byte(lines[3]), &l)
	if string(l.Payload) != "null" || l.PayloadEncoding != "" {
		t.Fatalf("a JSON null payload must be null with no payload_encoding: %s", lines[3])
	}
}

// The line is built by hand (one pass over the payload); it must be byte for
// byte what encoding/json writes for ToLine.
func TestLinesAreWhatEncodingJSONWrites(t *testing.T) {
	strs := []string{"", "plain", `q"uote`, `back\slash`, "ctl\x00\x01\x1f\b\f\n\r\t", "<html>&amp;", "utf8 é ✓ 😀",
		"bad \xff\xfe utf8", "sep \u2028 \u2029", "\x7f del"}
	payloads := [][]byte{nil, []byte(`{"a": 1, "b": [1, 2.50, "x y"]}`), []byte(" \n{\"k\":\"<&>\"}\t"), []byte(`"str"`), []byte("null"),
		[]byte("12"), []byte("{bad json"), {0xff, 0x00, 0x10}, []byte(""), []byte(`{"a":"\u2028"}`)}
	var evs []*event.Event
	for i, p := range payloads {
		for j, str := range strs {
			e := &event.Event{ID: str, AggregateID: strs[(j+1)%len(strs)], Payload: p, Table: "db.outbox",
				CommitTime: time.Unix(int64(1700000000+i), int64(j*1000)).UTC()}
			if j%2 == 0 {
				e.Type, e.AggregateType = strs[(j+2)%len(strs)], str
				e.Source = event.Source{GTID: "0-1-" + str, File: "binlog.000001", Pos: uint32(i * j)}
				e.Headers = []event.Header{{Key: "z" + str, Value: str}, {Key: "a", Value: "1"}, {Key: "a", Value: "2"}}
			}
			evs = append(evs, e)
		}
	}
	var got bytes.Buffer
	if err := New(Config{}, &got).Write(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	enc.SetEscapeHTML(false)
	for _, e := range evs {
		if err := enc.Encode(ToLine(e)); err != nil {
			t.Fatal(err)
		}
	}
	gl, wl := strings.Split(got.String(), "\n"), strings.Split(want.String(), "\n")
	if len(gl) != len(wl) {
		t.Fatalf("%d lines, want %d", len(gl), len(wl))
	}
	for i := range gl {
		if gl[i] != wl[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i, gl[i], wl[i])
		}
	}
}

func BenchmarkWrite(b *testing.B) {
	evs := make([]*event.Event, 500)
	for i := range evs {
		evs[i] = &event.Event{ID: fmt.Sprintf("p1-%d", i), AggregateType: "order", AggregateID: fmt.Sprintf("agg-%d", i%100), Type: "created",
			Payload: []byte(fmt.Sprintf(`{"id": "p1-%d", "amount": %d, "note": "a typical small event payload"}`, i, i)),
			Table:   "db.outbox", CommitTime: time.Unix(1700000000, 0).UTC(), Source: event.Source{GTID: "0-1-12345", File: "binlog.000001", Pos: 123456}}
	}
	s := New(Config{}, io.Discard)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Write(context.Background(), evs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
}

// Two sinks of one process writing to one stdout — the live sink and a
// replay's — write through one buffer: however their batches of many
// buffers' worth meet in the pipe, every line is one whole event, and none
// is lost. (Each with its own buffer, a batch was flushed in 64 KiB pieces
// cut mid-line, with the other's lines between them.)
func TestSinksSharingAStdoutNeverTearALine(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const sinks, batches, perBatch = 2, 8, 1800 // about 450 KB a batch, as a replay's
	pad := strings.Repeat("x", 200)
	seen := make(map[string]bool)
	var bad []string
	read := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l Line
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				if len(bad) < 3 {
					bad = append(bad, fmt.Sprintf("%.120s", sc.Text()))
				}
				continue
			}
			seen[l.ID] = true
		}
		read <- sc.Err()
	}()
	var wg sync.WaitGroup
	errs := make(chan error, sinks)
	for n := range sinks {
		s := New(Config{}, w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.Close(context.Background())
			for b := range batches {
				evs := make([]*event.Event, perBatch)
				for i := range evs {
					evs[i] = &event.Event{ID: fmt.Sprintf("s%d-b%d-%d", n, b, i), AggregateID: "a", Table: "db.outbox",
						Payload: []byte(`{"pad":"` + pad + `"}`)}
				}
				if err := s.Write(context.Background(), evs); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	w.Close()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("torn lines, such as:\n%s", strings.Join(bad, "\n"))
	}
	if want := sinks * batches * perBatch; len(seen) != want {
		t.Errorf("%d events read whole, want %d", len(seen), want)
	}
}
