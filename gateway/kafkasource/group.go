package kafkasource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/internal/defaults"
	"github.com/outbox-relay/outbox-relay/internal/every"
	"github.com/outbox-relay/outbox-relay/pipeline"
	"github.com/outbox-relay/outbox-relay/retry"
)

// Defaults of Config.
const (
	DefaultCommitEvery       = 5 * time.Second
	DefaultSessionTimeout    = 30 * time.Second
	DefaultRebalanceTimeout  = 30 * time.Second
	DefaultHeartbeatInterval = 3 * time.Second
)

// Config configures a Group.
type Config struct {
	Brokers []string
	// Dialer carries TLS and SASL. Nil: kafkago.DefaultDialer.
	Dialer *kafkago.Dialer
	// Topics are the topics the relay's Kafka sink writes.
	Topics []string
	// GroupID is the consumer group's id: every replica has the same.
	GroupID string
	// Decode reads back a record's event (Topics.Decode). Required.
	Decode func(kafkago.Message) (*event.Event, error)
	// StartLatest: a partition the group has no committed offset for
	// begins at its end (only later records). False: at its first record.
	StartLatest bool
	// Store holds the endpoints' cursors (and the partitions' shared
	// cursors, Setup.Gateway.SharedKey); it must list them
	// (checkpoint.Lister), as the MySQL store does: the group's committed
	// offset of a partition is its least saved cursor (see the package doc).
	Store checkpoint.Store
	// CommitEvery is how often offsets are committed and the lag gauges
	// computed. Default 5s.
	CommitEvery time.Duration
	// SessionTimeout (default 30s), RebalanceTimeout (30s) and
	// HeartbeatInterval (3s) are the group membership's: a replica that
	// stops heartbeating for SessionTimeout (a crash) loses its partitions;
	// one that leaves (a shutdown) hands them over at once.
	SessionTimeout, RebalanceTimeout, HeartbeatInterval time.Duration
	// Partition returns the setup of a partition this replica was
	// assigned (its endpoints with keys ending in p.Suffix). Called at each
	// assignment, and again when its gateway stopped on an error.
	Partition func(ctx context.Context, p Partition) (Setup, error)
	Observer  Observer
	Logger    *slog.Logger
}

// Partition is one assigned partition.
type Partition struct {
	Topic     string
	Partition int
	// Suffix ends the checkpoint keys of its endpoints (Suffix()).
	Suffix string
	// Start is where an endpoint without a cursor begins when the
	// partition has no shared cursor saved yet (gateway.Config.SharedKey;
	// with one, it begins there): the group's committed offset, else the
	// partition's first (or last) offset.
	Start event.Position
}

// Setup is what runs on a partition.
type Setup struct {
	// Gateway is its gateway's config; the group sets Hub.Open,
	// Hub.Covers and Start.
	Gateway gateway.Config
	// Changed and Changes: row changes of the endpoints table, applied by
	// Changed at the next record boundary of the partition (Source.Changes).
	Changed func(*gateway.Gateway, *event.Txn)
	Changes <-chan []event.Change
	// Done, if set, is called once the partition's gateway has stopped.
	Done func()
}

// Observer receives the group's measurements, for metrics. Methods must
// not block.
type Observer interface {
	// Assigned: the replica took (on) or gave up the partition.
	Assigned(topic string, partition int, on bool)
	// Lag is how many records the partition holds after the last one its
	// shared stream read.
	Lag(topic string, partition int, records int64)
	// Oldest is the age of the oldest record some running endpoint has not
	// acknowledged (saved), zero when none.
	Oldest(topic string, partition int, age time.Duration)
	// Committed is the offset committed for the partition.
	Committed(topic string, partition int, offset int64)
	// Expired counts records of the partition a stream should have read
	// but the topic's retention had deleted (Source.Expired).
	Expired(topic string, partition int, records int64)
}

// Group is one replica of the scaled-out gateway.
type Group struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	parts map[string]*partition // by Suffix
}

type partition struct {
	Partition
	g         *gateway.Gateway // nil until its gateway is built
	committed int64
	// shared is the key of its gateway's shared cursor
	// (gateway.Config.SharedKey), or "": every endpoint has its own.
	shared string
}

