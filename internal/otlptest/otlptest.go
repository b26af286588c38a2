// Package otlptest is an OpenTelemetry trace receiver for tests: it serves
// OTLP over HTTP or gRPC on 127.0.0.1, decodes each export with the OTLP
// protobuf types, and keeps the spans. It stands in for a collector with an
// OTLP receiver. Its methods are safe for concurrent use.
package otlptest

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Receiver is an OTLP trace receiver on 127.0.0.1 (HTTP or gRPC) that
// decodes what it gets with the OTLP protobuf types.
type Receiver struct {
	coltrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
	posts int
}

func (rc *Receiver) add(req *coltrace.ExportTraceServiceRequest) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.posts++
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			rc.spans = append(rc.spans, ss.Spans...)
		}
	}
}

// Posts is how many export requests arrived.
func (rc *Receiver) Posts() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.posts
}

// Export implements the OTLP gRPC trace service.
func (rc *Receiver) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	rc.add(req)
	return &coltrace.ExportTraceServiceResponse{}, nil
}

func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	rc.add(&req)
	b, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(b)
}

// Spans returns every span received so far.
func (rc *Receiver) Spans() []*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]*tracepb.Span(nil), rc.spans...)
}

// StartHTTP serves rc over OTLP/HTTP on 127.0.0.1 and points the OTEL_* variables at it.
func (rc *Receiver) StartHTTP(t testing.TB) {
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
}

// StartGRPC serves rc over OTLP/gRPC and points the OTEL_* variables at it.
func (rc *Receiver) StartGRPC(t testing.TB) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(gs, rc)
	go gs.Serve(l)
	t.Cleanup(gs.Stop)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+l.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
}

// Attrs returns a span's attributes, the non-string ones as their protobuf text.
func Attrs(s *tracepb.Span) map[string]string {
	out := map[string]string{}
	for _, kv := range s.Attributes {
		if v := kv.Value.GetStringValue(); v != "" {
			out[kv.Key] = v
		} else {
			out[kv.Key] = kv.Value.String()
		}
	}
	return out
}
