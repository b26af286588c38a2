package attempts

import (
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// ErrReadOnly is returned by Append and Prune of a store opened for
// reading only.
var ErrReadOnly = errors.New("attempts store opened read-only")

// Bounds of what a store keeps of an attempt's text fields; longer values
// are cut (at a rune boundary). The type and the error are text (a
// receiver's answer can be part of the error): kept as valid UTF-8, each
// invalid byte sequence replaced by U+FFFD (checkpoint.FitText); the
// others are bytes.
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
	a.Sink = cut(a.Sink, keyLimit)
	a.Endpoint = cut(a.Endpoint, keyLimit)
	a.Tenant = TenantKey(a.Tenant)
	a.EventID = cut(a.EventID, keyLimit)
	a.EventType = checkpoint.FitText(a.EventType, keyLimit)
	a.Replay = cut(a.Replay, keyLimit)
	a.Error = checkpoint.FitText(a.Error, errorLimit)
	if len(a.Answer) > AnswerLimit {
		a.Answer = a.Answer[:AnswerLimit]
	}
	if len(a.Answer) == 0 {
		a.Answer = nil
	}
	return a
}

// TenantKey is a tenant as a store keeps it, and as a search compares it:
// the tenant itself, or when it is longer than keyLimit its first bytes
// and a hash of all of it (checkpoint.FitKey, the form of every key too long for its column), so that two tenants never
// share a record, as they would if both were cut.
func TenantKey(tenant string) string { return checkpoint.FitKey(tenant, keyLimit) }

func micro(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Microsecond)
}

// cut returns s cut to at most n bytes, at a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if utf8.ValidString(s) {
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
	}
	return strings.Clone(s[:n])
}
