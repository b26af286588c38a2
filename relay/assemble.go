package relay

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/pipeline"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/source"
	"github.com/outbox-relay/outbox-relay/switchover"
	"github.com/outbox-relay/outbox-relay/tracing"
)

// sourceConn is the SQL connection to the source Run inspects it with, and
// what it learnt: its flavor and identity, and the outbox tables (checked).
type sourceConn struct {
	db         *sql.DB
	info       source.ServerInfo
	tables     []canal.Table
	tableNames []string
	close      func() // stops the binary-log poll, then closes db
}

// openSource connects to the source, starts polling its binary logs for the
// metrics, reads its flavor and identity, and checks the outbox tables.
func (r *Relay) openSource(ctx context.Context) (*sourceConn, error) {
	db, err := source.Open(ctx, r.cfg.Source)
	if err != nil {
		return nil, err
	}
	pollCtx, stopPolling := context.WithCancel(ctx)
	var polling sync.WaitGroup
	polling.Go(func() { r.pollBinaryLogs(pollCtx, db, r.metrics) })
	s := &sourceConn{db: db, tables: canal.TablesOf(r.cfg.Tables), close: func() {
		stopPolling()
		polling.Wait()
		db.Close()
	}}
	if s.info, err = source.Inspect(ctx, db, r.cfg.Source); err != nil {
		s.close()
		return nil, err
	}
	if err := source.CheckTables(ctx, db, r.cfg.Tables); err != nil {
		s.close()
		return nil, err
	}
	for _, t := range s.tables {
		s.tableNames = append(s.tableNames, t.FullName())
	}
	return s, nil
}

// assembly is what building the streams and gateways shares: the source,
// the checkpoint store (through one group commit), the lock, the dead
// letters, the start, and the group they will run in.
type assembly struct {
	r     *Relay
	cfg   *config.Config
	src   *sourceConn
	lock  *held
	store checkpoint.Store // the store itself: the gateways' endpoint cursors
	// saver is the store behind one group commit: the saves of many
	// pipelines (a gateway's thousands of endpoints) due together are
	// written at once. The lock and fence stay on the store itself.
	saver    checkpoint.Store
	dl       deadletter.Putter
	start    event.Position
	identity checkpoint.Checkpoint
	tracer   *tracing.Tracer // nil: tracing off

	// One server: the reader reads it, and a checkpoint it cannot serve
	// stops the sink at once (canResume). Several: each sink's reader picks
	// among them (source.Set.Pick) at start and on failover, by the same
	// GTID rule.
	servers   *source.Set
	first     config.Addr
	tls       *tls.Config
	canResume func(ctx context.Context, cp checkpoint.Checkpoint) error
	// commits reads when a checkpoint's last transaction committed on the
	// one server (canResume), with a replica id of its own
	// (ResumeCheckReplicaID).
	commits *canal.CommitFinder

	group *group

	// switchOver: the switch-over claim's metrics (switchOverMetrics).
	switchOverOnce sync.Once
	switchOver     *switchover.Metrics
}

func (r *Relay) newAssembly(src *sourceConn, store checkpoint.Store, lock *held, dl deadletter.Putter, start event.Position) (*assembly, error) {
	cfg := r.cfg
	first := cfg.Source.Addrs()[0]
	tc, err := source.TLSConfig(cfg.Source.TLS, first.Host)
	if err != nil {
		return nil, err
	}
	a := &assembly{r: r, cfg: cfg, src: src, lock: lock, store: store, saver: checkpoint.NewGroupCommit(store), dl: dl, start: start,
		identity: checkpoint.Checkpoint{Flavor: src.info.Flavor, ServerUUID: src.info.ServerUUID, ServerID: src.info.ServerID},
		servers:  source.NewSet(cfg.Source, r.log), first: first, tls: tc,
		group: &group{log: r.log, lose: lock.lose},
	}
	if a.servers.Len() == 1 {
		a.canResume = a.checkResume
		a.commits = canal.NewCommitFinder(canal.ScanConfig{Host: first.Host, Port: uint16(first.Port), User: cfg.Source.User,
			Password: cfg.Source.Password.Reveal(), TLS: tc, ServerID: ResumeCheckReplicaID(cfg), Flavor: src.info.Flavor,
			ReadTimeout: cfg.Source.ReadTimeout, Logger: r.log})
	}
	return a, nil
}

func (a *assembly) close() { a.servers.Close() }

// checkResume asks the one source server whether it can serve cp: its
// GTIDs, and, on the MariaDB server whose binlog cp's position was read
// from, the binlog at its File:Pos (its GTID position, and when the
// transaction that ends there committed).
func (a *assembly) checkResume(ctx context.Context, cp checkpoint.Checkpoint) error {
	return source.CheckResumeAt(ctx, a.src.db, a.src.info, cp.Position, cp.CommitTime, a.commits)
}

