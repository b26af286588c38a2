package scaled

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/gateway/kafkasource"
	"github.com/outbox-relay/outbox-relay/pipeline"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/source"
)

// Config configures `outbox-relay gateway`: one replica of a webhook
// sink's gateway whose source is the topics a Kafka sink of the same
// configuration writes (package gateway/kafkasource).
type Config struct {
	// Webhook names the webhook sink (its endpoints, endpoints table and
	// gateway settings); Kafka names the Kafka sink whose topics are read
	// (its brokers, TLS, SASL, envelope).
	Webhook, Kafka string
	// Topics are the topics to read. Default: the Kafka sink's topic, when
	// it is a fixed name (a templated topic needs them listed).
	Topics []string
	// GroupID is the consumer group. Default "outbox-relay-gateway-<Webhook>".
	GroupID string
	// CursorTable is the MySQL table, in checkpoint.dsn's database, of the
	// endpoints' cursors per partition. Default "outbox_gateway_cursors".
	CursorTable string
	// PollEvery is how often each replica reads the endpoints table.
	// Default 5s.
	PollEvery time.Duration
	// StartLatest: a partition the group has no offset for begins at its
	// end. Default: at its first record.
	StartLatest bool
	// MaxRequests caps the webhook requests in flight at once on this
	// replica, over every endpoint and partition (the replica's sockets and
	// memory): its capacity is MaxRequests / endpoint latency deliveries a
	// second. 0: no cap (each endpoint's max_concurrency per partition).
	MaxRequests int
	// Group timeouts (kafkasource.Config); zero: its defaults.
	SessionTimeout, RebalanceTimeout, HeartbeatInterval, CommitEvery time.Duration
}

// Defaults of Config.
const (
	DefaultCursorTable = "outbox_gateway_cursors"
	DefaultTablePoll   = 5 * time.Second
	maxCursorConns     = 8
)

// Check resolves kg against cfg, as Run does, and sets kg's defaults: it
// says what is wrong with them (no such webhook or Kafka sink, templated
// topics not listed, cursors not in MySQL, the Kafka sink's TLS) before
// the assembly starts anything for Run.
func Check(cfg *config.Config, kg *Config) error {
	_, _, _, _, err := check(cfg, kg)
	return err
}

// check is Check, returning what it resolved: kg's webhook sink and its
// fan-out, the Kafka sink's topics and the dialer of its brokers.
func check(cfg *config.Config, kg *Config) (hooks config.Sink, fo gateway.FanOut, topics kafkasource.Topics, dialer *kafkago.Dialer, err error) {
	if hooks, fo, topics, err = resolve(cfg, kg); err != nil {
		return
	}
	if kg.PollEvery <= 0 {
		kg.PollEvery = DefaultTablePoll
	}
	if cfg.Checkpoint.Store != "mysql" {
		err = errors.New("gateway: the replicas share their endpoints' cursors in MySQL: set checkpoint.store: mysql and checkpoint.dsn")
		return
	}
	dialer, err = topics.Dialer()
	return
}

