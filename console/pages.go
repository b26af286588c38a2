package console

import (
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/internal/paging"
	"github.com/outbox-relay/outbox-relay/internal/redact"
)

//go:embed web/templates/*.html web/static/*
var webFS embed.FS

var pageFuncs = template.FuncMap{
	"ts": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000Z") },
	"dur": func(d time.Duration) string {
		return d.Round(100 * time.Microsecond).String()
	},
	"lag": func(s float64) string {
		if s == 0 {
			return "-"
		}
		return (time.Duration(s * float64(time.Second))).Round(time.Millisecond).String()
	},
	"redact": redact.URL,
}

// templates are the pages, each with the layout.
var templates = func() map[string]*template.Template {
	out := map[string]*template.Template{}
	for _, page := range []string{"login", "overview", "endpoint"} {
		out[page] = template.Must(template.New(page).Funcs(pageFuncs).ParseFS(webFS, "web/templates/layout.html", "web/templates/"+page+".html"))
	}
	return out
}()

// pageData is what every page shows.
type pageData struct {
	Title string
	// Base prefixes the page's links: "" when signed in, "/t/LINK" in a
	// tenant link's view.
	Base        string
	Who, Tenant string
	// CSRF is the session's token (signed-in pages only).
	CSRF  string
	Error string

	Sinks      []SinkSummary
	Endpoints  []Endpoint
	Failed     []attempts.Record
	NoAttempts bool

	Endpoint Endpoint
	Attempts []attempts.Record
	Newest   int64

	// Paged is set on a page after the first; Next is the query of the
	// next page of its list ("": the list ends here).
	Paged bool
	Next  string
}

// pages registers the page routes.
func (s *Server) pages() {
	static, _ := fs.Sub(webFS, "web/static")
	files := http.FileServerFS(static)
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})))
	s.mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/static/icon.svg", http.StatusMovedPermanently)
	})
	s.mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		s.render(w, http.StatusOK, "login", pageData{Title: "Sign in"})
	})
	s.mux.HandleFunc("POST /login", s.login)
	s.mux.HandleFunc("POST /logout", s.logout)
	s.mux.Handle("GET /{$}", s.page(s.overview))
	s.mux.Handle("GET /endpoints/{sink}/{endpoint}", s.page(s.endpointPage))
	s.mux.Handle("GET /t/{link}/{$}", s.page(s.overview))
	s.mux.Handle("GET /t/{link}/endpoints/{sink}/{endpoint}", s.page(s.endpointPage))
}

func (s *Server) render(w http.ResponseWriter, status int, page string, d pageData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if err := templates[page].ExecuteTemplate(w, page+".html", d); err != nil {
		s.o.Logger.Warn("console: render a page", "page", page, "err", err)
	}
}

// page authenticates a page: a tenant link in its path, else the session
// cookie (else to the sign-in form).
func (s *Server) page(h func(w http.ResponseWriter, r *http.Request, p principal, d pageData)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var (
			p principal
			d pageData
		)
		if link := r.PathValue("link"); link != "" {
			var err error
			if p, err = s.sign.verifyLink(link, s.o.Now()); err != nil {
				if !s.allowFailure(w, r, "link:"+claimedTenant(link)) {
					return
				}
				s.render(w, http.StatusUnauthorized, "login", pageData{Title: "Link expired", Error: err.Error()})
				return
			}
			d.Base = "/t/" + url.PathEscape(link)
		} else {
			c, err := r.Cookie(sessionCookieName)
			var ok bool
			if err == nil {
				p, ok = s.session(c.Value)
			}
			if !ok {
				http.Redirect(w, r, "/login", http.StatusSeeOther)
				return
			}
			d.CSRF = p.csrf
		}
		if !s.allow(w, p.name) {
			return
		}
		d.Who, d.Tenant = p.name, p.tenant
		h(w, r, p, d)
	})
}

