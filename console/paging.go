package console

// This file owns the paging of the API's lists (endpoints, attempts, dead
// letters): the limit, the opaque cursor (iterator in a request, next in
// its answer, as Svix does), and the keyset walk that fills a page.

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/outbox-relay/outbox-relay/gateway"
)

// The size of a page: DefaultPageLimit without a limit, at most
// MaxPageLimit.
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
)

// scanFactor bounds the rows a page with a filter the store cannot apply
// (an endpoint's state) examines: scanFactor × its limit. A page that
// reaches it answers with fewer rows than its limit, and a next.
const scanFactor = 10

// pageLimit reads the query's limit.
func pageLimit(v url.Values) (int, error) {
	x := v.Get("limit")
	if x == "" {
		return DefaultPageLimit, nil
	}
	n, err := strconv.Atoi(x)
	if err != nil || n < 1 || n > MaxPageLimit {
		return 0, fmt.Errorf("limit %q: use 1 to %d (default %d)", x, MaxPageLimit, DefaultPageLimit)
	}
	return n, nil
}

// A cursor is the key of the last row a page examined, encoded: base64url
// of the list's letter and the key's fields, each field length-prefixed.
// It says where the next page starts, nothing more: who may see what is
// decided for each page as for the first.
const (
	cursorEndpoints   = 'e'
	cursorAttempts    = 'a'
	cursorDeadLetters = 'd'
)

func encodeCursor(list byte, fields ...string) string {
	b := []byte{list}
	for _, f := range fields {
		b = strconv.AppendInt(b, int64(len(f)), 10)
		b = append(b, ':')
		b = append(b, f...)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// badCursor is the error of an iterator that is not one of the list's.
func badCursor(it string) error {
	if len(it) > 40 {
		it = it[:40] + "…"
	}
	return fmt.Errorf("iterator %q is not a cursor of this list: pass the next of the previous page as it was given, or leave iterator out to start from the first page", it)
}

// decodeCursor returns the n fields of the cursor it of list, or an error
// saying how to fix it.
func decodeCursor(list byte, it string, n int) ([]string, error) {
	b, err := base64.RawURLEncoding.DecodeString(it)
	if err != nil || len(b) == 0 || b[0] != list || len(it) > 1024 {
		return nil, badCursor(it)
	}
	rest := string(b[1:])
	var out []string
	for rest != "" {
		l, after, ok := strings.Cut(rest, ":")
		size, err := strconv.Atoi(l)
		if !ok || err != nil || size < 0 || size > len(after) || len(l) > 4 {
			return nil, badCursor(it)
		}
		out, rest = append(out, after[:size]), after[size:]
	}
	if len(out) != n {
		return nil, badCursor(it)
	}
	return out, nil
}

// fill walks a list by its key from after and returns its next page: at
// most limit items that keep selects, and, when the list goes on, the key
// the next page starts after. read returns the next at most n items after
// a key, in the list's order (fewer only at its end). A row that exists
// throughout a walk is on exactly one of its pages, whatever was added or
// deleted meanwhile: each page starts after the key of the last row the
// page before examined. A page examines at most scanFactor × limit rows.
func fill[T, K any](limit int, after K, read func(after K, n int) ([]T, error), key func(T) K, keep func(T) bool) (page []T, next K, more bool, err error) {
	cur := after
	for examined := 0; examined < scanFactor*limit; {
		n := limit + 1 - len(page)
		got, err := read(cur, n)
		if err != nil {
			return nil, next, false, err
		}
		for _, x := range got {
			cur = key(x)
			examined++
			if !keep(x) {
				continue
			}
			if page = append(page, x); len(page) == limit+1 {
				return page[:limit], key(page[limit-1]), true, nil
			}
		}
		if len(got) < n {
			return page, next, false, nil
		}
	}
	return page, cur, true, nil
}

// pageAnswer is the answer of a list: its items under name, and next (the
// iterator of the next page) and done.
func pageAnswer(name string, items any, next string, more bool) map[string]any {
	out := map[string]any{name: items, "done": !more}
	if more {
		out["next"] = next
	}
	return out
}

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
	return encodeCursor(cursorEndpoints, k.sink, strconv.Itoa(k.phase), k.id)
}

func endpointCursor(it string) (endpointKey, error) {
	f, err := decodeCursor(cursorEndpoints, it, 3)
	if err != nil {
		return endpointKey{}, err
	}
	if f[0] == "" || f[1] != "0" && f[1] != "1" || f[2] == "" {
		return endpointKey{}, badCursor(it)
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
	page, next, more, err := fill(limit, after, read, key, keep)
	for i := range page {
		page[i] = withStat(page[i], stat)
	}
	return page, next, more, err
}

// listQuery reads what every list takes: limit, and tenant (an
// operator's filter; a tenant's own lists are always its own: naming
// another is refused).
func listQuery(v url.Values, p principal) (limit int, tenant string, err error) {
	if limit, err = pageLimit(v); err != nil {
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
	writeJSON(w, http.StatusOK, pageAnswer("endpoints", out, next.cursor(), more))
}
