package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultReadyCheckpointAge is how long a sink with events in flight may go
// without a checkpoint save before /readyz reports it.
const DefaultReadyCheckpointAge = 2 * time.Minute

// Handler serves:
//
//   - /metrics: everything g gathers, in the Prometheus exposition formats;
//   - /healthz: 200 "ok" while the process serves HTTP at all (liveness);
//   - /readyz: 200 "ready" when m.Ready(maxAge) holds, else 503 with one
//     line per sink that is not ready.
//
// maxAge <= 0 means DefaultReadyCheckpointAge.
func Handler(m *Metrics, g prometheus.Gatherer, maxAge time.Duration) http.Handler {
	if maxAge <= 0 {
		maxAge = DefaultReadyCheckpointAge
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		ok, reasons := m.Ready(maxAge)
		reading := m.Reading()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, strings.Join(append(reasons, reading...), "\n"))
			return
		}
		fmt.Fprintln(w, strings.Join(append([]string{"ready"}, reading...), "\n"))
	})
	return mux
}

// Server is a running HTTP listener. Close stops it and waits for it.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// Listen binds addr at once (so a bad or busy address is an error before
// anything else starts) and serves h on it in a goroutine owned by the
// returned Server.
func Listen(addr string, h http.Handler, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http.listen %q: %w", addr, err)
	}
	s := &Server{
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      60 * time.Second,
			IdleTimeout:       2 * time.Minute,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		ln:   ln,
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http listener stopped", slog.String("addr", ln.Addr().String()), slog.Any("err", err))
		}
	}()
	return s, nil
}

// Addr is the address the server listens on (the port chosen for ":0").
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops accepting, lets requests in progress finish until ctx ends,
// then closes what remains and waits for the serving goroutine.
func (s *Server) Close(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	<-s.done
	return err
}
