package console

// This file owns the keys the API's lists (endpoints, attempts, dead
// letters) are paged by; package paging has the limit, the opaque cursor
// (iterator in a request, next in its answer, as Svix does), and the
// keyset walk that fills a page.

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/internal/paging"
)

// The size of a page: DefaultPageLimit without a limit, at most
// MaxPageLimit (package paging's).
const (
	DefaultPageLimit = paging.DefaultLimit
	MaxPageLimit     = paging.MaxLimit
)

// The letters of the console's lists' cursors (paging.EncodeCursor).
const (
	cursorEndpoints   = 'e'
	cursorAttempts    = 'a'
	cursorDeadLetters = 'd'
)

// endpointKey is an endpoint's place in the list of endpoints: its sink
// (by name), then the configuration's endpoints (phase 0, by name), then
// the table's rows (phase 1, by id in the table's collation: the
// database compares them). The zero key is before the first.
type endpointKey struct {
	sink  string
	phase int
	id    string
}

func (k endpointKey) cursor() string {
	return paging.EncodeCursor(cursorEndpoints, k.sink, strconv.Itoa(k.phase), k.id)
}

func endpointCursor(it string) (endpointKey, error) {
	f, err := paging.DecodeCursor(cursorEndpoints, it, 3)
	if err != nil {
		return endpointKey{}, err
	}
	if f[0] == "" || f[1] != "0" && f[1] != "1" || f[2] == "" {
		return endpointKey{}, paging.BadCursor(it)
	}
	return endpointKey{sink: f[0], phase: int(f[1][0] - '0'), id: f[2]}, nil
}

// endpointStates are the states a list of endpoints selects by: the
// gateway's, invalid, unknown (no figures yet), and running (attached,
// waiting or catching_up).
var endpointStates = []string{"running", "attached", "waiting", "catching_up", "disabled", "off", "invalid", "stopped", "unknown"}

// endpointFilter selects the endpoints of a list.
type endpointFilter struct {
	sink   string
	tenant string // the rows of this tenant only (a tenant's list: always its own)
	state  string
}

func (f endpointFilter) keeps(e Endpoint) bool {
	switch f.state {
	case "":
		return true
	case "running":
		return e.State == "attached" || e.State == "waiting" || e.State == "catching_up"
	}
	return e.State == f.state
}

// endpointsPage returns a page of the endpoints p may see that f selects,
// after the key after: each sink's table is read by its primary key from
// there (TableAdmin.Page), a tenant's by its tenant too, and each
// endpoint's figures are looked up alone (Options.Stat), so a page costs
// the same whatever the number of endpoints.
func (s *Server) endpointsPage(ctx context.Context, p principal, f endpointFilter, after endpointKey, limit int) ([]Endpoint, endpointKey, bool, error) {
	if !p.operator() {
		f.tenant = p.tenant
	}
	names := make([]string, 0, len(s.sinks))
	for n := range s.sinks {
		if f.sink == "" || n == f.sink {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	stat := s.stat()
	read := func(after endpointKey, n int) ([]Endpoint, error) {
		var out []Endpoint
		for _, name := range names {
			if name < after.sink {
				continue
			}
			same := name == after.sink
			sk := s.sinks[name]
			if p.operator() && f.tenant == "" && (!same || after.phase == 0) { // the configuration's endpoints have no tenant
				static := slices.Sorted(slices.Values(sk.Static))
				for _, id := range static {
					if same && id <= after.id {
						continue
					}
					out = append(out, Endpoint{Sink: name, Name: id, Key: name + "/" + id, Static: true, TableRow: gateway.TableRow{ID: id, Enabled: true}})
					if len(out) == n {
						return out, nil
					}
				}
			}
			if sk.Table == nil {
				continue
			}
			from := ""
			if same && after.phase == 1 {
				from = after.id
			}
			rows, err := sk.Table.Page(ctx, from, f.tenant, n-len(out))
			if err != nil {
				return nil, err
			}
			for _, row := range rows {
				out = append(out, Endpoint{Sink: name, Name: displayName(p, row.ID), Key: name + "/" + row.ID, TableRow: row})
			}
			if len(out) == n {
				return out, nil
			}
		}
		return out, nil
	}
	key := func(e Endpoint) endpointKey {
		if e.Static {
			return endpointKey{e.Sink, 0, e.ID}
		}
		return endpointKey{e.Sink, 1, e.ID}
	}
	keep := func(e Endpoint) bool {
		if !e.Static && (slices.Contains(s.sinks[e.Sink].Static, e.ID) || // refused by the relay; the static one is listed
			!p.operator() && e.Tenant != p.tenant) {
			return false
		}
		if f.state == "" {
			return true
		}
		return f.keeps(withStat(e, stat))
	}
	page, next, more, err := paging.Fill(limit, after, read, key, keep)
	for i := range page {
		page[i] = withStat(page[i], stat)
	}
	return page, next, more, err
}

// listQuery reads what every list takes: limit, and tenant (an
// operator's filter; a tenant's own lists are always its own: naming
// another is refused).
func listQuery(v url.Values, p principal) (limit int, tenant string, err error) {
	if limit, err = paging.Limit(v); err != nil {
		return 0, "", err
	}
	tenant = v.Get("tenant")
	if !p.operator() {
		if tenant != "" && tenant != p.tenant {
			return 0, "", fmt.Errorf("tenant %q: this token sees the lists of tenant %q only; leave tenant out", tenant, p.tenant)
		}
		tenant = p.tenant
	}
	return limit, tenant, nil
}

func (s *Server) listEndpoints(w http.ResponseWriter, r *http.Request, p principal) {
	v := r.URL.Query()
	limit, tenant, err := listQuery(v, p)
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	f := endpointFilter{sink: v.Get("sink"), tenant: tenant, state: v.Get("state")}
	if f.state != "" && !slices.Contains(endpointStates, f.state) {
		badRequest(w, fmt.Sprintf("state %q: use one of %s", f.state, strings.Join(endpointStates, ", ")))
		return
	}
	var after endpointKey
	if it := v.Get("iterator"); it != "" {
		if after, err = endpointCursor(it); err != nil {
			badRequest(w, err.Error())
			return
		}
	}
	eps, next, more, err := s.endpointsPage(r.Context(), p, f, after, limit)
	if err != nil {
		s.internal(w, err)
		return
	}
	out := make([]Endpoint, 0, len(eps))
	for _, e := range eps {
		out = append(out, e.redacted())
	}
	writeJSON(w, http.StatusOK, paging.Answer("endpoints", out, next.cursor(), more))
}
