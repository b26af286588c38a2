// Package checkpoint stores, durably and atomically, how far each sink has
// been delivered: the binlog position after the last transaction whose events
// the sink acknowledged.
//
// Two stores are provided: File (the default: one JSON file per relay, written
// to a temporary file, fsynced, renamed over the old one, and the directory
// fsynced, so a crash leaves the old or the new checkpoint, never a torn one)
// and MySQL (a table in a database of its own, each save one transaction).
//
// Both can also save many keys in one write (BatchSaver), save some and
// delete others in one write (BatchWriter), delete a key (Deleter), list
// every key (Lister) and list the keys of one prefix at the cost of what it
// holds (PrefixLister). Many pipelines saving at once (a
// webhook gateway's thousand endpoints, each every checkpoint interval) save
// through a GroupCommit, which writes the saves that wait together with one
// SaveMany; the lock and the fence stay on the store it wraps.
//
// A Store is safe for concurrent use by several sinks' pipelines.
package checkpoint

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

// Checkpoint is a sink's saved position, with what identifies the server it
// belongs to, so a relay pointed at another server does not silently resume
// from a foreign position.
type Checkpoint struct {
	Flavor     string         `json:"flavor"`
	ServerUUID string         `json:"server_uuid,omitempty"`
	ServerID   uint32         `json:"server_id,omitempty"`
	Position   event.Position `json:"position"`
	// CommitTime is the source commit time (the binlog's, whole seconds) of
	// the transaction that ends at Position, the last one the checkpoint
	// covers: every transaction the source committed before it was
	// acknowledged. Zero when unknown (a start checkpoint saved before any
	// transaction, or one saved by a version before 0.2). prune reads it;
	// resuming on MariaDB compares it with the binlog's at Position
	// (source.CheckResumeAt).
	CommitTime time.Time `json:"commit_time,omitzero"`
	UpdatedAt  time.Time `json:"updated_at"`
	// Disabled, when set, says why and since when the pipeline of this key
	// is disabled (a webhook endpoint that failed without a break for too
	// long): it is not started until this is cleared (`outbox-relay
	// endpoints enable`). A running pipeline's saves leave it empty.
	Disabled string `json:"disabled,omitempty"`
	// Acked lists what the sink acknowledged beyond Position, so that a
	// restart does not send it again. Nil when nothing was (and in a
	// checkpoint saved by a version before 0.5).
	Acked *Acked `json:"acked,omitempty"`
	// Record is a record of the relay's own kept under a reserved key (see
	// Reserved), as JSON text: a replay job's definition, state and counts
	// (package replay). Empty in every sink's checkpoint; a pipeline never
	// saves one. (Text, not json.RawMessage: a Checkpoint stays comparable.)
	Record string `json:"record,omitempty"`
}

// ReservedPrefix starts the keys of the relay's own records (Record), which
// are not sinks: no sink name holds a '/', so no pipeline's key (a sink's
// name, or "<sink>/<endpoint>") starts with one.
const ReservedPrefix = "/"

// Reserved reports whether key is one of the relay's own records (a replay
// job, its progress, a request to cancel it), not a sink's or an
// endpoint's checkpoint: what lists keys as sinks (status, prune, the
// gateways' cursors, audit) passes over it.
func Reserved(key string) bool { return strings.HasPrefix(key, ReservedPrefix) }

// Acked is what a sink acknowledged after its checkpoint's position: events
// of transactions the position does not cover yet, because an earlier event
// was still unacknowledged when the checkpoint was saved.
type Acked struct {
	// Events are the acknowledged events' ids by their transaction's GTID
	// (or "file:pos" of its end, when the server has GTIDs off).
	Events map[string][]string `json:"events,omitempty"`
	// ReadThrough is the GTID (or "file:pos") of the last transaction the
	// pipeline had handed to the sink when the checkpoint was saved: after
	// a restart, events up to it that are not in Events may be delivered a
	// second time. Empty when nothing was in flight.
	ReadThrough string `json:"read_through,omitempty"`
}

// Contains reports whether the event id of the transaction key is listed.
func (a *Acked) Contains(key, id string) bool {
	if a == nil {
		return false
	}
	for _, x := range a.Events[key] {
		if x == id {
			return true
		}
	}
	return false
}

// Len is the number of events listed.
func (a *Acked) Len() int {
	if a == nil {
		return 0
	}
	n := 0
	for _, ids := range a.Events {
		n += len(ids)
	}
	return n
}

// ErrNotFound is returned by Load when the key has no checkpoint yet.
var ErrNotFound = errors.New("no checkpoint")

// ErrReadOnly is returned by Save on a store opened read-only.
var ErrReadOnly = errors.New("the checkpoint store was opened read-only")

// Store keeps one checkpoint per key (a sink, or a sink's endpoint).
type Store interface {
	// Load returns the checkpoint saved under key, or ErrNotFound.
	Load(ctx context.Context, key string) (Checkpoint, error)
	// Save replaces key's checkpoint. When it returns nil the checkpoint is
	// durable; when it returns an error the previous one is intact.
	Save(ctx context.Context, key string, cp Checkpoint) error
	// Close releases the store.
	Close() error
}

// BatchSaver is implemented by stores that can save many keys' checkpoints
// in one write (File and MySQL). GroupCommit uses it to write, at once, the
// saves of many pipelines.
type BatchSaver interface {
	// SaveMany replaces the checkpoint of every key in cps. When it returns
	// nil every one is durable; when it returns an error none was saved and
	// the previous ones are intact. A store that Save would refuse (read-only,
	// fenced) refuses SaveMany with the same error. cps stays the
	// caller's: SaveMany keeps no reference to it once it returns.
	SaveMany(ctx context.Context, cps map[string]Checkpoint) error
}

// BatchWriter is implemented by stores that can save some keys and delete
// others in one atomic write (File: one rewrite; MySQL: one transaction),
// and by GroupCommit: a webhook gateway moves its shared cursor and drops
// the endpoints' cursors it passed in one write, so that a save's bytes grow
// with the endpoints that moved, never with every endpoint.
type BatchWriter interface {
	// WriteMany replaces the checkpoint of every key in save and removes
	// every key of del (a key with none is not an error), all or nothing:
	// when it returns nil every change is durable; when it returns an error
	// none was made. A key in both is saved. It is refused as Save would
	// be (read-only, fenced). Neither argument is kept once it returns.
	WriteMany(ctx context.Context, save map[string]Checkpoint, del []string) error
}

// Deleter is implemented by stores that can forget a key (File and MySQL):
// a webhook endpoint removed for good drops its checkpoint, so it no longer
// holds back prune. Delete a key only once nothing saves it any more (its
// pipeline has returned): a save that is under way may write it again.
type Deleter interface {
	// Delete removes key's checkpoint; a key with none is not an error.
	// It is refused as Save would be (read-only, fenced).
	Delete(ctx context.Context, key string) error
}

// Lister is implemented by stores that can list every key they hold (File
// and MySQL): with endpoints kept as data, the relay's config does not name
// every key.
type Lister interface {
	// List returns every saved checkpoint by key; an empty store (or, read
	// only, a missing file or table) returns an empty map.
	List(ctx context.Context) (map[string]Checkpoint, error)
}
