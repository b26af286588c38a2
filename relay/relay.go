// Package relay assembles a running outbox-relay from a Config: it inspects
// the source server, checks the outbox tables, opens the checkpoint and
// dead-letter stores, and runs one pipeline (binlog stream, sink, checkpoint)
// per sink until the context ends. A webhook sink is a gateway (package
// gateway): one binlog stream shared by a pipeline per endpoint, its
// endpoints from the configuration and from its endpoints table, which it
// follows on that stream (endpoints.go).
//
// A failure of one pipeline that cannot be retried (a lost binlog position, a
// permanent failure with no dead-letter store) stops that pipeline only, after
// it saved its checkpoint: the other sinks go on, and /readyz and the logs name
// the stopped one. Run returns, with every such error, once all pipelines have
// ended. Failures that can be retried (a sink down, the server restarting)
// never stop a pipeline.
package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/metrics"
	"github.com/outbox-relay/outbox-relay/pipeline"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
	"github.com/outbox-relay/outbox-relay/source"
)

// Target is one pipeline's sink under its checkpoint name.
type Target struct {
	Name string
	Sink sink.Sink
	// Gateway is the webhook sink an endpoint belongs to: the endpoints of
	// one webhook sink share its binlog stream (package gateway). Empty for
	// the other sinks.
	Gateway string
	// Filter selects a gateway endpoint's events.
	Filter gateway.Filter
}

// Options are what the caller injects.
type Options struct {
	Logger *slog.Logger
	// Stdout is where stdout sinks write. Default os.Stdout.
	Stdout interface{ Write([]byte) (int, error) }
	// Registerer receives the relay's metrics. Default: a registry of the
	// relay's own, with the Go and process collectors.
	Registerer prometheus.Registerer
	// Gatherer is what http.listen serves on /metrics. Default: Registerer,
	// when it is also a Gatherer (a *prometheus.Registry is).
	Gatherer prometheus.Gatherer
	// Version is reported by outbox_relay_build_info. Default: the main
	// module's version from the build info, or "dev".
	Version string
	// ReadyCheckpointAge is how long a sink (not a webhook sink) with events
	// in flight may go without a checkpoint save before /readyz reports it.
	// Default metrics.DefaultReadyCheckpointAge (2 minutes).
	ReadyCheckpointAge time.Duration
}

// Relay is a configured relay, ready to Run.
type Relay struct {
	cfg     *config.Config
	opts    Options
	log     *slog.Logger
	metrics *metrics.Metrics // set by Run; nil for Targets used alone (dlq replay)
	health  *gateway.Health  // every webhook endpoint's run of failures
}

// New returns a relay for cfg. It does not connect yet.
func New(cfg *config.Config, opts Options) *Relay {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Relay{cfg: cfg, opts: opts, log: opts.Logger, health: gateway.NewHealth()}
}

// Tables converts the configured outbox tables.
func Tables(cfg *config.Config) []canal.Table {
	var out []canal.Table
	for _, t := range cfg.Tables {
		schema, name := t.SchemaTable()
		out = append(out, canal.Table{Schema: schema, Name: name, Headers: t.Headers, Columns: canal.Columns{
			ID:            config.Column(t.Columns.ID),
			AggregateType: config.Column(t.Columns.AggregateType),
			AggregateID:   config.Column(t.Columns.AggregateID),
			Type:          config.Column(t.Columns.Type),
			Payload:       config.Column(t.Columns.Payload),
		}})
	}
	return out
}

// OpenStore opens the configured checkpoint store.
func OpenStore(ctx context.Context, cfg *config.Config) (checkpoint.Store, func(), error) {
	return openStore(ctx, cfg, false)
}

// OpenStoreReadOnly opens the configured checkpoint store for reading only
// (status): it creates no table, file or directory, and a missing one reads
// as no checkpoints.
func OpenStoreReadOnly(ctx context.Context, cfg *config.Config) (checkpoint.Store, func(), error) {
	return openStore(ctx, cfg, true)
}

