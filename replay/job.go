package replay

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

// Header is the header (Kafka header, HTTP header, NATS header, Redis field,
// RabbitMQ header) every replayed event carries: its value is the job's id.
// Live events never carry it.
const Header = "relay_replay"

// Source kinds of a job: where its events are read.
const (
	// SourceBinlog reads the window from the source server's binlog.
	SourceBinlog = "binlog"
	// SourceTable reads the outbox table's retained rows (the backfill).
	SourceTable = "table"
	// SourceKafka reads the topics a Kafka sink wrote, for an endpoint of
	// the scaled-out gateway (package gateway/scaled): From and Until are
	// every partition's offsets (kafkasource.Offsets).
	SourceKafka = "kafka"
)

// State is where a job is in its life.
type State string

// The states of a job. Pending and Running jobs are run by the relay;
// Done, Cancelled, Failed and Stopped are final and stay listed with their
// counts. Stopped: its target went away while it ran (an endpoint
// disabled or deleted: ErrTargetGone), with why in Error.
const (
	Pending   State = "pending"
	Running   State = "running"
	Done      State = "done"
	Cancelled State = "cancelled"
	Failed    State = "failed"
	Stopped   State = "stopped"
)

// Final reports whether s is a state a job does not leave.
func (s State) Final() bool { return s == Done || s == Cancelled || s == Failed || s == Stopped }

// ErrTargetGone is wrapped by Runner.Current's error when a job's target
// is gone (an endpoint disabled or deleted): the job is stopped.
var ErrTargetGone = errors.New("the replay's target is gone")

// ErrPurged is returned when the source server no longer holds the start
// of a window in its binlog: the table source (--source table) can still
// send what the outbox table keeps.
var ErrPurged = errors.New("the source server no longer holds that part of the binlog")

// Ask is a replay as asked (outbox-relay replay, the console's resend and
// recover since): a time or a GTID set for each end of the window, which a
// planner resolves to a Job (package relay/replayplan for the binlog and
// the outbox table, gateway/scaled.PlanReplay for the Kafka topics).
type Ask struct {
	Sink, Endpoint string
	Source         string // SourceBinlog (default) or SourceTable
	Since          time.Time
	From           string // a GTID set: the events after it
	UntilTime      time.Time
	Until          string // a GTID set: the events up to it
	Types          []string
	Where          string
}