// Run runs one gateway replica of configuration cfg until ctx ends, with
// the parts the relay started for it (its metrics, listener, health, retry
// policy, dead letters, attempts record and replay targets; the caller
// stops them after Run returned).
//
// Endpoints of the configuration run on every partition. Endpoints of the
// endpoints table: each replica reads the table when it is assigned a
// partition and every PollEvery; a change a read finds applies on each of
// the replica's partitions at the first record that partition's stream
// reads after it (the in-relay gateway applies a change exactly at its
// transaction in the binlog; here, records of other partitions, or read
// before the poll, may still be routed by the old row).
func Run(ctx context.Context, cfg *config.Config, kg Config, r Parts) error {
	hooks, fo, topics, dialer, err := check(cfg, &kg)
	if err != nil {
		return err
	}
	if r.Endpoints.Sink != kg.Webhook {
		return fmt.Errorf("gateway: the parts are of sink %q, not of the webhook sink %q the replica serves", r.Endpoints.Sink, kg.Webhook)
	}
	cdb, err := checkpoint.OpenDB(cfg.Checkpoint.DSN.Reveal())
	if err != nil {
		return err
	}
	defer cdb.Close()
	// Every partition's endpoints load and save their cursors here: bound
	// the replica's connections (the saves are group-committed anyway), so
	// that replicas × partitions × endpoints do not exhaust the server's.
	cdb.SetMaxOpenConns(maxCursorConns)
	store, err := checkpoint.OpenMySQL(ctx, cdb, kg.CursorTable, r.Logger)
	if err != nil {
		return err
	}
	defer store.Close()
	// params are what a partition's endpoints are built with: the relay's
	// own for the sink, with the partition's suffix, store and slots.
	params := func(suffix string, store checkpoint.Store, slots chan struct{}) gateway.FanOutParams {
		p := r.Endpoints
		p.Suffix, p.Store, p.Slots = suffix, store, slots
		return p
	}
	name, gc, gm := kg.Webhook, hooks.Config.(config.FanOut).GatewayConfig(), r.Gateways.Sink(kg.Webhook)
	var table *tablePoll
	var polling sync.WaitGroup
	t, err := fo.Table(params("", store, nil))
	if err != nil {
		return err
	}
	var sourceDB *sql.DB // the endpoints table's, when there is one
	if t != nil {
		db, err := source.Open(ctx, cfg.Source)
		if err != nil {
			return err
		}
		defer db.Close()
		sourceDB = db
		table = &tablePoll{table: t, db: db, every: kg.PollEvery, log: r.Logger.With(slog.String("sink", name)), subs: map[chan []event.Change]bool{}}
		if err := table.read(ctx); err != nil {
			return err
		}
		pctx, stop := context.WithCancel(ctx)
		polling.Go(func() { table.run(pctx) })
		defer polling.Wait()
		defer stop()
	}
	saver := checkpoint.NewGroupCommit(store)
	d := cfg.Delivery
	identity := checkpoint.Checkpoint{Flavor: "kafka"}
	var slots chan struct{}
	if kg.MaxRequests > 0 {
		slots = make(chan struct{}, kg.MaxRequests)
	}
	partition := func(ctx context.Context, p kafkasource.Partition) (kafkasource.Setup, error) {
		params := params(p.Suffix, store, slots)
		eps, err := fo.Endpoints(params)
		if err != nil {
			return kafkasource.Setup{}, err
		}
		setup := kafkasource.Setup{}
		if table != nil {
			te, err := fo.Table(params)
			if err != nil {
				return kafkasource.Setup{}, err
			}
			rows, changes, cancel := table.subscribe()
			setup.Changes, setup.Done, setup.Changed = changes, cancel, te.Changed
			eps = append(eps, te.LoadRows(rows)...)
		}
		setup.Gateway = gateway.Config{
			Hub: gateway.HubConfig{Name: name + p.Suffix, QueueTxns: gc.Queue, MaxCatchUp: gc.MaxCatchUp, DetachAfter: gc.DetachAfter, MaxAwake: gc.MaxAwake, Observer: gm},
			// Cursors by exception, per partition: one shared cursor of
			// the partition, and the cursors of the endpoints behind it,
			// written with the pipelines' saves and deletes in one
			// transaction of the cursor table.
			Store: store, SharedKey: gateway.SharedKey(name + p.Suffix), Writer: saver,
			Identity: identity, Endpoints: eps, Logger: r.Logger, Health: r.Health, DisableAfter: gc.DisableAfter,
			Settled: debug.FreeOSMemory, // a burst's pipelines are gone: give their memory back
			NewPipeline: func(key string, s sink.Sink, start event.Position) (*pipeline.Pipeline, error) {
				return pipeline.New(pipeline.Config{
					Name: key, Sink: s, Store: saver, Identity: identity, Start: start, DeadLetters: r.DeadLetters,
					BatchSize: min(d.BatchSize, gc.MaxInFlight), BatchBytes: d.BatchBytes, Linger: d.Linger,
					MaxInFlight: gc.MaxInFlight, MaxInFlightBytes: gc.MaxInFlightBytes,
					CheckpointInterval: cfg.Checkpoint.Interval, Retry: r.Retry,
					DrainTimeout: d.DrainTimeout, Logger: r.Logger, Observer: gm.Endpoint(key),
				})
			},
			Stopped: func(key string, err error) {
				r.Logger.Error("endpoint stopped on a partition; the others go on", slog.String("endpoint", key), slog.Any("err", err))
				gm.Endpoint(key).Stopped(err)
			},
		}
		return setup, nil
	}
	kgm, err := kafkasource.NewMetrics(r.Metrics, name)
	if err != nil {
		return err
	}
	grp, err := kafkasource.New(kafkasource.Config{
		Brokers: topics.Brokers, Dialer: dialer, Topics: kg.Topics, GroupID: kg.GroupID, Decode: topics.Decode,
		StartLatest: kg.StartLatest, Store: store, CommitEvery: kg.CommitEvery,
		SessionTimeout: kg.SessionTimeout, RebalanceTimeout: kg.RebalanceTimeout, HeartbeatInterval: kg.HeartbeatInterval,
		Partition: partition, Observer: kgm, Logger: r.Logger,
	})
	if err != nil {
		return err
	}
	rr, closeReplays, err := newReplays(ctx, cfg, r, replayParts{cursorTable: kg.CursorTable, db: sourceDB,
		window: func(until kafkasource.Offsets) *kafkasource.Window {
			return &kafkasource.Window{Brokers: topics.Brokers, Dialer: dialer, Until: until, Decode: topics.Decode, Logger: r.Logger}
		}})
	if err != nil {
		return err
	}
	defer closeReplays()
	var replaying sync.WaitGroup
	rctx, stopReplays := context.WithCancel(ctx)
	replaying.Go(func() { rr.run(rctx) })
	err = grp.Run(ctx)
	stopReplays()
	replaying.Wait()
	return err
}

