// Package deadletter keeps the events a sink could not deliver (a message the
// destination rejects for good, a webhook endpoint that answered 410 Gone, a
// retry budget spent), durably, with why, so an operator can inspect, replay
// or purge them.
//
// Put returns only once the record is durable: the pipeline lets the
// checkpoint pass an event only after that, so a dead-lettered event is
// never lost. Two stores: File (one JSON file per record in a directory,
// written atomically, indexed by sink: one endpoint's records are listed
// from a directory of their own) and MySQL (a table in the checkpoint database, utf8mb4
// with binary keys whatever the database's default, so it takes any event
// and any reason: a value too long for its column is kept there in a form
// that fits, and whole in the record). Both are safe for concurrent use.
// A record a store still refuses is the caller's to write again: Put's
// error says why, and the pipeline waits on the event and says so (package
// pipeline, DeadLetterObserver).
//
// A record keeps the tenant its endpoint had when the event failed
// (Letter.Tenant), and is that tenant's for good: a tenant's view selects
// records by it (Filter.Tenant), in the store, never by who owns the
// endpoint now, which may be another tenant that reused the endpoint's
// name. A record of no tenant (an endpoint of no tenant, or a record stored
// before records kept their tenant) is the operator's only.
package deadletter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

// Letter is one event the pipeline gave up on, with why. A store turns it
// into a Record.
type Letter struct {
	Event *event.Event
	// Sink is the name of the sink (pipeline) that failed to deliver it.
	Sink string
	// Tenant is the tenant of the sink when it failed (sink.TenantOf: a
	// webhook endpoint of a tenant's row); empty for a sink of no tenant.
	Tenant   string
	Reason   string
	Attempts int
	First    time.Time
	Last     time.Time
}

// Putter durably keeps events that could not be delivered: the part of a
// store the pipeline uses. Put must return only after the record is
// durable: the pipeline moves the checkpoint past the event only then.
type Putter interface {
	Put(ctx context.Context, l Letter) error
}

// Record is one stored dead letter.
type Record struct {
	// ID is assigned by the store; it orders records by the time stored.
	ID       string       `json:"id"`
	Sink     string       `json:"sink"`
	Tenant   string       `json:"tenant,omitempty"`
	Event    *event.Event `json:"event"`
	Reason   string       `json:"reason"`
	Attempts int          `json:"attempts"`
	First    time.Time    `json:"first_failed"`
	Last     time.Time    `json:"last_failed"`
	Stored   time.Time    `json:"stored"`
}

// ErrReadOnly is returned by Put and Delete on a store opened read-only.
var ErrReadOnly = errors.New("the dead-letter store was opened read-only")

// Filter selects records; zero fields select everything.
type Filter struct {
	IDs []string
	// Sink selects one sink's records; a webhook sink's name selects those
	// of all its endpoints ("hooks" selects "hooks/billing" too).
	Sink string
	// Tenant, when set, selects only the records of that tenant (the
	// tenant their endpoint had when they were stored): a tenant's view is
	// always scoped by it. Records of no tenant never match it.
	Tenant string
	Since  time.Time // stored at or after
	Until  time.Time // stored before
	// After is a cursor: only records whose id sorts after it ("": from
	// the first). A store reads from there by its key (the MySQL store's
	// primary key, the file store's names): a page never reads the
	// records before it.
	After string
	// Limit caps the records List returns (0: all): the first Limit
	// records f selects, oldest first.
	Limit int
}

// Match reports whether r passes f.
func (f Filter) Match(r Record) bool {
	if len(f.IDs) > 0 {
		found := false
		for _, id := range f.IDs {
			if id == r.ID {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	if f.After != "" && r.ID <= f.After {
		return false
	}
	if f.Sink != "" && f.Sink != r.Sink && !strings.HasPrefix(r.Sink, f.Sink+"/") {
		return false
	}
	if f.Tenant != "" && f.Tenant != r.Tenant {
		return false
	}
	if !f.Since.IsZero() && r.Stored.Before(f.Since) {
		return false
	}
	if !f.Until.IsZero() && !r.Stored.Before(f.Until) {
		return false
	}
	return true
}

// Store is a dead-letter store.
type Store interface {
	Putter
	// List returns the records matching f, oldest first. It selects by
	// f.Tenant in the store (an index, file names), before it decodes a
	// record.
	List(ctx context.Context, f Filter) ([]Record, error)
	// Delete removes the records with these ids (unknown ids are ignored).
	Delete(ctx context.Context, ids ...string) error
	Close() error
}

func recordOf(dl Letter, id string, now time.Time) Record {
	return Record{ID: id, Sink: dl.Sink, Tenant: dl.Tenant, Event: dl.Event, Reason: dl.Reason, Attempts: dl.Attempts,
		First: dl.First.UTC(), Last: dl.Last.UTC(), Stored: now.UTC()}
}

var seq atomic.Uint64

// newID returns a sortable id: the time stored, then a process-local counter.
func newID(now time.Time) string {
	return fmt.Sprintf("%s-%06d", now.UTC().Format("20060102T150405.000000000Z"), seq.Add(1)%1000000)
}