func openStore(ctx context.Context, cfg *config.Config, readOnly bool) (checkpoint.Store, func(), error) {
	switch cfg.Checkpoint.Store {
	case "mysql":
		db, err := checkpoint.OpenDB(cfg.Checkpoint.DSN.Reveal())
		if err != nil {
			return nil, nil, err
		}
		var st *checkpoint.MySQL
		if readOnly {
			st, err = checkpoint.OpenMySQLReadOnly(db, cfg.Checkpoint.Table)
		} else {
			st, err = checkpoint.OpenMySQL(ctx, db, cfg.Checkpoint.Table)
		}
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		st.LockTimeout = cfg.Checkpoint.LockTimeout
		return st, func() { db.Close() }, nil
	default:
		open := checkpoint.OpenFile
		if readOnly {
			open = checkpoint.OpenFileReadOnly
		}
		st, err := open(cfg.Checkpoint.Path)
		if err != nil {
			return nil, nil, err
		}
		return st, func() {}, nil
	}
}

// StartPosition resolves checkpoint.start against the server.
func StartPosition(ctx context.Context, db *sql.DB, cfg *config.Config, info canal.ServerInfo) (event.Position, error) {
	if g, _ := cfg.StartGTID(); g != "" {
		return event.Position{GTIDSet: g}, nil
	}
	if cfg.Checkpoint.Start == "earliest" {
		return canal.EarliestPosition(ctx, db, info)
	}
	return canal.CurrentPosition(ctx, db, info)
}

// Targets builds every configured sink (one target per webhook endpoint).
func (r *Relay) Targets() ([]Target, error) {
	var out []Target
	for i, s := range r.cfg.Sinks {
		build := builders[s.Type]
		if build == nil {
			return nil, fmt.Errorf("sinks[%d].type: %q is not supported by this build", i, s.Type)
		}
		ts, err := build(s, r)
		if err != nil {
			return nil, fmt.Errorf("sinks[%d] (%s): %w", i, s.Name, err)
		}
		out = append(out, ts...)
	}
	return out, nil
}

