package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/gateway"
)

// Sink is one webhook sink as the console shows it.
type Sink struct {
	Name string
	// Static are the names of its endpoints of the configuration.
	Static []string
	// Table writes its endpoints table; nil when it has none.
	Table gateway.TableAdmin
}

// Relay is what the console asks of the running relay.
type Relay interface {
	// Resend makes a replay job that sends the attempt's event again to
	// its endpoint (and only that event), and returns the job's id.
	// tenant is who asks ("": an operator): a tenant with
	// replay.max_jobs_per_tenant jobs pending or running gets a
	// *replay.QueueFullError.
	Resend(ctx context.Context, tenant string, a attempts.Record) (string, error)
	// Recover makes a replay job that sends the endpoint what it was sent
	// since a time, again, and returns the job's id; tenant as for Resend.
	Recover(ctx context.Context, tenant, sink, endpoint string, since time.Time) (string, error)
	// ReplayDeadLetters delivers the records' events again, each deleted
	// once acknowledged; it says how many were delivered, and why the
	// others were not.
	ReplayDeadLetters(ctx context.Context, recs []deadletter.Record) (int, error)
	// Enable clears the disabled mark of endpoint key's checkpoint (an
	// endpoint the relay disabled for failing too long); false when it had
	// none.
	Enable(ctx context.Context, key string) (bool, error)
}

// Options are what a Server is built with.
type Options struct {
	Config config.Console
	// Key signs tenant links and sessions (at least MinKeyBytes).
	Key   []byte
	Sinks []Sink
	// Stats returns the gateway's endpoint figures (gateway.Metrics.Stats).
	Stats func(sink string) map[string][]gateway.EndpointStats
	// Attempts is the attempts log; nil: not kept (its routes answer 503).
	Attempts attempts.Store
	// DeadLetters is the dead-letter store; nil: none.
	DeadLetters deadletter.Store
	Relay       Relay
	Logger      *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Server serves the console.
type Server struct {
	o      Options
	tokens tokens
	sign   signer
	sinks  map[string]Sink
	mux    *http.ServeMux
	audit  *slog.Logger

	mu       sync.Mutex
	limiters map[string]*rate.Limiter

	// patterns are the API routes registered (method and path).
	patterns []string
}

// CheckKey says what is wrong with the console's key, read from the
// environment variable env.
func CheckKey(key []byte, env string) error {
	if len(key) < MinKeyBytes {
		return fmt.Errorf("console: the key in $%s has %d bytes; set it to at least %d random bytes (head -c 32 /dev/urandom | base64): it signs tenant links and sign-in cookies",
			env, len(key), MinKeyBytes)
	}
	return nil
}

// New checks opts and returns a server.
func New(opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := CheckKey(opts.Key, opts.Config.LinkKeyEnv); err != nil {
		return nil, err
	}
	tk, err := newTokens(opts.Config.Tokens)
	if err != nil {
		return nil, err
	}
	s := &Server{o: opts, tokens: tk, sign: signer{key: opts.Key}, sinks: map[string]Sink{}, mux: http.NewServeMux(),
		audit: opts.Logger.With(slog.String("component", "console")), limiters: map[string]*rate.Limiter{}}
	for _, sk := range opts.Sinks {
		s.sinks[sk.Name] = sk
	}
	for _, rt := range apiRoutes {
		pattern := rt.method + " " + rt.path
		s.patterns = append(s.patterns, pattern)
		s.mux.Handle(pattern, s.api(rt))
	}
	s.mux.HandleFunc("GET /api/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openAPIJSON())
	})
	s.mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		notFound(w, "no such route: /api/openapi.json lists them")
	})
	s.pages()
	return s, nil
}

// Handler returns the console's handler, with its security headers.
func (s *Server) Handler() http.Handler {
	csp := "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors " + s.frameAncestors()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin") // not no-referrer: with it, a form post's Origin is "null"
		s.mux.ServeHTTP(w, r)
	})
}

