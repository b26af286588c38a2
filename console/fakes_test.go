package console

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/replay"
)

// memAttempts is an in-memory attempts.Store.
type memAttempts struct {
	mu   sync.Mutex
	recs []attempts.Record
}

func (m *memAttempts) Append(_ context.Context, batch []attempts.Attempt) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, a := range batch {
		m.recs = append(m.recs, attempts.Record{ID: int64(len(m.recs) + 1), Attempt: a})
	}
	return nil
}

func (m *memAttempts) Search(_ context.Context, q attempts.Query) ([]attempts.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	limit := q.Limit
	if limit == 0 {
		limit = 100
	}
	var out []attempts.Record
	for i := len(m.recs) - 1; i >= 0 && len(out) < limit; i-- {
		r := m.recs[i]
		switch {
		case q.Sink != "" && r.Sink != q.Sink, q.Endpoint != "" && r.Endpoint != q.Endpoint, q.Tenant != "" && r.Tenant != q.Tenant,
			q.EventID != "" && r.EventID != q.EventID, q.Status != 0 && r.Status != q.Status, q.Failed && r.Outcome == attempts.OutcomeDelivered,
			!q.Since.IsZero() && r.Time.Before(q.Since), !q.Until.IsZero() && !r.Time.Before(q.Until), q.Before != 0 && r.ID >= q.Before:
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

func (m *memAttempts) Prune(context.Context, time.Time, int64) (int64, error) { return 0, nil }
func (m *memAttempts) Close() error                                           { return nil }

// memTable is an in-memory gateway.TableAdmin.
type memTable struct {
	mu     sync.Mutex
	rows   map[string]gateway.TableRow
	static []string
}

func (t *memTable) Rows(context.Context) ([]gateway.TableRow, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []gateway.TableRow
	for _, r := range t.rows {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b gateway.TableRow) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (t *memTable) Page(ctx context.Context, after, tenant string, limit int) ([]gateway.TableRow, error) {
	all, _ := t.Rows(ctx)
	var out []gateway.TableRow
	for _, r := range all {
		if r.ID > after && (tenant == "" || r.Tenant == tenant) && len(out) < limit {
			out = append(out, r)
		}
	}
	return out, nil
}

func (t *memTable) Row(_ context.Context, id string) (gateway.TableRow, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.rows[id]
	if !ok {
		return r, fmt.Errorf("%w: %s", gateway.ErrNoRow, id)
	}
	return r, nil
}

func (t *memTable) Insert(_ context.Context, r gateway.TableRow, secret string) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if slices.Contains(t.static, r.ID) {
		return "", fmt.Errorf("%w: names a static endpoint", gateway.ErrBadRow)
	}
	if _, ok := t.rows[r.ID]; ok {
		return "", gateway.ErrRowExists
	}
	r.Secrets = 1
	t.rows[r.ID] = r
	return "whsec_new", nil
}

func (t *memTable) Update(_ context.Context, r gateway.TableRow) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	old, ok := t.rows[r.ID]
	if !ok {
		return gateway.ErrNoRow
	}
	r.Enabled, r.Secrets = old.Enabled, old.Secrets
	t.rows[r.ID] = r
	return nil
}

func (t *memTable) SetEnabled(_ context.Context, id string, on bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.rows[id]
	if !ok {
		return gateway.ErrNoRow
	}
	r.Enabled = on
	t.rows[id] = r
	return nil
}

func (t *memTable) Delete(_ context.Context, id string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.rows[id]; !ok {
		return gateway.ErrNoRow
	}
	delete(t.rows, id)
	return nil
}

func (t *memTable) RotateSecret(_ context.Context, id string, keep bool) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.rows[id]; !ok {
		return "", gateway.ErrNoRow
	}
	return "whsec_rotated", nil
}

// memDeadLetters is an in-memory deadletter.Store.
type memDeadLetters struct {
	mu   sync.Mutex
	recs []deadletter.Record
}

func (m *memDeadLetters) Put(_ context.Context, l deadletter.Letter) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs = append(m.recs, deadletter.Record{ID: fmt.Sprint(len(m.recs) + 1), Sink: l.Sink, Tenant: l.Tenant, Event: l.Event, Reason: l.Reason, Stored: time.Now()})
	return nil
}

func (m *memDeadLetters) List(_ context.Context, f deadletter.Filter) ([]deadletter.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []deadletter.Record
	for _, r := range m.recs {
		if f.Match(r) && (f.Limit == 0 || len(out) < f.Limit) {
			out = append(out, r)
		}
	}
	return out, nil
}

func (m *memDeadLetters) Delete(_ context.Context, ids ...string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs = slices.DeleteFunc(m.recs, func(r deadletter.Record) bool { return slices.Contains(ids, r.ID) })
	return nil
}

func (m *memDeadLetters) Close() error { return nil }

// fakeRelay records what the console asked of it.
type fakeRelay struct {
	mu    sync.Mutex
	calls []string
	cap   int            // replay jobs a tenant may ask for (0: any)
	asked map[string]int // by tenant
}

func (f *fakeRelay) called(s string) {
	f.mu.Lock()
	f.calls = append(f.calls, s)
	f.mu.Unlock()
}

func (f *fakeRelay) Resend(_ context.Context, tenant string, a attempts.Record) (string, error) {
	f.called("resend " + a.Sink + "/" + a.Endpoint + " " + a.EventID)
	return "job-1", f.refuse(tenant)
}

func (f *fakeRelay) Recover(_ context.Context, tenant, sink, endpoint string, since time.Time) (string, error) {
	f.called("recover " + sink + "/" + endpoint + " by " + tenant)
	return "job-2", f.refuse(tenant)
}

// refuse is the error a replay asked by tenant gets: a full queue once it
// asked for cap of them (cap 0: never).
func (f *fakeRelay) refuse(tenant string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.asked == nil {
		f.asked = map[string]int{}
	}
	if f.asked[tenant]++; f.cap > 0 && tenant != "" && f.asked[tenant] > f.cap {
		return &replay.QueueFullError{Tenant: tenant, Cap: f.cap}
	}
	return nil
}

func (f *fakeRelay) ReplayDeadLetters(_ context.Context, recs []deadletter.Record) (int, error) {
	for _, r := range recs {
		f.called("dlq " + r.ID)
	}
	return len(recs), nil
}

func (f *fakeRelay) Enable(_ context.Context, key string) (bool, error) {
	f.called("enable " + key)
	return false, nil
}