// New returns a replica; Run joins the group.
func New(cfg Config) (*Group, error) {
	if cfg.GroupID == "" || len(cfg.Topics) == 0 || len(cfg.Brokers) == 0 || cfg.Decode == nil {
		return nil, errors.New("kafka gateway: brokers, topics, a group id and a decoder are required")
	}
	if _, ok := cfg.Store.(checkpoint.Lister); !ok {
		return nil, errors.New("kafka gateway: the checkpoint store cannot list its cursors; use checkpoint.store: mysql (a store every replica shares)")
	}
	if cfg.Dialer == nil {
		cfg.Dialer = kafkago.DefaultDialer
	}
	defaults.Positive(&cfg.CommitEvery, DefaultCommitEvery)
	defaults.Positive(&cfg.SessionTimeout, DefaultSessionTimeout)
	defaults.Positive(&cfg.RebalanceTimeout, DefaultRebalanceTimeout)
	defaults.Positive(&cfg.HeartbeatInterval, DefaultHeartbeatInterval)
	defaults.Logger(&cfg.Logger)
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	return &Group{cfg: cfg, log: cfg.Logger.With(slog.String("group", cfg.GroupID)), parts: map[string]*partition{}}, nil
}

// Run joins the group and runs the partitions it is assigned, generation
// after generation, until ctx ends; then it stops them (each endpoint
// delivers what it holds, within its drain timeout, and saves its cursor)
// and leaves the group.
func (gr *Group) Run(ctx context.Context) error {
	start := kafkago.FirstOffset
	if gr.cfg.StartLatest {
		start = kafkago.LastOffset
	}
	debug := kafkago.LoggerFunc(func(msg string, args ...any) { gr.log.Debug(fmt.Sprintf(msg, args...)) })
	cg, err := kafkago.NewConsumerGroup(kafkago.ConsumerGroupConfig{
		ID: gr.cfg.GroupID, Brokers: gr.cfg.Brokers, Dialer: gr.cfg.Dialer, Topics: gr.cfg.Topics,
		HeartbeatInterval: gr.cfg.HeartbeatInterval, SessionTimeout: gr.cfg.SessionTimeout,
		RebalanceTimeout: gr.cfg.RebalanceTimeout, JoinGroupBackoff: 500 * time.Millisecond,
		StartOffset: start, Logger: debug, ErrorLogger: debug,
	})
	if err != nil {
		return fmt.Errorf("kafka gateway: join consumer group %q: %w", gr.cfg.GroupID, err)
	}
	defer cg.Close()
	gr.log.Info("kafka gateway joining its consumer group", slog.Any("topics", gr.cfg.Topics))
	for {
		gen, err := cg.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafkago.ErrGroupClosed) {
				// Close ends the generation: it waits for the partitions.
				return nil
			}
			gr.log.Warn("kafka gateway: joining the next generation failed (retried)", slog.Any("err", err))
			if retry.Sleep(ctx, time.Second) != nil {
				return nil
			}
			continue
		}
		n := 0
		for topic, parts := range gen.Assignments {
			for _, pa := range parts {
				n++
				gen.Start(func(gctx context.Context) { gr.runPartition(gctx, topic, pa) })
			}
		}
		gr.log.Info("kafka gateway: partitions assigned", slog.Int("generation", int(gen.ID)), slog.Int("partitions", n))
		gen.Start(func(gctx context.Context) { gr.commitLoop(gctx, gen) })
	}
}

// runPartition runs the gateway of one partition until the generation
// ends; a gateway that stops on an error is built again.
func (gr *Group) runPartition(gctx context.Context, topic string, pa kafkago.PartitionAssignment) {
	// The generation's context ends with kafkago.ErrGenerationEnded, which
	// the pipelines would take for a failure: give them a plain one,
	// cancelled when the generation ends.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer context.AfterFunc(gctx, cancel)()
	log := gr.log.With(slog.String("partition", fmt.Sprintf("%s[%d]", topic, pa.ID)))
	gr.cfg.Observer.Assigned(topic, pa.ID, true)
	defer gr.cfg.Observer.Assigned(topic, pa.ID, false)
	p := &partition{Partition: Partition{Topic: topic, Partition: pa.ID, Suffix: Suffix(topic, pa.ID)}, committed: -1}
	for ctx.Err() == nil {
		err := gr.runOnce(ctx, p, pa.Offset, log)
		if ctx.Err() != nil {
			break
		}
		log.Error("kafka gateway: the partition's gateway stopped; it starts again from its endpoints' cursors", slog.Any("err", err))
		if retry.Sleep(ctx, time.Second) != nil {
			break
		}
	}
	gr.mu.Lock()
	delete(gr.parts, p.Suffix)
	gr.mu.Unlock()
	log.Info("kafka gateway: partition given up: its endpoints' cursors are saved for the next owner")
}