// Run runs every pipeline until ctx ends or one fails for good.
func (r *Relay) Run(ctx context.Context) error {
	cfg := r.cfg
	m, stopMetrics, err := r.startMetrics()
	if err != nil {
		return err
	}
	defer stopMetrics()
	r.metrics = m
	targets, err := r.Targets()
	if err != nil {
		return err
	}
	db, err := source.Open(ctx, cfg.Source)
	if err != nil {
		return err
	}
	defer db.Close()
	pollCtx, stopPolling := context.WithCancel(ctx)
	var polling sync.WaitGroup
	polling.Go(func() { r.pollBinaryLogs(pollCtx, db, m) })
	defer polling.Wait()
	defer stopPolling()
	info, err := source.Inspect(ctx, db, cfg.Source)
	if err != nil {
		return err
	}
	tables := Tables(cfg)
	if err := canal.CheckTables(ctx, db, tables); err != nil {
		return err
	}
	var tableNames []string
	for _, t := range tables {
		tableNames = append(tableNames, t.FullName())
	}
	store, closeStore, err := OpenStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeStore()
	defer store.Close()
	lock, err := r.holdLock(ctx, store)
	if lock == nil {
		return err // nil: ctx ended while this relay waited as a standby
	}
	defer lock.release()
	ctx = lock.ctx
	start, err := StartPosition(ctx, db, cfg, info)
	if err != nil {
		return fmt.Errorf("resolve checkpoint.start %q: %w", cfg.Checkpoint.Start, err)
	}
	dl, closeDL, err := r.openDeadLetters(ctx)
	if err != nil {
		return err
	}
	defer closeDL()
	r.log.Info("source ready", slog.String("flavor", info.Flavor), slog.String("version", info.Version),
		slog.Uint64("server_id", uint64(info.ServerID)), slog.Int("pipelines", len(targets)))

	identity := checkpoint.Checkpoint{Flavor: info.Flavor, ServerUUID: info.ServerUUID, ServerID: info.ServerID}
	// One server: the reader reads it, and a checkpoint it cannot serve
	// stops the sink at once. Several: each sink's reader picks among them
	// (source.Set.Pick) at start and on failover, by the same GTID rule.
	srcs := source.NewSet(cfg.Source, r.log)
	defer srcs.Close()
	first := cfg.Source.Addrs()[0]
	tlsConfig, err := cfg.Source.TLS.Build(first.Host)
	if err != nil {
		return err
	}
	// One server: a checkpoint it cannot serve stops the sink before it
	// reads (CanResume). Later, a server's "purged" (1236) is double-checked
	// against its GTID state before the sink stops: a server that still has
	// the position (Dolt answers a dump racing a commit with 1236) is read
	// on. The reader's first Pick is the start the pipeline has just checked
	// or resolved, so it asks the server nothing.
	canResume := func(ctx context.Context, pos event.Position) error { return canal.CheckResume(ctx, db, info, pos) }
	newPick := func() func(context.Context, event.Position) (canal.Endpoint, error) {
		started := false
		return func(ctx context.Context, pos event.Position) (canal.Endpoint, error) {
			if started {
				if err := canal.CheckResume(ctx, db, info, pos); err != nil {
					return canal.Endpoint{}, err
				}
			}
			started = true
			return canal.Endpoint{Host: first.Host, Port: uint16(first.Port), TLS: tlsConfig}, nil
		}
	}
	if srcs.Len() > 1 {
		newPick = func() func(context.Context, event.Position) (canal.Endpoint, error) {
			return func(ctx context.Context, pos event.Position) (canal.Endpoint, error) {
				return srcs.Pick(ctx, info.Flavor, pos)
			}
		}
		canResume = nil
	}
	// Build every pipeline before starting any, so a bad one leaves none
	// running. Stream i (sink i, or webhook sink i's shared stream)
	// registers with replica id source.server_id+i; the webhook sinks'
	// catch-up streams take the ids after those (config.ReplicaIDs).
	newReader := func(name string, serverID uint32, obs canal.Observer, watch ...canal.Watched) (*canal.Reader, error) {
		return canal.New(canal.Config{
			Host: first.Host, Port: uint16(first.Port), User: cfg.Source.User, Password: cfg.Source.Password.Reveal(),
			Pick: newPick(), FailoverAfter: cfg.Source.FailoverAfter,
			ServerID: serverID, Flavor: info.Flavor, GTIDMode: info.GTIDMode, Tables: tables, Watch: watch, TLS: tlsConfig,
			HeartbeatPeriod: cfg.Source.Heartbeat, ReadTimeout: cfg.Source.ReadTimeout, MaxBackoff: cfg.Source.MaxReconnectBackoff,
			Logger: r.log.With(slog.String("sink", name)), Observer: obs,
		})
	}
	// Pipelines save through one group commit: the saves of many pipelines
	// (a gateway's thousands of endpoints) due together are written at once.
	// The lock and fence stay on the store itself.
	saver := checkpoint.NewGroupCommit(store)
	newPipeline := func(name string, s sink.Sink, start event.Position, maxEvents, maxBytes int, obs pipeline.Observer) (*pipeline.Pipeline, error) {
		d := cfg.Delivery
		p, err := pipeline.New(pipeline.Config{
			Name: name, Sink: s, Store: saver, Identity: identity, Start: start, DeadLetters: dl,
			CanResume: canResume,
			BatchSize: min(d.BatchSize, maxEvents), BatchBytes: d.BatchBytes, Linger: d.Linger,
			MaxInFlight: maxEvents, MaxInFlightBytes: maxBytes,
			CheckpointInterval: cfg.Checkpoint.Interval, CheckpointGap: cfg.Checkpoint.MinInterval, Retry: retry.Policy{Initial: d.RetryBackoff, Max: d.MaxRetryBackoff},
			DrainTimeout: d.DrainTimeout, Logger: r.log, Observer: obs, Fence: lock.fence,
		})
		return p, err
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []error
	)
	// stopped records one sink's (or endpoint's) fatal error: it stops that
	// one only, the others go on. /readyz and the logs say which and why.
	// A fenced one means another relay took over: every pipeline stops.
	stopped := func(name string, obs interface{ Stopped(error) }, err error) {
		if err == nil || errors.Is(err, context.Canceled) {
			return
		}
		if errors.Is(err, checkpoint.ErrFenced) {
			lock.lose()
			return
		}
		err = fmt.Errorf("sink %s: %w", name, err)
		r.log.Error("sink stopped; the other sinks go on", slog.String("sink", name), slog.Any("err", err))
		if obs != nil {
			obs.Stopped(err)
		}
		mu.Lock()
		failures = append(failures, err)
		mu.Unlock()
	}
	var runs []func()
	var stream uint32 // the next stream's replica id offset
	catchUpID := cfg.Source.ServerID + uint32(len(cfg.Sinks))
	gateways := map[string][]Target{}
	for _, t := range targets {
		if t.Gateway != "" {
			gateways[t.Gateway] = append(gateways[t.Gateway], t)
			continue
		}
		reader, err := newReader(t.Name, cfg.Source.ServerID+stream, m.Source(t.Name, tableNames...))
		if err != nil {
			return err
		}
		stream++
		obs := m.Pipeline(t.Name)
		p, err := newPipeline(t.Name, t.Sink, start, cfg.Delivery.MaxInFlight, cfg.Delivery.MaxInFlightBytes, obs)
		if err != nil {
			return err
		}
		src := r.guardServerID(db, info.ServerID, lock.tookOver, reader)
		runs = append(runs, func() { stopped(t.Name, obs, p.Run(ctx, src)) })
	}
	for _, sc := range cfg.Sinks {
		if sc.Type != "webhook" || sc.Webhook == nil {
			continue
		}
		name, gc, gm := sc.Name, sc.Webhook.Gateway, m.Gateway(sc.Name)
		var eps []gateway.Endpoint
		var static []string
		for _, t := range gateways[name] {
			eps = append(eps, gateway.Endpoint{Key: t.Name, Sink: t.Sink, Filter: t.Filter})
			static = append(static, t.Name)
		}
		// Endpoints from a table: read now, then followed on the shared
		// stream (relay/endpoints.go has the rule).
		var table *tableEndpoints
		var watch []canal.Watched
		if tc := sc.Webhook.EndpointsTable; tc != nil {
			tc := tc.WithDefaults()
			tc.Logger = r.log
			table = newTableEndpoints(name, tc, static)
			table.store, table.health, table.states, table.log = store, r.health, gm, r.log.With(slog.String("sink", name))
			table.build = func(ec webhook.EndpointConfig) (gateway.Endpoint, error) { return r.gatewayEndpoint(name, ec) }
			more, err := table.load(ctx, db)
			if err != nil {
				return err
			}
			eps = append(eps, more...)
			schema, tname, _ := strings.Cut(tc.Table, ".")
			watch = []canal.Watched{{Schema: schema, Name: tname}}
		}
		readers := make([]pipeline.Source, gc.MaxCatchUp+1)
		for slot := range readers {
			// The shared stream is the sink's in the source metrics; the
			// catch-up streams come and go, and are counted by state.
			id, obs := cfg.Source.ServerID+stream, canal.Observer(m.Source(name, tableNames...))
			if slot > 0 {
				id, obs = catchUpID, nil
				catchUpID++
			}
			var w []canal.Watched
			if slot == 0 {
				w = watch
			}
			reader, err := newReader(name, id, obs, w...)
			if err != nil {
				return err
			}
			readers[slot] = r.guardServerID(db, info.ServerID, lock.tookOver, reader)
		}
		stream++
		g, err := gateway.New(ctx, gateway.Config{
			Hub: gateway.HubConfig{Name: name, Flavor: info.Flavor, Open: func(slot int) pipeline.Source { return readers[slot] },
				QueueTxns: gc.Queue, MaxCatchUp: gc.MaxCatchUp, DetachAfter: gc.DetachAfter, Observer: gm},
			Store: store, Start: start, Endpoints: eps, Logger: r.log, Health: r.health, DisableAfter: gc.DisableAfter,
			NewPipeline: func(key string, s sink.Sink, start event.Position) (*pipeline.Pipeline, error) {
				return newPipeline(key, s, start, gc.MaxInFlight, gc.MaxInFlightBytes, gm.Endpoint(key))
			},
			Stopped: func(key string, err error) { stopped(key, gm.Endpoint(key), err) },
		})
		if err != nil {
			return err
		}
		var changed func(*gateway.Gateway, *event.Txn)
		if table != nil {
			changed = table.changed
		}
		runs = append(runs, func() { stopped(name, gm, g.Run(ctx, changed)) })
	}
	// Prune on schedule only here, holding the checkpoint lock: a standby
	// never reaches this point. It stops before the lock is released.
	pruneCtx, stopPrune := context.WithCancel(ctx)
	var pruning sync.WaitGroup
	if cfg.Prune.Schedule > 0 {
		pruning.Go(func() { r.pruneLoop(pruneCtx, store) })
	}
	defer pruning.Wait()
	defer stopPrune()
	for _, run := range runs {
		wg.Go(run)
	}
	wg.Wait()
	if errors.Is(context.Cause(ctx), errLockLost) {
		failures = append(failures, errLockLost)
	}
	// Every pipeline has ended: by shutdown, or each by its own error.
	return errors.Join(failures...)
}

