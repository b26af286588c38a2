package relay

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/pipeline"
	"github.com/outbox-relay/outbox-relay/relay/replayplan"
	"github.com/outbox-relay/outbox-relay/replay"
	"github.com/outbox-relay/outbox-relay/sink"
)

// ReplaySources open the source of a replay job of a kind other than
// replay.SourceBinlog, by kind: the table source (replay.SourceTable)
// registers here. Each returns the pipeline.Source of job's pipeline,
// reading from the position its pipeline asks; replicaID is the job's slot
// id, should it read the binlog too. A kind not registered fails the job
// with an error naming it.
var ReplaySources = map[string]func(ctx context.Context, a ReplaySourceParams) (pipeline.Source, error){}

// ReplaySourceParams are what a replay source kind is opened with.
type ReplaySourceParams struct {
	Job       replay.Job
	DB        *sql.DB // the source server (inspected, tables checked)
	ReplicaID uint32
	// Binlog opens a binlog reader registering as ReplicaID (the one a
	// table source merges with its chunks, as DBLog does).
	Binlog func() (pipeline.Source, error)
	Logger *slog.Logger
	// Flavor is the source's; Tables the outbox tables (their mapping);
	// Config the relay's (tables[].columns.created_at).
	Flavor string
	Tables []canal.Table
	Config *config.Config
}

// NewReplayPlanner connects to the source server: the planner of
// `outbox-relay replay` (package relay/replayplan), with r's replay
// targets. Close it when done.
func NewReplayPlanner(ctx context.Context, r *Relay) (*replayplan.Planner, error) {
	return replayplan.Open(ctx, r.replayPlan())
}

// replayPlan is what a replay planner is built with: r's targets, and
// whether the table source is in the build.
func (r *Relay) replayPlan() replayplan.Params {
	_, table := ReplaySources[replay.SourceTable]
	return replayplan.Params{Config: r.cfg, Logger: r.log, Targets: r, TableSource: table}
}

// replays returns the member that runs the replay jobs of the checkpoint
// store beside the live members (replay.Runner): a job's run holds a slot,
// a replica id of config.ReplayReplicaIDs, its binlog reader registers
// with; with the file store, every replay.poll first adopts the requests
// of the spool. At shutdown the running jobs are left running, and resume
// at the next start from their saved progress.
func (a *assembly) replays() (member, error) {
	jobs, err := replay.NewStore(a.store)
	if err != nil {
		return member{}, err
	}
	log := a.r.log.With(slog.String("component", "replay"))
	r := &replay.Runner{Jobs: jobs, Poll: a.cfg.Replay.Poll, Slots: a.cfg.ReplayReplicaIDs(), Registry: a.r.metrics, Logger: log,
		Open: a.openReplay(log), Current: a.replayTarget,
		NewPipeline: func(j replay.Job, s sink.Sink, obs pipeline.Observer) (replay.Pipeline, error) {
			return a.newPipeline(replay.ProgressKey(j.ID), s, a.saver, j.From, a.cfg.Replay.MaxInFlight, a.cfg.Delivery.MaxInFlightBytes, obs)
		}}
	if a.cfg.Checkpoint.Store != "mysql" { // the MySQL store: commands write it
		sp := replay.SpoolFor(a.cfg.Checkpoint.Path)
		r.Adopt = func(ctx context.Context) { adopt(ctx, &sp, jobs, log) }
	}
	return member{name: "replay", run: func(ctx context.Context) error { r.Run(ctx); return nil }, aside: true}, nil
}

// replayTarget is the version of job j's target now (Runner.Current): its
// endpoint's row (Relay.ReplayTargetVersion), and gone when the relay
// disabled the endpoint for failing too long (its checkpoint says so).
func (a *assembly) replayTarget(ctx context.Context, j replay.Job) (string, error) {
	v, err := a.r.ReplayTargetVersion(ctx, a.src.db, j)
	if err != nil || j.Endpoint == "" {
		return v, err
	}
	cp, err := a.store.Load(ctx, j.Key())
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
		return v, nil
	case err != nil:
		return "", err
	case cp.Disabled != "":
		return "", fmt.Errorf("%w: endpoint %s is disabled: %s", replay.ErrTargetGone, j.Key(), cp.Disabled)
	}
	return v, nil
}

