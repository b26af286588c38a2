package otlptest

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// CollectorEnv names the OpenTelemetry Collector binary (built from the
// collector's modules with the OTLP receiver and the file exporter: .ci/run
// builds it) that StartCollector runs.
const CollectorEnv = "OUTBOX_RELAY_OTELCOL"

// Collector is a real OpenTelemetry Collector on 127.0.0.1: its OTLP/HTTP
// receiver writes every span to a file (the file exporter).
type Collector struct {
	// Endpoint is the receiver's URL, for OTEL_EXPORTER_OTLP_ENDPOINT.
	Endpoint string
	cmd      *exec.Cmd
	file     string
	done     chan error
	log      bytes.Buffer
}

// StartCollector runs the collector named by $OUTBOX_RELAY_OTELCOL and
// waits until it listens. Without it the test is skipped, or fails under
// CI=true.
func StartCollector(t *testing.T) *Collector {
	t.Helper()
	bin := os.Getenv(CollectorEnv)
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("$%s is not set: .ci/run builds the collector and sets it", CollectorEnv)
		}
		t.Skipf("$%s is not set (see .ci/run): no OpenTelemetry Collector to test against", CollectorEnv)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	c := &Collector{Endpoint: "http://" + addr, file: filepath.Join(dir, "spans.json"), done: make(chan error, 1)}
	cfg := fmt.Sprintf(`
receivers:
  otlp:
    protocols:
      http: {endpoint: "%s"}
exporters:
  file: {path: "%s"}
service:
  telemetry:
    metrics: {level: none}
  pipelines:
    traces: {receivers: [otlp], exporters: [file]}
`, addr, c.file)
	cfgPath := filepath.Join(dir, "otelcol.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c.cmd = exec.Command(bin, "--config", "file:"+cfgPath)
	c.cmd.Stdout, c.cmd.Stderr = &c.log, &c.log // read only after Wait
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start the collector %s: %v", bin, err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() { c.stop() })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if conn, err := net.Dial("tcp", addr); err == nil {
			conn.Close()
			return c
		}
		select {
		case err := <-c.done:
			t.Fatalf("the collector exited before it listened: %v\n%s", err, c.log.Bytes())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector does not listen on %s after 30s", addr)
		}
	}
}

func (c *Collector) stop() {
	if c.cmd.ProcessState != nil {
		return
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
	}
	c.cmd.ProcessState = &os.ProcessState{}
}

// Spans stops the collector (which flushes its file) and returns every
// span the file exporter wrote, decoded from OTLP JSON (hex ids, string,
// int and bool attributes).
func (c *Collector) Spans(t *testing.T) []*tracepb.Span {
	t.Helper()
	c.stop()
	f, err := os.Open(c.file)
	if err != nil {
		t.Fatalf("the collector wrote no file: %v", err)
	}
	defer f.Close()
	type value struct {
		StringValue *string `json:"stringValue"`
		IntValue    *string `json:"intValue"`
		BoolValue   *bool   `json:"boolValue"`
	}
	var out []*tracepb.Span
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var doc struct {
			ResourceSpans []struct {
				ScopeSpans []struct {
					Spans []struct {
						TraceID      string `json:"traceId"`
						SpanID       string `json:"spanId"`
						ParentSpanID string `json:"parentSpanId"`
						Name         string `json:"name"`
						Attributes   []struct {
							Key   string `json:"key"`
							Value value  `json:"value"`
						} `json:"attributes"`
					} `json:"spans"`
				} `json:"scopeSpans"`
			} `json:"resourceSpans"`
		}
		if err := json.Unmarshal(sc.Bytes(), &doc); err != nil {
			t.Fatalf("the collector's file holds a line that is not OTLP JSON: %v", err)
		}
		for _, rs := range doc.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					ps := &tracepb.Span{Name: s.Name}
					ps.TraceId, _ = hex.DecodeString(s.TraceID)
					ps.SpanId, _ = hex.DecodeString(s.SpanID)
					ps.ParentSpanId, _ = hex.DecodeString(s.ParentSpanID)
					for _, a := range s.Attributes {
						v := &commonpb.AnyValue{}
						switch {
						case a.Value.StringValue != nil:
							v.Value = &commonpb.AnyValue_StringValue{StringValue: *a.Value.StringValue}
						case a.Value.IntValue != nil:
							var n int64
							fmt.Sscan(*a.Value.IntValue, &n)
							v.Value = &commonpb.AnyValue_IntValue{IntValue: n}
						case a.Value.BoolValue != nil:
							v.Value = &commonpb.AnyValue_BoolValue{BoolValue: *a.Value.BoolValue}
						}
						ps.Attributes = append(ps.Attributes, &commonpb.KeyValue{Key: a.Key, Value: v})
					}
					out = append(out, ps)
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