// startMetrics registers the relay's metrics and, when http.listen is set,
// serves /metrics, /healthz and /readyz until the returned stop is called.
func (r *Relay) startMetrics() (*metrics.Metrics, func(), error) {
	reg, gather := r.opts.Registerer, r.opts.Gatherer
	if reg == nil {
		own := prometheus.NewRegistry()
		own.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg, gather = own, own
	}
	if g, ok := reg.(prometheus.Gatherer); ok && gather == nil {
		gather = g
	}
	version := r.opts.Version
	if bi, ok := debug.ReadBuildInfo(); ok && version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		version = bi.Main.Version
	}
	if version == "" {
		version = "dev"
	}
	m, err := metrics.New(reg, version)
	if err != nil {
		return nil, nil, err
	}
	if r.cfg.HTTP.Listen == "" {
		return m, m.Unregister, nil
	}
	if gather == nil {
		m.Unregister()
		return nil, nil, errors.New("relay: Options.Gatherer is required when Options.Registerer is not a prometheus.Gatherer")
	}
	h := metrics.Handler(m, gather, r.opts.ReadyCheckpointAge)
	if r.cfg.HTTP.PProf {
		h = metrics.WithPprof(h) // /debug/pprof/ beside them
	}
	srv, err := r.listen(h)
	if err != nil {
		m.Unregister()
		return nil, nil, err
	}
	return m, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			r.log.Warn("http listener shutdown", slog.Any("err", err))
		}
		m.Unregister()
	}, nil
}

// binaryLogsPoll is how often SHOW BINARY LOGS is read for the checkpoint
// purge-margin gauges: one cheap statement per relay, not per sink.
const binaryLogsPoll = 30 * time.Second

// pollBinaryLogs keeps m's view of the source's binary logs fresh until ctx ends.
func (r *Relay) pollBinaryLogs(ctx context.Context, db *sql.DB, m *metrics.Metrics) {
	failing := false
	for {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		files, err := canal.BinaryLogs(qctx, db)
		cancel()
		switch {
		case err == nil:
			m.SetBinaryLogs(canal.FileNames(files))
			failing = false
		case ctx.Err() == nil && !failing:
			r.log.Warn("list binary logs for metrics (retried)", slog.Any("err", err))
			failing = true
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(binaryLogsPoll):
		}
	}
}