// Job is one replay: what to send again, to whom, and how far it got.
type Job struct {
	// ID names the job (its keys, its metrics, the Header's value).
	ID string `json:"id"`
	// Sink is the configured sink the events are sent to again.
	Sink string `json:"sink"`
	// Endpoint, for a webhook sink, is the one endpoint (its name in the
	// sink, not the "<sink>/<endpoint>" key) they are sent to; empty for
	// every other sink.
	Endpoint string `json:"endpoint,omitempty"`
	// Tenant is the console tenant who asked for the job (recover since,
	// resend); empty for an operator's. Jobs start in turn across tenants,
	// and a tenant's pending and running jobs are capped (QueueFullError).
	Tenant string `json:"tenant,omitempty"`
	// Source is SourceBinlog, SourceTable or SourceKafka.
	Source string `json:"source"`
	// From is where the window starts: the events after it are replayed.
	// Resolved when the job is made (from Since, or as asked).
	From event.Position `json:"from"`
	// Until is where the window ends: the events up to it are replayed.
	// Resolved when the job is made: the position of UntilTime, or as
	// asked, or by default the source's position at that moment.
	Until event.Position `json:"until"`
	// Since and UntilTime are the times asked for (zero when a position was
	// given instead), for humans.
	Since     time.Time `json:"since,omitzero"`
	UntilTime time.Time `json:"until_time,omitzero"`
	// Types select events by type, as path.Match globs ("order.*"); none
	// selects every event.
	Types []string `json:"types,omitempty"`
	// IDs, when set, select only the events with these ids (a resend of
	// one event from the console); none selects every event.
	IDs []string `json:"ids,omitempty"`
	// Where selects rows of the table source (an SQL condition); the
	// binlog source refuses it.
	Where string `json:"where,omitempty"`

	// Gone, for a table job, says what the table no longer holds of the
	// window (backfill.Gone, per table): those rows cannot be sent.
	Gone []string `json:"gone,omitempty"`

	State State  `json:"state"`
	Error string `json:"error,omitempty"`
	// Sent counts the events the target acknowledged; Skipped those the
	// filters passed over.
	Sent    int64 `json:"sent"`
	Skipped int64 `json:"skipped"`

	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Key is the checkpoint name of the job's target: the sink's, or
// "<sink>/<endpoint>".
func (j *Job) Key() string {
	if j.Endpoint != "" {
		return j.Sink + "/" + j.Endpoint
	}
	return j.Sink
}

// Selects reports whether the type filters select an event of type t.
func (j *Job) Selects(t string) bool {
	if len(j.Types) == 0 {
		return true
	}
	for _, g := range j.Types {
		if ok, _ := path.Match(g, t); ok {
			return true
		}
	}
	return false
}

// SelectsEvent reports whether the job's filters (Types, IDs) select e.
func (j *Job) SelectsEvent(e *event.Event) bool {
	return j.Selects(e.Type) && (len(j.IDs) == 0 || slices.Contains(j.IDs, e.ID))
}

// QueueFullError refuses a tenant's job when Cap of its jobs are already
// pending or running (replay.max_jobs_per_tenant).
type QueueFullError struct {
	Tenant string
	Cap    int
}

func (e *QueueFullError) Error() string {
	return fmt.Sprintf("tenant %q has %d replay jobs pending or running, the most replay.max_jobs_per_tenant (%d) allows: wait for one to end, or cancel one", e.Tenant, e.Cap, e.Cap)
}

// Check reports what is wrong with a job as asked (before it is stored),
// each problem with its fix.
func (j *Job) Check() error {
	var errs []error
	if j.Sink == "" {
		errs = append(errs, errors.New("no sink: name the sink to replay to with --sink (outbox-relay status lists them)"))
	}
	switch j.Source {
	case SourceBinlog:
		if j.Where != "" {
			errs = append(errs, errors.New("--where selects rows of the outbox table: use it with --source table"))
		}
	case SourceTable:
	case SourceKafka:
		if j.Where != "" {
			errs = append(errs, errors.New("--where selects rows of the outbox table: a replay from Kafka selects by --type and the endpoint's filter"))
		}
		if j.Endpoint == "" {
			errs = append(errs, errors.New("a replay from Kafka is for one endpoint of the scaled-out gateway: name it as SINK/ENDPOINT"))
		}
	default:
		errs = append(errs, fmt.Errorf("source %q: use %s or %s", j.Source, SourceBinlog, SourceTable))
	}
	for _, g := range j.Types {
		if _, err := path.Match(g, ""); err != nil {
			errs = append(errs, fmt.Errorf("--type %q is not a valid pattern (* ? [a-z] as in path.Match): %v", g, err))
		}
	}
	if !j.Since.IsZero() && !j.UntilTime.IsZero() && !j.UntilTime.After(j.Since) {
		errs = append(errs, fmt.Errorf("--until %s is not after --since %s: give a later --until, or leave it out to replay up to now", j.UntilTime.Format(time.RFC3339), j.Since.Format(time.RFC3339)))
	}
	if !ValidID(j.ID) {
		errs = append(errs, fmt.Errorf("job id %q: use letters, digits, '-' and '_' only", j.ID))
	}
	return errors.Join(errs...)
}

// NewID returns a new job id: the time it was made and 4 random hex digits
// ("20261202-101503-a3f9"), so that ids sort by age.
func NewID(now time.Time) string {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// ValidID reports whether id can name a job (its keys, its spool files).
func ValidID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	return strings.IndexFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	}) < 0
}
