package attempts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Query parameters of GET /attempts (Values, ParseValues): sink, endpoint,
// tenant, event, status, failed (true), since and until (RFC 3339),
// before (an id) and limit.

// Values returns q as the query parameters of GET /attempts.
func (q Query) Values() url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("sink", q.Sink)
	set("endpoint", q.Endpoint)
	set("tenant", q.Tenant)
	set("event", q.EventID)
	if q.Status != 0 {
		v.Set("status", strconv.Itoa(q.Status))
	}
	if q.Failed {
		v.Set("failed", "true")
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.UTC().Format(time.RFC3339Nano))
	}
	if q.Before > 0 {
		v.Set("before", strconv.FormatInt(q.Before, 10))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// ParseValues reads a Query from the query parameters of GET /attempts;
// an error names the bad parameter.
func ParseValues(v url.Values) (Query, error) {
	q := Query{Sink: v.Get("sink"), Endpoint: v.Get("endpoint"), Tenant: v.Get("tenant"), EventID: v.Get("event")}
	var errs []error
	num := func(key string, dst func(int64)) {
		if s := v.Get(key); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 0 {
				errs = append(errs, fmt.Errorf("%s: %q is not a whole number ≥ 0", key, s))
				return
			}
			dst(n)
		}
	}
	num("status", func(n int64) { q.Status = int(n) })
	num("before", func(n int64) { q.Before = n })
	num("limit", func(n int64) { q.Limit = int(min(n, MaxLimit)) })
	tm := func(key string, dst *time.Time) {
		if s := v.Get(key); s != "" {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %q is not an RFC 3339 time (2026-12-01T09:00:00Z)", key, s))
				return
			}
			*dst = t
		}
	}
	tm("since", &q.Since)
	tm("until", &q.Until)
	if s := v.Get("failed"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("failed: %q is not true or false", s))
		}
		q.Failed = b
	}
	return q, errors.Join(errs...)
}

// Handler serves GET /attempts: the records of store() that the query
// parameters select, newest first, as a JSON array of Records. store
// returns nil while there is none to ask (a standby relay, which has not
// opened it): the answer is then 503.
func Handler(store func() Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := store()
		if st == nil {
			http.Error(w, "this relay has no attempts record open: it is a standby, or starting; ask the active relay", http.StatusServiceUnavailable)
			return
		}
		q, err := ParseValues(r.URL.Query())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		recs, err := st.Search(r.Context(), q)
		if err != nil {
			http.Error(w, "search attempts: "+err.Error(), http.StatusInternalServerError)
			return
		}
		if recs == nil {
			recs = []Record{}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(recs)
	})
}

// Client searches the record of a running relay over its HTTP listener
// (Handler, GET /attempts): what the attempts command does while the relay
// holds the file. It is a read-only Store.
type Client struct {
	base string
	hc   *http.Client
}

// NewClient returns a Client of the relay listening at base
// ("http://127.0.0.1:9090"); hc nil: a client with a 30s timeout.
func NewClient(base string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	return &Client{base: strings.TrimSuffix(base, "/"), hc: hc}
}

// Search implements Store.
func (c *Client) Search(ctx context.Context, q Query) ([]Record, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/attempts?"+q.Values().Encode(), nil)
	if err != nil {
		return nil, fmt.Errorf("ask the relay at %s: %w", c.base, err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ask the relay at %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, fmt.Errorf("ask the relay at %s: %s: %s", c.base, resp.Status, strings.TrimSpace(string(b)))
	}
	var recs []Record
	if err := json.NewDecoder(resp.Body).Decode(&recs); err != nil {
		return nil, fmt.Errorf("ask the relay at %s: %w", c.base, err)
	}
	return recs, nil
}

// Append implements Store: a Client only reads.
func (c *Client) Append(context.Context, []Attempt) error { return ErrReadOnly }

// Prune implements Store: a Client only reads.
func (c *Client) Prune(context.Context, time.Time, int64) (int64, error) { return 0, ErrReadOnly }

// Close implements Store.
func (c *Client) Close() error { return nil }