// ResumeCheckReplicaID is the replica id of the relay's reads of a
// checkpoint's commit time from the binlog (source.CheckResumeAt): the one
// after the replay command's (replayplan.CommandReplicaID), itself after
// `outbox-relay audit`'s.
func ResumeCheckReplicaID(cfg *config.Config) uint32 {
	return cfg.Source.ServerID + uint32(cfg.ReplicaIDs()) + 2
}

// pickFromSet is a reader's Pick among several source servers.
func (a *assembly) pickFromSet(ctx context.Context, pos event.Position) (canal.Endpoint, error) {
	addr, tc, err := a.servers.Pick(ctx, a.src.info.Flavor, pos)
	return canal.Endpoint{Host: addr.Host, Port: uint16(addr.Port), TLS: tc}, err
}

// oneServer is a reader's Pick of the one source server. A checkpoint it
// cannot serve stops the sink before it reads (canResume). Later, a
// server's "purged" (1236) is double-checked against its GTID state before
// the sink stops: a server that still has the position (Dolt answers a dump
// racing a commit with 1236) is read on. The reader's first Pick is the
// start the pipeline has just checked or resolved, so it asks the server
// nothing.
type oneServer struct {
	a       *assembly
	started bool // Pick is called by the reader's goroutine only
}

func (o *oneServer) pick(ctx context.Context, pos event.Position) (canal.Endpoint, error) {
	if o.started {
		if err := o.a.checkResume(ctx, checkpoint.Checkpoint{Position: pos}); err != nil {
			return canal.Endpoint{}, err
		}
	}
	o.started = true
	return canal.Endpoint{Host: o.a.first.Host, Port: uint16(o.a.first.Port), TLS: o.a.tls}, nil
}

// newReader returns the binlog reader of one stream, registering as replica
// serverID, guarded against a replica id in use.
func (a *assembly) newReader(name string, serverID uint32, obs canal.Observer, watch ...canal.Watched) (pipeline.Source, error) {
	rc := a.readerConfig(name, serverID, obs, watch...)
	rc.Own = a.own()
	return a.guardedReader(rc)
}

// canalReader is newReader's reader, unguarded (a backfill's follower:
// package backfill reads with it, beside the sink's own stream).
func (a *assembly) canalReader(name string, serverID uint32, obs canal.Observer, watch ...canal.Watched) (*canal.Reader, error) {
	rc := a.readerConfig(name, serverID, obs, watch...)
	rc.Own = a.own()
	return canal.New(rc)
}

// readerConfig is the configuration of a stream's binlog reader,
// registering as replica serverID (without Own).
func (a *assembly) readerConfig(name string, serverID uint32, obs canal.Observer, watch ...canal.Watched) canal.Config {
	cfg := a.cfg
	pick := a.pickFromSet
	if a.servers.Len() == 1 {
		pick = (&oneServer{a: a}).pick
	}
	return canal.Config{
		Host: a.first.Host, Port: uint16(a.first.Port), User: cfg.Source.User, Password: cfg.Source.Password.Reveal(),
		Pick: pick, FailoverAfter: cfg.Source.FailoverAfter,
		ServerID: serverID, Flavor: a.src.info.Flavor, GTIDMode: a.src.info.GTIDMode, Tables: a.src.tables, Watch: watch, TLS: a.tls,
		HeartbeatPeriod: cfg.Source.Heartbeat, ReadTimeout: cfg.Source.ReadTimeout, Retry: a.r.retry.Within(0, cfg.Source.MaxReconnectBackoff),
		Logger: a.r.log.With(slog.String("sink", name)), Observer: obs,
	}
}

// guardedReader returns the reader of rc, guarded against a replica id in
// use.
func (a *assembly) guardedReader(rc canal.Config) (pipeline.Source, error) {
	reader, err := canal.New(rc)
	if err != nil {
		return nil, err
	}
	return a.r.guardServerID(a.src.db, a.src.info.ServerID, a.lock.tookOver, reader), nil
}

// own lists the tables only the relay writes, for the reader to pass over
// (canal.Config.Own): the MySQL checkpoint store's table, which may be on
// the source server.
func (a *assembly) own() []string {
	if a.cfg.Checkpoint.Store != "mysql" {
		return nil
	}
	if t := checkpoint.QualifiedTable(a.cfg.Checkpoint.DSN.Reveal(), a.cfg.Checkpoint.Table); t != "" {
		return []string{t}
	}
	return nil
}

