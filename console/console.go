package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/internal/defaults"
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
	// Stat returns the figures of one endpoint (gateway.Metrics.Endpoint):
	// what a page of endpoints and a single endpoint show, looked up
	// without copying the others'. nil: found in Stats.
	Stat func(sink, key string) (gateway.EndpointStats, bool)
	// Counts returns a sink's endpoints counted by state
	// (gateway.Metrics.Counts): what an operator's list of sinks shows,
	// without reading a row. nil: counted from the rows.
	Counts func(sink string) (gateway.EndpointCounts, bool)
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
	o       Options
	tokens  atomic.Pointer[tokens] // swapped whole by SetTokens
	sign    signer
	sinks   map[string]Sink
	mux     *http.ServeMux
	audit   *slog.Logger
	clients clients

	// principals are the buckets of tokens and link tenants; tried and
	// failed those of the clients that failed to authenticate, by
	// credential tried and in all (limits.go).
	principals, tried, failed *limiterTable

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
	defaults.Logger(&opts.Logger)
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
	s := &Server{o: opts, sign: signer{key: opts.Key}, sinks: map[string]Sink{}, mux: http.NewServeMux(),
		audit: opts.Logger.With(slog.String("component", "console")), clients: newClients(opts.Config.TrustedProxies),
		principals: newLimiterTable(opts.Config.RateLimit, maxLimiters), tried: newLimiterTable(opts.Config.RateLimit, maxLimiters),
		failed: newLimiterTable(failuresPerAddr*opts.Config.RateLimit, maxLimiters)}
	s.tokens.Store(tk)
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

// allow takes one request from the allowance of principal name, or
// answers 429.
func (s *Server) allow(w http.ResponseWriter, name string) bool {
	now := s.o.Now()
	if d := take(now, s.principals.get(name, now)); d > 0 {
		tooMany(w, d)
		return false
	}
	return true
}

// allowFailure takes one failed request of r's client, trying credential
// tried (a kind of credential and whom it claims to be: "link:<tenant>"),
// from that client's allowance for tried and from its allowance for all
// its failures (failuresPerAddr times as large), or answers 429. It is
// charged only once the credential was checked and found wrong: a flood of
// wrong ones from an address (a proxy many share) never stops a right one.
func (s *Server) allowFailure(w http.ResponseWriter, r *http.Request, tried string) bool {
	now := s.o.Now()
	addr := s.clients.key(r)
	if d := take(now, s.tried.get(addr+" "+tried, now), s.failed.get(addr, now)); d > 0 {
		tooMany(w, d)
		return false
	}
	return true
}

// sessionCookieName is the browser session's cookie.
const sessionCookieName = "console_session"

// authenticate returns who makes r: a bearer token or link in the
// Authorization header, else a session cookie. ok false: nobody, and
// tried names the credential tried for the limits of failed requests
// (allowFailure): its kind, and the tenant or token name it claims.
func (s *Server) authenticate(r *http.Request) (p principal, ok bool, why, tried string) {
	if h := r.Header.Get("Authorization"); h != "" {
		cred, found := strings.CutPrefix(h, "Bearer ")
		if !found {
			return p, false, "the Authorization header must be \"Bearer TOKEN\"", "header"
		}
		cred = strings.TrimSpace(cred)
		if strings.HasPrefix(cred, linkPrefix) {
			p, err := s.sign.verifyLink(cred, s.o.Now())
			if err != nil {
				return p, false, err.Error(), "link:" + claimedTenant(cred)
			}
			return p, true, "", ""
		}
		if p, ok := s.tokens.Load().find(cred); ok {
			return p, true, "", ""
		}
		return p, false, "the token is not one of console.tokens", "token"
	}
	if c, err := r.Cookie(sessionCookieName); err == nil {
		if p, ok := s.session(c.Value); ok {
			return p, true, "", ""
		}
		return p, false, "the session has expired or its token was changed: sign in again", "session:" + claimedName(c.Value)
	}
	return p, false, "no credentials: send \"Authorization: Bearer TOKEN\" (outbox-relay console token makes one)", "none"
}

// session returns the principal of a session cookie's value whose token
// is still configured with the hash it was signed in with.
func (s *Server) session(v string) (principal, bool) {
	p, ok := s.sign.verifySession(v, s.o.Now())
	return p, ok && s.tokens.Load().current(p)
}

// SetTokens makes list the console's tokens (console.tokens), checked as
// New checks them; an error leaves the tokens as they were. A token
// removed or given another hash ends its sessions, and its bearer token
// is refused from the next request on. It returns the names of the
// tokens added, removed, and changed (another hash or tenant).
func (s *Server) SetTokens(list []config.ConsoleToken) (added, removed, changed []string, err error) {
	tk, err := newTokens(list)
	if err != nil {
		return nil, nil, nil, err
	}
	old := s.tokens.Swap(tk)
	was := map[string]config.ConsoleToken{}
	for _, t := range old.list {
		was[t.Name] = t
	}
	for _, t := range list {
		o, ok := was[t.Name]
		switch {
		case !ok:
			added = append(added, t.Name)
		case o.Hash != t.Hash || o.Tenant != t.Tenant:
			changed = append(changed, t.Name)
		}
		delete(was, t.Name)
	}
	for n := range was {
		removed = append(removed, n)
	}
	slices.Sort(removed)
	return added, removed, changed, nil
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
	Audit(s.audit, p.name, p.tenant, action, target, err)
}