func (gr *Group) runOnce(ctx context.Context, p *partition, committed int64, log *slog.Logger) error {
	start := committed
	if start < 0 {
		var err error
		if start, err = gr.edge(ctx, p.Topic, p.Partition.Partition, start); err != nil {
			return err
		}
	}
	p.Start = Position(p.Topic, p.Partition.Partition, start)
	setup, err := gr.cfg.Partition(ctx, p.Partition)
	if err != nil {
		return err
	}
	if setup.Done != nil {
		defer setup.Done()
	}
	gc := setup.Gateway
	gc.Start = p.Start
	gc.Hub.Covers = Covers
	gc.Hub.Open = func(slot int) pipeline.Source {
		s := &Source{Brokers: gr.cfg.Brokers, Dialer: gr.cfg.Dialer, Topic: p.Topic, Partition: p.Partition.Partition,
			Decode: gr.cfg.Decode, Logger: log, Expired: func(n int64) { gr.cfg.Observer.Expired(p.Topic, p.Partition.Partition, n) }}
		if slot == 0 {
			s.Changes = setup.Changes
			s.Lag = func(n int64) { gr.cfg.Observer.Lag(p.Topic, p.Partition.Partition, n) }
		}
		return s
	}
	g, err := gateway.New(ctx, gc)
	if err != nil {
		return err
	}
	gr.mu.Lock()
	p.g, p.shared = g, gc.SharedKey
	gr.parts[p.Suffix] = p
	gr.mu.Unlock()
	defer func() {
		gr.mu.Lock()
		p.g = nil
		gr.mu.Unlock()
	}()
	log.Info("kafka gateway: partition taken", slog.String("start", p.Start.String()), slog.String("from", g.Hub().Position().String()))
	return g.Run(ctx, setup.Changed)
}

// edge returns the first (kafkago.FirstOffset) or next (LastOffset) offset
// of a partition.
func (gr *Group) edge(ctx context.Context, topic string, part int, which int64) (int64, error) {
	var last error
	for _, b := range gr.cfg.Brokers {
		conn, err := gr.cfg.Dialer.DialLeader(ctx, "tcp", b, topic, part)
		if err != nil {
			last = err
			continue
		}
		var off int64
		if which == kafkago.LastOffset {
			off, err = conn.ReadLastOffset()
		} else {
			off, err = conn.ReadFirstOffset()
		}
		_ = conn.Close()
		if err == nil {
			return off, nil
		}
		last = err
	}
	return 0, fmt.Errorf("read the offsets of kafka %s[%d]: %w", topic, part, last)
}

// commitLoop commits, every CommitEvery until the generation ends, each
// running partition's least saved cursor, and reports the lag gauges.
func (gr *Group) commitLoop(ctx context.Context, gen *kafkago.Generation) {
	client := &kafkago.Client{Addr: kafkago.TCP(gr.cfg.Brokers...), Timeout: 5 * time.Second,
		Transport: &kafkago.Transport{TLS: gr.cfg.Dialer.TLS, SASL: gr.cfg.Dialer.SASLMechanism}}
	every.Tick(ctx.Done(), gr.cfg.CommitEvery, func() bool {
		if err := gr.commit(ctx, gen, client); err != nil && ctx.Err() == nil {
			gr.log.Warn("kafka gateway: committing offsets failed (retried; the endpoints' cursors are saved apart)", slog.Any("err", err))
		}
		return true
	})
}