// newPipeline returns the pipeline of one sink or gateway endpoint.
func (a *assembly) newPipeline(name string, s sink.Sink, saver checkpoint.Store, start event.Position, maxEvents, maxBytes int, obs pipeline.Observer) (*pipeline.Pipeline, error) {
	d := a.cfg.Delivery
	return pipeline.New(pipeline.Config{
		Name: name, Sink: s, Store: saver, Identity: a.identity, Start: start, DeadLetters: a.dl,
		CanResume: a.canResume,
		BatchSize: min(d.BatchSize, maxEvents), BatchBytes: d.BatchBytes, Linger: d.Linger,
		MaxInFlight: maxEvents, MaxInFlightBytes: maxBytes,
		CheckpointInterval: a.cfg.Checkpoint.Interval, CheckpointGap: a.cfg.Checkpoint.MinInterval, Retry: a.r.retry,
		DrainTimeout: d.DrainTimeout, Logger: a.r.log, Observer: obs, Fence: a.lock.fence,
	})
}

// streams builds a stream and a pipeline for each sink that is not a
// webhook sink's endpoint. Sink i's stream registers with the replica id
// config.SinkReplicaIDs gives it, whatever is built first.
func (a *assembly) streams(targets []Target) ([]member, error) {
	m := a.r.metrics
	var out []member
	for _, t := range targets {
		if t.Gateway != "" {
			continue
		}
		i := slices.IndexFunc(a.cfg.Sinks, func(s config.Sink) bool { return s.Name == t.Name })
		if i < 0 {
			return nil, fmt.Errorf("sink %q is not in the configuration", t.Name)
		}
		id, _ := a.cfg.SinkReplicaIDs(i)
		reader, err := a.newReader(t.Name, id, m.Source(t.Name, a.src.tableNames...))
		if err != nil {
			return nil, err
		}
		obs := m.Pipeline(t.Name)
		p, err := a.newPipeline(t.Name, a.claiming(t.Name, t.Sink), a.saver, a.start, a.cfg.Delivery.MaxInFlight, a.cfg.Delivery.MaxInFlightBytes,
			tracing.Observer(a.tracer, a.kindOf(t.Name), t.Name, obs))
		if err != nil {
			return nil, err
		}
		out = append(out, member{name: t.Name, obs: obs, replicaIDs: []uint32{id}, run: func(ctx context.Context) error {
			if err := a.backfillFirst(ctx, i, id); err != nil {
				return err
			}
			return p.Run(ctx, reader)
		}})
	}
	return out, nil
}