func (s *Server) frameAncestors() string {
	if len(s.o.Config.FrameAncestors) == 0 {
		return "'none'"
	}
	return strings.Join(s.o.Config.FrameAncestors, " ")
}

// Run serves on ln until ctx ends, then shuts down (waiting up to 5 s for
// the requests in progress).
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(s.o.Logger.Handler(), slog.LevelWarn)}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("console: serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if e := <-done; !errors.Is(e, http.ErrServerClosed) {
		err = errors.Join(err, e)
	}
	return err
}

// maxLimiters bounds the rate limiters kept (one per token, link tenant
// and unauthenticated client address).
const maxLimiters = 10000

// limiter returns the rate limiter of a principal (or a client address).
func (s *Server) limiter(name string) *rate.Limiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.limiters[name]
	if l == nil {
		if len(s.limiters) >= maxLimiters {
			// Bounded memory: many client addresses (refused requests)
			// start every allowance afresh rather than grow the map.
			clear(s.limiters)
		}
		l = rate.NewLimiter(rate.Limit(s.o.Config.RateLimit), max(int(2*s.o.Config.RateLimit), 1))
		s.limiters[name] = l
	}
	return l
}

// allow takes one request from name's allowance, or answers 429.
func (s *Server) allow(w http.ResponseWriter, name string) bool {
	r := s.limiter(name).ReserveN(s.o.Now(), 1)
	if d := r.DelayFrom(s.o.Now()); d > 0 {
		r.CancelAt(s.o.Now())
		tooMany(w, d)
		return false
	}
	return true
}

// sessionCookieName is the browser session's cookie.
const sessionCookieName = "console_session"

// authenticate returns who makes r: a bearer token or link in the
// Authorization header, else a session cookie. ok false: nobody.
func (s *Server) authenticate(r *http.Request) (p principal, ok bool, why string) {
	if h := r.Header.Get("Authorization"); h != "" {
		cred, found := strings.CutPrefix(h, "Bearer ")
		if !found {
			return p, false, "the Authorization header must be \"Bearer TOKEN\""
		}
		cred = strings.TrimSpace(cred)
		if strings.HasPrefix(cred, linkPrefix) {
			p, err := s.sign.verifyLink(cred, s.o.Now())
			if err != nil {
				return p, false, err.Error()
			}
			return p, true, ""
		}
		if p, ok := s.tokens.find(cred); ok {
			return p, true, ""
		}
		return p, false, "the token is not one of console.tokens"
	}
	if c, err := r.Cookie(sessionCookieName); err == nil {
		if p, ok := s.sign.verifySession(c.Value, s.o.Now()); ok && s.current(p) {
			return p, true, ""
		}
		return p, false, "the session has expired: sign in again"
	}
	return p, false, "no credentials: send \"Authorization: Bearer TOKEN\" (outbox-relay console token makes one)"
}

// current reports whether a session's token is still configured (a token
// removed from the config ends its sessions).
func (s *Server) current(p principal) bool {
	if strings.HasPrefix(p.name, "link:") {
		return true
	}
	for _, t := range s.tokens.list {
		if t.Name == p.name && t.Tenant == p.tenant {
			return true
		}
	}
	return false
}

// clientAddr is the request's remote host, the rate limit's key before
// authentication.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// csrfOK reports whether a write of p carries its session's CSRF token
// (always true for a bearer header, which a browser never sends by
// itself).
func csrfOK(r *http.Request, p principal) bool {
	if p.csrf == "" {
		return true
	}
	got := r.Header.Get("X-CSRF-Token")
	if got == "" {
		got = r.PostFormValue("csrf")
	}
	return got != "" && subtleEq(got, p.csrf)
}

// writeAudit logs one write: who, what, which endpoint, the result.
func (s *Server) writeAudit(p principal, action, target string, err error) {
	result := "ok"
	if err != nil {
		result = err.Error()
	}
	s.audit.Info("console audit", slog.String("who", p.name), slog.String("tenant", p.tenant), slog.String("action", action),
		slog.String("target", target), slog.String("result", result))
}
