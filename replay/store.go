package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// KeyPrefix starts every key of a replay job in the checkpoint store
// (checkpoint.Reserved holds for each).
const KeyPrefix = checkpoint.ReservedPrefix + "replay/"

// JobKey is the key of job id's record.
func JobKey(id string) string { return KeyPrefix + id }

// ProgressKey is the key under which job id's pipeline saves its progress
// (its checkpoint, as a sink's).
func ProgressKey(id string) string { return KeyPrefix + id + "/progress" }

// CancelKey is the key of a request to cancel job id (MySQL store).
func CancelKey(id string) string { return KeyPrefix + id + "/cancel" }

// parseKey returns the job id of a replay key and what the key is ("",
// "progress" or "cancel"); ok is false for any other key.
func parseKey(key string) (id, what string, ok bool) {
	rest, ok := strings.CutPrefix(key, KeyPrefix)
	if !ok {
		return "", "", false
	}
	id, what, _ = strings.Cut(rest, "/")
	return id, what, ValidID(id)
}

// Store keeps jobs in a checkpoint store that can list the keys of a prefix
// and delete keys (File, MySQL): a listing reads the jobs' keys only, not
// every endpoint's checkpoint beside them.
type Store struct {
	st checkpoint.Store
}

// ErrNoJob is returned for a job id the store does not hold.
var ErrNoJob = errors.New("no such replay job")

// NewStore returns the jobs of st, or an error when st cannot list its
// keys.
func NewStore(st checkpoint.Store) (*Store, error) {
	if _, ok := st.(checkpoint.PrefixLister); !ok {
		return nil, errors.New("the checkpoint store cannot list its keys, so it cannot hold replay jobs")
	}
	return &Store{st: st}, nil
}

// Put saves j's record (its UpdatedAt set to now).
func (s *Store) Put(ctx context.Context, j Job) error {
	j.UpdatedAt = time.Now().UTC()
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	if err := s.st.Save(ctx, JobKey(j.ID), checkpoint.Checkpoint{Record: string(b), UpdatedAt: j.UpdatedAt}); err != nil {
		return fmt.Errorf("save replay job %s: %w", j.ID, err)
	}
	return nil
}

// Get returns job id.
func (s *Store) Get(ctx context.Context, id string) (Job, error) {
	cp, err := s.st.Load(ctx, JobKey(id))
	if errors.Is(err, checkpoint.ErrNotFound) {
		return Job{}, fmt.Errorf("%w: %s (outbox-relay replay list shows the jobs)", ErrNoJob, id)
	}
	if err != nil {
		return Job{}, err
	}
	return decode(JobKey(id), cp)
}

func decode(key string, cp checkpoint.Checkpoint) (Job, error) {
	var j Job
	if err := json.Unmarshal([]byte(cp.Record), &j); err != nil {
		return Job{}, fmt.Errorf("replay job record %q does not decode: %v; remove it (a job that cannot be read cannot be run)", key, err)
	}
	return j, nil
}

// Listing is what the store holds about replays.
type Listing struct {
	// Jobs are the jobs, oldest first.
	Jobs []Job
	// Progress is each job's saved progress (its pipeline's checkpoint).
	Progress map[string]checkpoint.Checkpoint
	// Cancel holds the jobs asked to be cancelled, with why.
	Cancel map[string]string
}

// List returns every job, its progress and the requests to cancel. A
// record that does not decode is an error.
func (s *Store) List(ctx context.Context) (Listing, error) {
	all, err := s.st.(checkpoint.PrefixLister).ListPrefix(ctx, KeyPrefix)
	if err != nil {
		return Listing{}, err
	}
	return listing(all)
}

// FromCheckpoints is List of the keys of a store already listed.
func FromCheckpoints(all map[string]checkpoint.Checkpoint) (Listing, error) { return listing(all) }

func listing(all map[string]checkpoint.Checkpoint) (Listing, error) {
	l := Listing{Progress: map[string]checkpoint.Checkpoint{}, Cancel: map[string]string{}}
	var errs []error
	for k, cp := range all {
		id, what, ok := parseKey(k)
		if !ok {
			continue
		}
		switch what {
		case "":
			j, err := decode(k, cp)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			l.Jobs = append(l.Jobs, j)
		case "progress":
			l.Progress[id] = cp
		case "cancel":
			l.Cancel[id] = cp.Disabled
		}
	}
	slices.SortFunc(l.Jobs, func(a, b Job) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return l, errors.Join(errs...)
}

// PutCapped saves a new job j unless its tenant already has max jobs
// pending or running (a *QueueFullError then). A job of no tenant (an
// operator's) is not capped. The count and the save are not one
// transaction: callers that submit concurrently serialise their calls.
func (s *Store) PutCapped(ctx context.Context, j Job, max int) error {
	if j.Tenant != "" {
		l, err := s.List(ctx)
		if err != nil {
			return err
		}
		n := 0
		for _, o := range l.Jobs {
			if o.Tenant == j.Tenant && !o.State.Final() {
				n++
			}
		}
		if n >= max {
			return &QueueFullError{Tenant: j.Tenant, Cap: max}
		}
	}
	return s.Put(ctx, j)
}

// RequestCancel records a request to cancel job id, with why: the running
// relay stops the job once it has listed it, and marks it cancelled. A job
// already in a final state is left as it is (an error says so).
func (s *Store) RequestCancel(ctx context.Context, id, why string) error {
	j, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	if j.State.Final() {
		return fmt.Errorf("replay job %s is already %s", id, j.State)
	}
	return s.st.Save(ctx, CancelKey(id), checkpoint.Checkpoint{Disabled: why, UpdatedAt: time.Now().UTC()})
}

// Cancel marks job id cancelled at once and removes its request to cancel
// and its progress: for a store no running relay holds.
func (s *Store) Cancel(ctx context.Context, id, why string) error {
	j, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	if j.State.Final() {
		return fmt.Errorf("replay job %s is already %s", id, j.State)
	}
	j.State, j.Error = Cancelled, why
	if err := s.Put(ctx, j); err != nil {
		return err
	}
	return s.Forget(ctx, id)
}

// Forget removes what a job in a final state no longer needs: its progress
// and its request to cancel (its record stays, with its counts).
func (s *Store) Forget(ctx context.Context, id string) error {
	d, ok := s.st.(checkpoint.Deleter)
	if !ok {
		return nil
	}
	return errors.Join(d.Delete(ctx, ProgressKey(id)), d.Delete(ctx, CancelKey(id)))
}
