package attempts

import (
	"errors"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// ErrReadOnly is returned by Append and Prune of a store opened for
// reading only.
var ErrReadOnly = errors.New("attempts store opened read-only")

// Bounds of what a store keeps of an attempt's text fields. The keys (sink,
// endpoint, tenant, event id, replay job) are bytes, a longer one kept as
// its start and a hash of it (Key), so a search by the same key finds it.
// The type and the error are text (a receiver's answer can be part of the
// error), cut at a rune boundary: kept as valid UTF-8, each invalid byte
// sequence replaced by U+FFFD (checkpoint.FitText).
const (
	keyLimit   = 255  // sink, endpoint, tenant, event id, type, replay job
	errorLimit = 1024 // the error's text
)

// normal returns a as a store keeps it: times in UTC to the microsecond
// (what a MySQL DATETIME(6) holds, so both stores return the same), text
// fields cut to their bounds, the answer to AnswerLimit bytes; an attempt
// without a time is stamped now.
func normal(a Attempt) Attempt {
	if a.Time.IsZero() {
		a.Time = time.Now()
	}
	a.Time = micro(a.Time)
	a.Committed = micro(a.Committed)
	a.Sink = Key(a.Sink)
	a.Endpoint = Key(a.Endpoint)
	a.Tenant = Key(a.Tenant)
	a.EventID = Key(a.EventID)
	a.EventType = checkpoint.FitText(a.EventType, keyLimit)
	a.Replay = Key(a.Replay)
	a.Error = checkpoint.FitText(a.Error, errorLimit)
	if len(a.Answer) > AnswerLimit {
		a.Answer = a.Answer[:AnswerLimit]
	}
	if len(a.Answer) == 0 {
		a.Answer = nil
	}
	return a
}

// Key is a key field (sink, endpoint, tenant, event id, replay job) as a
// store keeps it, and as a search compares it: the key itself, or when it
// is longer than keyLimit bytes its first bytes and a hash of all of it
// (checkpoint.FitKey, the form of every key too long for its column), so
// that two long keys alike in their first bytes never share a record, as
// they would if both were cut, and a search by the whole key finds it.
func Key(s string) string { return checkpoint.FitKey(s, keyLimit) }

// TenantKey is a tenant as a store keeps it (Key).
func TenantKey(tenant string) string { return Key(tenant) }

func micro(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Microsecond)
}