func (gr *Group) commit(ctx context.Context, gen *kafkago.Generation, client *kafkago.Client) error {
	all, err := gr.cfg.Store.(checkpoint.Lister).List(ctx)
	if err != nil {
		return fmt.Errorf("list the endpoints' cursors: %w", err)
	}
	offsets := map[string]map[int]int64{}
	type todo struct {
		p         *partition
		least, at int64
	}
	var commits []todo
	gr.mu.Lock()
	for _, p := range gr.parts {
		if p.g == nil {
			continue
		}
		_, at, _ := Offset(p.g.Hub().Position())
		_, least, _ := Offset(p.Start)
		if p.shared != "" {
			least = leastByException(p.Partition, p.shared, all, func(key string) bool { return p.g.Tap(key) != nil })
		} else if keys := p.g.Keys(); len(keys) > 0 {
			least = at
			for _, key := range keys {
				pos := p.Start // no cursor saved yet: it began at Start
				if cp, ok := all[key]; ok {
					pos = cp.Position
				}
				if _, off, ok := Offset(pos); ok && off < least {
					least = off
				}
			}
		} else {
			least = max(least, at)
		}
		commits = append(commits, todo{p, least, at})
	}
	gr.mu.Unlock()
	for _, c := range commits {
		age := time.Duration(0)
		if c.least < c.at {
			if t, err := recordTime(ctx, client, c.p.Topic, c.p.Partition.Partition, c.least); err == nil {
				age = max(time.Since(t), 0)
			}
		}
		gr.cfg.Observer.Oldest(c.p.Topic, c.p.Partition.Partition, age)
		if c.least > c.p.committed {
			if offsets[c.p.Topic] == nil {
				offsets[c.p.Topic] = map[int]int64{}
			}
			offsets[c.p.Topic][c.p.Partition.Partition] = c.least
		}
	}
	if len(offsets) == 0 {
		return nil
	}
	if err := gen.CommitOffsets(offsets); err != nil {
		return err
	}
	for _, c := range commits {
		if off, ok := offsets[c.p.Topic][c.p.Partition.Partition]; ok {
			c.p.committed = off
			gr.cfg.Observer.Committed(c.p.Topic, c.p.Partition.Partition, off)
		}
	}
	return nil
}

// leastByException is the offset of the least saved cursor of partition
// p's running endpoints (running says which keys are) when its gateway
// keeps cursors by exception, under the shared cursor shared
// (gateway.Config.SharedKey): that shared cursor (p.Start until it is
// saved), which every endpoint without a cursor of its own has delivered
// up to, or an older own cursor of a running endpoint on p. One pass over
// what the store holds (all: by exception, the cursors that moved), not
// over every endpoint.
func leastByException(p Partition, shared string, all map[string]checkpoint.Checkpoint, running func(key string) bool) int64 {
	_, least, _ := Offset(p.Start)
	if cp, ok := all[shared]; ok {
		if _, off, ok := Offset(cp.Position); ok {
			least = off
		}
	}
	for key, cp := range all {
		if !strings.HasSuffix(key, p.Suffix) || checkpoint.Reserved(key) || !running(key) {
			continue
		}
		if _, off, ok := Offset(cp.Position); ok && off < least {
			least = off
		}
	}
	return least
}

// recordTime returns the timestamp of the record at offset of
// topic[partition] (the first after it when it was compacted away).
func recordTime(ctx context.Context, client *kafkago.Client, topic string, partition int, offset int64) (time.Time, error) {
	res, err := client.Fetch(ctx, &kafkago.FetchRequest{Topic: topic, Partition: partition, Offset: offset,
		MinBytes: 1, MaxBytes: 64 << 10, MaxWait: 100 * time.Millisecond})
	if err == nil {
		err = res.Error
	}
	if err != nil {
		return time.Time{}, err
	}
	for {
		rec, err := res.Records.ReadRecord()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("no record at offset %d", offset)
			}
			return time.Time{}, err
		}
		if rec.Offset >= offset {
			return rec.Time, nil
		}
	}
}

type nopObserver struct{}

func (nopObserver) Assigned(string, int, bool)        {}
func (nopObserver) Lag(string, int, int64)            {}
func (nopObserver) Oldest(string, int, time.Duration) {}
func (nopObserver) Committed(string, int, int64)      {}
func (nopObserver) Expired(string, int, int64)        {}