// gateways builds, for each fan-out sink (a webhook sink), its gateway:
// its endpoints (from the configuration and its endpoints table), one
// shared stream and its catch-up streams.
func (a *assembly) gateways(ctx context.Context, targets []Target) ([]member, error) {
	byGateway := map[string][]Target{}
	for _, t := range targets {
		if t.Gateway != "" {
			byGateway[t.Gateway] = append(byGateway[t.Gateway], t)
		}
	}
	var out []member
	for i, sc := range a.cfg.Sinks {
		fo, ok := gateway.FanOutFor(sc)
		if !ok {
			continue
		}
		m, err := a.gateway(ctx, i, sc, fo, byGateway[sc.Name])
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// gateway builds the gateway of fan-out sink i (sc, of kind fo). Its shared
// stream and catch-up streams register with the replica ids
// config.SinkReplicaIDs gives sink i.
func (a *assembly) gateway(ctx context.Context, i int, sc config.Sink, fo gateway.FanOut, targets []Target) (member, error) {
	r, cfg := a.r, a.cfg
	name, gc, gm := sc.Name, sc.Config.(config.FanOut).GatewayConfig(), r.gateways.Sink(sc.Name)
	var eps []gateway.Endpoint
	for _, t := range targets {
		eps = append(eps, gateway.Endpoint{Key: t.Name, Sink: t.Sink, Open: t.Open, Filter: t.Filter})
	}
	// Endpoints from a table: read now, then followed on the shared
	// stream (the kind's package has the rule).
	table, err := fo.Table(r.fanOutParams(sc, "", a.store, nil))
	if err != nil {
		return member{}, err
	}
	var watch []canal.Watched
	if table != nil {
		more, err := table.Load(ctx, a.src.db)
		if err != nil {
			return member{}, err
		}
		eps = append(eps, more...)
		schema, tname, _ := strings.Cut(table.Name(), ".")
		watch = []canal.Watched{{Schema: schema, Name: tname}}
	}
	stream, catchUp := cfg.SinkReplicaIDs(i)
	ids := append([]uint32{stream}, catchUp...)
	readers := make([]pipeline.Source, len(ids))
	for slot, id := range ids {
		// The shared stream is the sink's in the source metrics; the
		// catch-up streams come and go, and are counted by state.
		obs, w := canal.Observer(r.metrics.Source(name, a.src.tableNames...)), watch
		if slot > 0 {
			obs, w = nil, nil
		}
		reader, err := a.newReader(name, id, obs, w...)
		if err != nil {
			return member{}, err
		}
		readers[slot] = reader
	}
	saver := checkpoint.NewGroupCommitEvery(a.store, gatewaySaveGap(len(eps)))
	var writer checkpoint.BatchWriter // the shared cursor's writes join the pipelines'
	if _, ok := a.store.(checkpoint.BatchWriter); ok {
		writer = saver
	}
	g, err := gateway.New(ctx, gateway.Config{
		Hub: gateway.HubConfig{Name: name, Flavor: a.src.info.Flavor, Open: func(slot int) pipeline.Source { return readers[slot] },
			QueueTxns: gc.Queue, MaxCatchUp: gc.MaxCatchUp, DetachAfter: gc.DetachAfter, MaxAwake: gc.MaxAwake, Observer: gm},
		Store: a.store, SharedKey: gateway.SharedKey(name), Writer: writer, Start: a.start, Identity: a.identity, Endpoints: eps, Logger: r.log, Health: r.health, DisableAfter: gc.DisableAfter,
		NewPipeline: func(key string, s sink.Sink, start event.Position) (*pipeline.Pipeline, error) {
			return a.newPipeline(key, a.claiming(key, s), saver, start, gc.MaxInFlight, gc.MaxInFlightBytes, tracing.Observer(a.tracer, sc.Type, key, gm.Endpoint(key)))
		},
		Stopped: func(key string, err error) { a.group.stopped(key, gm.Endpoint(key), err) },
		Settled: debug.FreeOSMemory, // a burst's pipelines are gone: give their memory back
	})
	if err != nil {
		return member{}, err
	}
	var changed func(*gateway.Gateway, *event.Txn)
	if table != nil {
		changed = table.Changed
	}
	return member{name: name, obs: gm, replicaIDs: ids, run: func(ctx context.Context) error { return g.Run(ctx, changed) }}, nil
}

// member is one long-lived part of a running relay: a sink's pipeline, or a
// webhook sink's gateway.
type member struct {
	name string
	obs  interface{ Stopped(error) } // told when it stops for good
	// replicaIDs are the ids its binlog streams register with: the
	// stream's, then a gateway's catch-up streams'.
	replicaIDs []uint32
	run        func(ctx context.Context) error
	// aside: it runs beside the others (the replay jobs' runner) and is
	// stopped once every other member has returned, so that a relay whose
	// sinks have all stopped for good returns.
	aside bool
}

// group runs members until each has returned. A member's fatal error (or a
// gateway endpoint's) stops that one only, the others go on: /readyz and
// the logs say which and why. A fenced one means another relay took over:
// lose gives up the lock, which stops every member.
type group struct {
	log  *slog.Logger
	lose func()

	mu       sync.Mutex
	failures []error
}

// stopped records name's fatal error. Safe for concurrent use.
func (g *group) stopped(name string, obs interface{ Stopped(error) }, err error) {
	if err == nil || errors.Is(err, context.Canceled) {
		return
	}
	if errors.Is(err, checkpoint.ErrFenced) {
		g.lose()
		return
	}
	err = fmt.Errorf("sink %s: %w", name, err)
	g.log.Error("sink stopped; the other sinks go on", slog.String("sink", name), slog.Any("err", err))
	if obs != nil {
		obs.Stopped(err)
	}
	g.mu.Lock()
	g.failures = append(g.failures, err)
	g.mu.Unlock()
}

// run runs every member until each has returned (by shutdown, or each by
// its own error), and returns their errors.
func (g *group) run(ctx context.Context, members []member) error {
	asideCtx, stopAside := context.WithCancel(ctx)
	defer stopAside()
	var wg, aside sync.WaitGroup
	for _, m := range members {
		if m.aside {
			aside.Go(func() { g.stopped(m.name, m.obs, m.run(asideCtx)) })
			continue
		}
		wg.Go(func() { g.stopped(m.name, m.obs, m.run(ctx)) })
	}
	wg.Wait()
	stopAside()
	aside.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	return errors.Join(g.failures...)
}

// kindOf returns the type of the sink named name.
func (a *assembly) kindOf(name string) string {
	for _, sc := range a.cfg.Sinks {
		if sc.Name == name {
			return sc.Type
		}
	}
	return ""
}

// gatewaySaveGap is the least time between two checkpoint writes of a
// gateway's endpoints: 50 µs per endpoint, at most 50 ms. A file store
// rewrites every cursor on each write, so its cost per write grows with
// the endpoints; with the gap, a thousand endpoints write at most 20 times
// a second, each endpoint saving once per write at most, instead of back to
// back; one endpoint's saves are as prompt as a plain sink's. What was
// acknowledged waits up to the gap longer to be saved, within the
// endpoint's in-flight limits (gateway.max_in_flight), which bound what a
// crash re-sends.
func gatewaySaveGap(endpoints int) time.Duration {
	return min(time.Duration(endpoints)*50*time.Microsecond, 50*time.Millisecond)
}
