package metrics

import (
	"context"
	"errors"
	"fmt"
	"github.com/outbox-relay/outbox-relay/internal/defaults"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultReadyCheckpointAge is how long a sink (other than a webhook sink,
// whose endpoints' trouble is theirs) with events in flight may go without a
// checkpoint save before /readyz reports it.
const DefaultReadyCheckpointAge = 2 * time.Minute

// Handler serves:
//
//   - /metrics: everything g gathers, in the Prometheus exposition formats;
//   - /healthz: 200 "ok" while the process serves HTTP at all (liveness);
//   - /readyz: 200 "ready" when m.Ready(maxAge) holds, else 503 with one
//     line per thing of a sink that is not ready; then, either way, the
//     packages' notes (AddNotes: the webhook endpoints stopped for good)
//     and the server each sink reads;
//   - the pages the packages added with m.Handle (the gateway's /endpoints).
//
// maxAge <= 0 means DefaultReadyCheckpointAge.
func Handler(m *Metrics, g prometheus.Gatherer, maxAge time.Duration) http.Handler {
	defaults.Positive(&maxAge, DefaultReadyCheckpointAge)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	m.mu.Lock()
	for _, r := range m.routes {
		mux.Handle(r.pattern, r.h)
	}
	m.mu.Unlock()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		ok, reasons, notes := m.Ready(maxAge)
		lines := append(append(reasons, notes...), m.Reading()...)
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, strings.Join(lines, "\n"))
			return
		}
		fmt.Fprintln(w, strings.Join(append([]string{"ready"}, lines...), "\n"))
	})
	return mux
}

// WithPprof serves net/http/pprof's profiles under /debug/pprof/ beside h
// (on a mux of its own: nothing is registered on http.DefaultServeMux). A CPU
// profile or trace longer than the server's 60 s write timeout is cut off.
func WithPprof(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("/debug/pprof/", pprof.Index) // and every named profile: heap, goroutine, allocs, ...
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// Server is a running HTTP listener. Close stops it and waits for it.
type Server struct {
	srv  *http.Server
	done chan struct{}
	stop chan struct{} // ListenWhenFree: stop trying to bind
	once sync.Once
	mu   sync.Mutex
	ln   net.Listener // nil while ListenWhenFree waits for the address
}

// Listen binds addr at once (so a bad or busy address is an error before
// anything else starts) and serves h on it in a goroutine owned by the
// returned Server.
func Listen(addr string, h http.Handler, log *slog.Logger) (*Server, error) {
	defaults.Logger(&log)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http.listen %q: %w", addr, err)
	}
	s := newServer(h, log)
	s.ln = ln
	go func() {
		defer close(s.done)
		s.serve(ln, log)
	}()
	return s, nil
}

// ListenWhenFree is Listen for a relay that may be the hot standby of an
// active relay on the same host and address: when addr is in use it logs
// that once and keeps trying every interval, serving as soon as it binds,
// until Close. Any other error (a bad address) is returned at once.
func ListenWhenFree(addr string, h http.Handler, log *slog.Logger, every time.Duration) (*Server, error) {
	defaults.Logger(&log)
	s, err := Listen(addr, h, log)
	if err == nil || !errors.Is(err, syscall.EADDRINUSE) {
		return s, err
	}
	log.Warn("http.listen is in use (by the active relay on this host, if this one is its standby): /healthz, /readyz and /metrics are served once it is free; retrying", slog.String("addr", addr), slog.Duration("every", every))
	s = newServer(h, log)
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
			ln, err := net.Listen("tcp", addr)
			if errors.Is(err, syscall.EADDRINUSE) {
				continue
			}
			if err != nil {
				log.Error("http listener not started", slog.String("addr", addr), slog.Any("err", err))
				return
			}
			s.mu.Lock()
			s.ln = ln
			s.mu.Unlock()
			log.Info("http listening: /metrics, /healthz, /readyz", slog.String("addr", ln.Addr().String()))
			s.serve(ln, log)
			return
		}
	}()
	return s, nil
}

func newServer(h http.Handler, log *slog.Logger) *Server {
	return &Server{
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      60 * time.Second,
			IdleTimeout:       2 * time.Minute,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		done: make(chan struct{}),
		stop: make(chan struct{}),
	}
}

func (s *Server) serve(ln net.Listener, log *slog.Logger) {
	if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("http listener stopped", slog.String("addr", ln.Addr().String()), slog.Any("err", err))
	}
}

// Addr is the address the server listens on (the port chosen for ":0"); nil
// while ListenWhenFree still waits for its address.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Close stops accepting, lets requests in progress finish until ctx ends,
// then closes what remains and waits for the serving goroutine.
func (s *Server) Close(ctx context.Context) error {
	s.once.Do(func() { close(s.stop) })
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	<-s.done
	return err
}
