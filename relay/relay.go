// Package relay assembles a running outbox-relay from a Config: it inspects
// the source server, checks the outbox tables, opens the checkpoint and
// dead-letter stores, and runs one pipeline (binlog stream, sink, checkpoint)
// per sink until the context ends. A sink of a fan-out kind (a webhook
// sink) is a gateway (package gateway): one binlog stream shared by a
// pipeline per endpoint, its endpoints from the configuration and from its
// endpoints table, which the kind's package builds and follows on that
// stream (sink.Kind's FanOut, a gateway.FanOut). The relay only assembles
// and runs: it imports no sink kind. Another run loop (the scaled-out
// gateway, package gateway/scaled) is handed finished values: the
// scaled.Parts that RunGateway starts (the relay's metrics, health,
// retry policy, endpoint parameters, dead letters and attempts record),
// with the relay as its replay targets.
//
// Beside the live pipelines it runs the replay jobs of its checkpoint store
// (relay/replay.go, package replay): each a pipeline of its own, with its
// own binlog stream on one of the replay slots' replica ids
// (config.ReplayReplicaIDs), its own sink built from the target's
// configuration and its own in-flight limit, so a replay never stops or
// slows the live stream; a failed replay fails its job only.
//
// What it assembles is each part's own package's: the switch-over's claim
// (package switchover), the scheduled prune (prune.Scheduled), the audit's
// reader (audit.Reader), the reader's tables (canal.TablesOf). relay keeps
// the order of the steps, the members and their lifetimes; the replay
// planner of `outbox-relay replay` and of the console is package
// relay/replayplan's, handed the relay's targets (NewReplayPlanner).
//
// With console.listen set it also serves the gateway's console (package
// console, relay/console.go) on a listener of its own: the endpoints,
// their attempts and dead letters, writes to the endpoints tables, and
// resends and recoveries as replay jobs of its store. Without it nothing
// of the console is opened.
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
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/internal/defaults"
	"github.com/outbox-relay/outbox-relay/metrics"
	"github.com/outbox-relay/outbox-relay/prune"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/source"
	"github.com/outbox-relay/outbox-relay/switchover"
	"github.com/outbox-relay/outbox-relay/tracing"
)

// Target is one pipeline's sink under its checkpoint name.
type Target struct {
	Name string
	// Sink is the target's sink; a gateway endpoint's may instead be
	// built by Open when it wakes (Build builds either).
	Sink sink.Sink
	Open func() (sink.Sink, error)
	// Gateway is the webhook sink an endpoint belongs to: the endpoints of
	// one webhook sink share its binlog stream (package gateway). Empty for
	// the other sinks.
	Gateway string
	// Filter selects a gateway endpoint's events.
	Filter gateway.Filter
}

// Build returns t's sink: Sink, or one Open builds (the caller closes it).
func (t Target) Build() (sink.Sink, error) {
	return gateway.Endpoint{Key: t.Name, Sink: t.Sink, Open: t.Open}.Build()
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
	// Reload, when not nil, asks the running relay to apply what changes
	// without a restart, today the console's tokens (console.tokens): at
	// each value received, ReadConfig reads the configuration again and
	// the console's tokens become its. A configuration that does not load
	// changes nothing. outbox-relay run delivers SIGHUP here.
	Reload <-chan os.Signal
	// ReadConfig reads the configuration again, for Reload.
	ReadConfig func() (*config.Config, error)
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
	// gateways are the fan-out sinks' metrics, on metrics (set with it).
	gateways *gateway.Metrics
	health   *gateway.Health // every webhook endpoint's run of failures
	// retry is the one retry policy (retry.FromConfig), built here and
	// passed down to every pipeline, sink, reader and webhook endpoint.
	retry retry.Policy
	// attempts is the attempts record, nil unless attempts.enabled.
	attempts *attemptsRecord
}

// New returns a relay for cfg. It does not connect yet.
func New(cfg *config.Config, opts Options) *Relay {
	defaults.Logger(&opts.Logger)
	r := &Relay{cfg: cfg, opts: opts, log: opts.Logger, health: gateway.NewHealth(), retry: retry.FromConfig(cfg.Delivery)}
	if cfg.Attempts.Enabled {
		r.attempts = &attemptsRecord{}
	}
	return r
}

// Targets builds every configured sink (one target per webhook endpoint).
func (r *Relay) Targets() ([]Target, error) {
	var out []Target
	for i, s := range r.cfg.Sinks {
		ts, err := r.targets(s)
		if err != nil {
			return nil, fmt.Errorf("sinks[%d] (%s): %w", i, s.Name, err)
		}
		out = append(out, ts...)
	}
	return out, nil
}