// adopt moves the spool's requests into the store, then removes them.
func adopt(ctx context.Context, spool *replay.Spool, jobs *replay.Store, log *slog.Logger) {
	reqs, err := spool.Take()
	if err != nil {
		log.Error("replay request directory", slog.String("dir", spool.Dir()), slog.Any("err", err))
	}
	for _, req := range reqs {
		var err error
		switch {
		case req.Job != nil:
			if _, gerr := jobs.Get(ctx, req.Job.ID); errors.Is(gerr, replay.ErrNoJob) {
				err = jobs.Put(ctx, *req.Job)
			} else {
				err = gerr
			}
		case req.Cancel != "":
			err = jobs.RequestCancel(ctx, req.Cancel, req.Why)
			if err != nil && !errors.Is(err, replay.ErrNoJob) {
				log.Warn("replay cancel request not applied", slog.String("job", req.Cancel), slog.Any("err", err))
				err = nil // already final: nothing to do
			} else if errors.Is(err, replay.ErrNoJob) {
				log.Warn("replay cancel request for a job this store does not hold", slog.String("job", req.Cancel))
				err = nil
			}
		}
		if err != nil {
			log.Warn("adopt a replay request (retried every replay.poll)", slog.String("file", req.File), slog.Any("err", err))
			continue
		}
		if err := spool.Done(req); err != nil {
			log.Warn("remove an adopted replay request", slog.String("file", req.File), slog.Any("err", err))
		}
	}
}

// openReplay returns what builds a job's run (replay.Runner.Open): its
// target sink, and a binlog reader of its own registering as slot, or the
// source of its kind (ReplaySources).
func (a *assembly) openReplay(log *slog.Logger) func(ctx context.Context, j replay.Job, slot uint32) (replay.Launch, error) {
	return func(ctx context.Context, j replay.Job, slot uint32) (replay.Launch, error) {
		s, match, err := a.r.ReplayTarget(ctx, a.src.db, j)
		if err != nil {
			return replay.Launch{}, err
		}
		name := "replay " + j.ID
		var src pipeline.Source
		// The relay's own checkpoint writes (a MySQL store on the source)
		// are handed on, empty, unlike a live stream's: the window ends at
		// the transaction that reaches Until, which may be one of them. The
		// window is finite, so the job's own saves cannot feed it for ever.
		binlog := func() (pipeline.Source, error) { return a.guardedReader(a.readerConfig(name, slot, nil)) }
		switch j.Source {
		case replay.SourceBinlog:
			src, err = binlog()
		default:
			open, ok := ReplaySources[j.Source]
			if !ok {
				err = fmt.Errorf("replay source %q is not supported by this build", j.Source)
				break
			}
			src, err = open(ctx, ReplaySourceParams{Job: j, DB: a.src.db, ReplicaID: slot, Binlog: binlog, Logger: log.With(slog.String("job", j.ID)),
				Flavor: a.src.info.Flavor, Tables: a.src.tables, Config: a.cfg})
		}
		if err != nil {
			return replay.Launch{}, err
		}
		return replay.Launch{Target: s, Select: match, Source: src, Flavor: a.src.info.Flavor,
			Attrs: []slog.Attr{slog.Uint64("replica_id", uint64(slot))}}, nil
	}
}