// resolve finds kg's webhook and kafka sinks in cfg, and sets kg's
// defaults (Topics, GroupID): what Run and a replay's planning share.
func resolve(cfg *config.Config, kg *Config) (hooks config.Sink, fo gateway.FanOut, topics kafkasource.Topics, err error) {
	var consume kafkasource.Consume
	var kafkaSink config.Sink
	for _, s := range cfg.Sinks {
		switch s.Name {
		case kg.Webhook:
			if f, ok := gateway.FanOutFor(s); ok {
				hooks, fo = s, f
			}
		case kg.Kafka:
			if c, ok := kafkasource.ConsumeFor(s); ok {
				kafkaSink, consume = s, c
			}
		}
	}
	if fo.Endpoints == nil {
		return hooks, fo, topics, fmt.Errorf("gateway: no webhook sink named %q in the configuration; pass --webhook with the name of a sink of type webhook", kg.Webhook)
	}
	if consume == nil {
		return hooks, fo, topics, fmt.Errorf("gateway: no kafka sink named %q in the configuration; pass --kafka with the name of the sink of type kafka whose topics the gateway reads", kg.Kafka)
	}
	if topics, err = consume(kafkaSink.Config); err != nil {
		return hooks, fo, topics, fmt.Errorf("gateway: kafka sink %q %w", kg.Kafka, err)
	}
	if len(kg.Topics) == 0 {
		if topics.Templated {
			return hooks, fo, topics, fmt.Errorf("gateway: kafka sink %q routes to templated topics (%q); list the topics to read with --topic", kg.Kafka, topics.Topic)
		}
		kg.Topics = []string{topics.Topic}
	}
	if kg.GroupID == "" {
		kg.GroupID = "outbox-relay-gateway-" + kg.Webhook
	}
	if kg.CursorTable == "" {
		kg.CursorTable = DefaultCursorTable
	}
	return hooks, fo, topics, nil
}

// tablePoll reads the endpoints table every so often and hands each
// subscriber (a partition's shared stream) the rows that changed since the
// read it began with, as inserts, updates and deletes.
type tablePoll struct {
	table gateway.Table
	db    *sql.DB
	every time.Duration
	log   *slog.Logger

	mu   sync.Mutex
	rows map[string]map[string]any // by id, as last read
	list []map[string]any          // the same, in id order
	subs map[chan []event.Change]bool
}

// read reads the table and sends what changed to every subscriber.
func (tp *tablePoll) read(ctx context.Context) error {
	raw, err := tp.table.Rows(ctx, tp.db)
	if err != nil {
		return err
	}
	now := map[string]map[string]any{}
	for _, row := range raw {
		id, _ := row["id"].(string)
		now[id] = row
	}
	tp.mu.Lock()
	var changes []event.Change
	for id, row := range now {
		old, ok := tp.rows[id]
		switch {
		case !ok:
			changes = append(changes, event.Change{Table: tp.table.Name(), Op: event.Insert, Row: row})
		case !maps.Equal(old, row):
			changes = append(changes, event.Change{Table: tp.table.Name(), Op: event.Update, Row: row})
		}
	}
	for id, old := range tp.rows {
		if _, ok := now[id]; !ok {
			changes = append(changes, event.Change{Table: tp.table.Name(), Op: event.Delete, Row: old})
		}
	}
	first := tp.rows == nil
	tp.rows, tp.list = now, raw
	subs := make([]chan []event.Change, 0, len(tp.subs))
	for c := range tp.subs {
		subs = append(subs, c)
	}
	tp.mu.Unlock()
	if first || len(changes) == 0 {
		return nil
	}
	tp.log.Info("endpoints table changed: applied on each partition at its next record", slog.String("table", tp.table.Name()), slog.Int("rows", len(changes)))
	for _, c := range subs {
		select {
		case c <- changes:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (tp *tablePoll) run(ctx context.Context) {
	for retry.Sleep(ctx, tp.every) == nil {
		if err := tp.read(ctx); err != nil && ctx.Err() == nil {
			tp.log.Warn("read the endpoints table (retried; the endpoints run as last read)", slog.Any("err", err))
		}
	}
}

// subscribe returns the rows as last read and a channel of the changes
// after them; cancel ends the subscription.
func (tp *tablePoll) subscribe() (rows []map[string]any, changes <-chan []event.Change, cancel func()) {
	c := make(chan []event.Change, 16)
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.subs[c] = true
	return tp.list, c, func() {
		tp.mu.Lock()
		delete(tp.subs, c)
		tp.mu.Unlock()
	}
}