func (s *Server) pageError(w http.ResponseWriter, d pageData, status int, err error) {
	d.Title, d.Error = http.StatusText(status), err.Error()
	if status >= 500 {
		s.o.Logger.Error("console: a page failed", slog.Any("err", err))
		d.Error = "The page failed on the relay's side; its log says why."
	}
	s.render(w, status, "login", d)
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request, p principal, d pageData) {
	var err error
	d.Title = "Overview"
	if d.Sinks, err = s.sinkSummaries(r.Context(), p); err != nil {
		s.pageError(w, d, http.StatusInternalServerError, err)
		return
	}
	var after endpointKey
	if it := r.URL.Query().Get("iterator"); it != "" {
		if after, err = endpointCursor(it); err != nil {
			s.pageError(w, d, http.StatusBadRequest, err)
			return
		}
		d.Paged = true
	}
	next, more := endpointKey{}, false
	if d.Endpoints, next, more, err = s.endpointsPage(r.Context(), p, endpointFilter{}, after, DefaultPageLimit); err != nil {
		s.pageError(w, d, http.StatusInternalServerError, err)
		return
	}
	if more {
		d.Next = "?" + url.Values{"iterator": {next.cursor()}}.Encode()
	}
	if s.o.Attempts == nil {
		d.NoAttempts = true
	} else if d.Failed, err = s.o.Attempts.Search(r.Context(), attempts.Query{Tenant: p.tenant, Failed: true, Limit: 20}); err != nil {
		s.pageError(w, d, http.StatusInternalServerError, err)
		return
	}
	s.render(w, http.StatusOK, "overview", d)
}

func (s *Server) endpointPage(w http.ResponseWriter, r *http.Request, p principal, d pageData) {
	e, err := s.endpoint(r.Context(), p, r.PathValue("sink"), r.PathValue("endpoint"))
	if errors.Is(err, errNoEndpoint) {
		s.pageError(w, d, http.StatusNotFound, fmt.Errorf("no endpoint %s/%s", r.PathValue("sink"), r.PathValue("endpoint")))
		return
	}
	if err != nil {
		s.pageError(w, d, http.StatusInternalServerError, err)
		return
	}
	d.Title, d.Endpoint = e.Sink+"/"+e.Name, e
	if s.o.Attempts == nil {
		d.NoAttempts = true
	} else {
		q := attempts.Query{Sink: e.Sink, Endpoint: e.ID, Tenant: p.tenant, Limit: DefaultPageLimit + 1}
		if it := r.URL.Query().Get("iterator"); it != "" {
			c, err := paging.DecodeCursor(cursorAttempts, it, 1)
			if err == nil {
				q.Before, err = strconv.ParseInt(c[0], 10, 64)
			}
			if err != nil || q.Before < 1 {
				s.pageError(w, d, http.StatusBadRequest, paging.BadCursor(it))
				return
			}
			d.Paged = true
		}
		d.Attempts, err = s.o.Attempts.Search(r.Context(), q)
		if err != nil {
			s.pageError(w, d, http.StatusInternalServerError, err)
			return
		}
		if len(d.Attempts) > DefaultPageLimit {
			d.Attempts = d.Attempts[:DefaultPageLimit]
			d.Next = "?" + url.Values{"iterator": {paging.EncodeCursor(cursorAttempts, strconv.FormatInt(d.Attempts[DefaultPageLimit-1].ID, 10))}}.Encode()
		}
		if len(d.Attempts) > 0 && !d.Paged {
			d.Newest = d.Attempts[0].ID
		}
	}
	s.render(w, http.StatusOK, "endpoint", d)
}

// sameOrigin reports whether a form post comes from the console's own
// page (its Origin header, when the browser sends one, is this host).
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

// login signs in with a token. The token is checked before any allowance
// is taken: a wrong one is charged to its client's allowance of failures
// (allowFailure), a right one to its own, so that a flood of wrong tokens
// from one address (a proxy many share) never stops a right one. What
// stops guessing is the token's 256 random bits, not the limit.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		forbidden(w, "sign in from the console's own page")
		return
	}
	p, ok := s.tokens.Load().find(strings.TrimSpace(r.PostFormValue("token")))
	if !ok {
		if s.allowFailure(w, r, "token") {
			s.render(w, http.StatusUnauthorized, "login", pageData{Title: "Sign in", Error: "That token is not one of console.tokens."})
		}
		return
	}
	if !s.allow(w, p.name) {
		return
	}
	v, _ := s.sign.sessionCookie(p, s.o.Now(), s.o.Config.Session)
	http.SetCookie(w, &http.Cookie{Name: sessionCookieName, Value: v, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: s.clients.secure(r), MaxAge: int(s.o.Config.Session.Seconds())})
	s.writeAudit(p, "sign in", "", nil)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	c, err := r.Cookie(sessionCookieName)
	if err == nil {
		if p, ok := s.sign.verifySession(c.Value, s.o.Now()); ok && sameOrigin(r) && csrfOK(r, p) {
			s.writeAudit(p, "sign out", "", nil)
		} else {
			forbidden(w, "sign out from the console's own page")
			return
		}
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookieName, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: s.clients.secure(r), MaxAge: -1})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