// ReplayTarget builds the sink a replay job sends to — a fresh one, from
// the configuration of its target sink, or of its one endpoint of a
// webhook sink (of the configuration, or of the sink's endpoints table,
// read from db) — and the endpoint's filter (nil: every event). An unknown
// sink or endpoint, a webhook sink without an endpoint, or an endpoint of
// another kind of sink, is an error that says what to give.
func (r *Relay) ReplayTarget(ctx context.Context, db *sql.DB, j replay.Job) (sink.Sink, func(*event.Event) bool, error) {
	i := slices.IndexFunc(r.cfg.Sinks, func(s config.Sink) bool { return s.Name == j.Sink })
	if i < 0 {
		var names []string
		for _, s := range r.cfg.Sinks {
			names = append(names, s.Name)
		}
		return nil, nil, fmt.Errorf("sink %q is not in the configuration: use one of %v", j.Sink, names)
	}
	sc := r.cfg.Sinks[i]
	fo, fan := gateway.FanOutFor(sc)
	if !fan {
		if j.Endpoint != "" {
			return nil, nil, fmt.Errorf("sink %q is a %s sink, which has no endpoints: leave out --endpoint", sc.Name, sc.Type)
		}
		ts, err := r.targets(sc)
		if err != nil {
			return nil, nil, err
		}
		return ts[0].Sink, nil, nil
	}
	if j.Endpoint == "" {
		return nil, nil, fmt.Errorf("sink %q is a %s sink: name the endpoint to replay to with --endpoint (or outbox-relay endpoints replay %s/ENDPOINT); one replay sends to one endpoint", sc.Name, sc.Type, sc.Name)
	}
	eps, err := fo.Endpoints(r.fanOutParams(sc, "", nil, nil))
	if err != nil {
		return nil, nil, err
	}
	if t, err := fo.Table(r.fanOutParams(sc, "", nil, nil)); err != nil {
		return nil, nil, err
	} else if t != nil && db != nil {
		// The one row the endpoint is made of, by its primary key.
		row, ok, err := t.Row(ctx, db, j.Endpoint)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			eps = append(eps, t.LoadRows([]map[string]any{row})...)
		}
	}
	for _, e := range eps {
		if e.Key == j.Key() && !e.Held {
			s, err := e.Build()
			return s, e.Filter.Match, err
		}
	}
	return nil, nil, fmt.Errorf("sink %q has no endpoint %q (enabled, in its configuration or endpoints table): outbox-relay status lists them", sc.Name, j.Endpoint)
}

// ReplayTargetVersion reads the target of job j as it is now, for
// replay.Runner.Current: an endpoint of a webhook sink's endpoints table is
// read again from db, and its version is a digest of its row (any change
// of the row, its URL or secrets among them, changes it); a sink, or an
// endpoint of the configuration, never changes while the relay runs ("").
// An endpoint the table no longer makes (its row deleted, disabled, or no
// longer valid) is an error wrapping replay.ErrTargetGone that says which.
// With db nil the table cannot be read: "" and no error.
func (r *Relay) ReplayTargetVersion(ctx context.Context, db *sql.DB, j replay.Job) (string, error) {
	i := slices.IndexFunc(r.cfg.Sinks, func(s config.Sink) bool { return s.Name == j.Sink })
	if i < 0 || j.Endpoint == "" || db == nil {
		return "", nil
	}
	sc := r.cfg.Sinks[i]
	fo, fan := gateway.FanOutFor(sc)
	if !fan {
		return "", nil
	}
	// Quiet: what this reads is the live gateway's to show and log.
	p := r.fanOutParams(sc, "", nil, nil)
	p.States, p.Observer, p.Logger = nil, nil, slog.New(slog.DiscardHandler)
	eps, err := fo.Endpoints(p)
	if err != nil {
		return "", err
	}
	static := false
	for _, e := range eps {
		static = static || e.Key == j.Key()
		if e.Sink != nil { // nil: held (off or invalid), never built
			_ = e.Sink.Close(ctx)
		}
	}
	if static {
		return "", nil
	}
	t, err := fo.Table(p)
	if err != nil || t == nil {
		return "", err
	}
	// The one row the endpoint is made of, by its primary key.
	row, named, err := t.Row(ctx, db, j.Endpoint)
	if err != nil {
		return "", err
	}
	if named {
		found := false
		for _, e := range t.LoadRows([]map[string]any{row}) {
			found = found || e.Key == j.Key() && !e.Held
			if e.Sink != nil {
				_ = e.Sink.Close(ctx)
			}
		}
		if found {
			return rowDigest(row), nil
		}
		return "", fmt.Errorf("%w: endpoint %s is disabled, or its row in %s can no longer be used", replay.ErrTargetGone, j.Key(), t.Name())
	}
	return "", fmt.Errorf("%w: endpoint %s was deleted from %s", replay.ErrTargetGone, j.Key(), t.Name())
}

// rowDigest is a digest of every column of row, in column order: it
// changes when any value does, and shows none of them (secrets).
func rowDigest(row map[string]any) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(row)) {
		fmt.Fprintf(h, "%q=%#v\n", k, row[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}