// Run runs every pipeline until ctx ends or one fails for good, in these
// steps: serve the metrics, build the sinks, open the source, open the
// checkpoint store and take its lock (a standby waits there), resolve the
// start, open the dead letters, build a stream per sink and a gateway per
// webhook sink (all before any runs, so a bad one leaves none running), and
// run them as a group, with the replay jobs' runner (relay/replay.go).
func (r *Relay) Run(ctx context.Context) error {
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
	src, err := r.openSource(ctx)
	if err != nil {
		return err
	}
	defer src.close()
	if err := switchover.Check(ctx, src.db, r.cfg); err != nil {
		return err
	}
	store, closeStore, err := checkpoint.Open(ctx, r.cfg, r.log)
	if err != nil {
		return err
	}
	defer closeStore()
	defer store.Close()
	ctx, lock, err := r.holdLock(ctx, store)
	if lock == nil {
		return err // nil: ctx ended while this relay waited as a standby
	}
	defer lock.release()
	closeAttempts, err := r.openAttempts(ctx)
	if err != nil {
		return err
	}
	defer closeAttempts() // after the pipelines (a.close): what they recorded is stored
	start, err := source.StartPosition(ctx, src.db, r.cfg, src.info)
	if err != nil {
		return fmt.Errorf("resolve checkpoint.start %q: %w", r.cfg.Checkpoint.Start, err)
	}
	dl, closeDL, err := r.openDeadLetters(ctx)
	if err != nil {
		return err
	}
	defer closeDL()
	r.log.Info("source ready", slog.String("flavor", src.info.Flavor), slog.String("version", src.info.Version),
		slog.Uint64("server_id", uint64(src.info.ServerID)), slog.Int("pipelines", len(targets)))
	tracer, err := r.openTracer(ctx)
	if err != nil {
		return err
	}
	defer r.closeTracer(ctx, tracer)
	a, err := r.newAssembly(src, store, lock, dl, start)
	if err != nil {
		return err
	}
	a.tracer = tracer
	defer a.close()
	streams, err := a.streams(targets)
	if err != nil {
		return err
	}
	gateways, err := a.gateways(ctx, targets)
	if err != nil {
		return err
	}
	replays, err := a.replays()
	if err != nil {
		return err
	}
	members := append(append(streams, gateways...), replays)
	if con, on, err := a.console(r.Attempts()); err != nil {
		return err
	} else if on {
		members = append(members, con)
	}
	return r.runGroup(ctx, a.group, store, members)
}

// runGroup runs every member until each has returned, and prunes on
// schedule meanwhile: only here, holding the checkpoint lock (a standby
// never gets here), and stopped before the lock is released.
func (r *Relay) runGroup(ctx context.Context, g *group, store checkpoint.Store, members []member) error {
	pruneCtx, stopPrune := context.WithCancel(ctx)
	var pruning sync.WaitGroup
	if r.cfg.Prune.Schedule > 0 {
		pruning.Go(func() { prune.Scheduled(pruneCtx, r.cfg, store, r.metrics, r.log) })
	}
	defer pruning.Wait()
	defer stopPrune()
	err := g.run(ctx, members)
	if errors.Is(context.Cause(ctx), errLockLost) {
		err = errors.Join(err, errLockLost)
	}
	return err
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
	gm, err := gateway.NewMetrics(m)
	if err != nil {
		m.Unregister()
		return nil, nil, err
	}
	r.gateways = gm
	if r.attempts != nil {
		m.Handle("GET /attempts", attempts.Handler(r.attempts.store))
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
		files, err := source.BinaryLogs(qctx, db)
		cancel()
		switch {
		case err == nil:
			m.SetBinaryLogs(source.FileNames(files))
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

// openTracer starts the relay's own spans when tracing.enabled is set; nil
// (tracing off) leaves every pipeline's observer as it is.
func (r *Relay) openTracer(ctx context.Context) (*tracing.Tracer, error) {
	if !r.cfg.Tracing.Enabled {
		return nil, nil
	}
	return tracing.New(ctx, r.log)
}

// closeTracer exports the spans still buffered, for at most 5 s.
func (r *Relay) closeTracer(ctx context.Context, t *tracing.Tracer) {
	if t == nil {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(sctx); err != nil {
		r.log.Warn("tracing: the last spans could not be exported", slog.Any("err", err))
	}
}
