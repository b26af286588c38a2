package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outbox-relay/outbox-relay/backfill"
	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/pipeline"
	"github.com/outbox-relay/outbox-relay/replay"
	"github.com/outbox-relay/outbox-relay/sink"
)

// plainSink is a sink with none of its optional abilities (sink.Submitter,
// read-back): Connect, Write and Close only.
type plainSink struct{ sink.Sink }

// BackfillKey is the checkpoint key of sink's backfill of an outbox table
// ("schema.table"): a reserved key (it starts with '/', which no sink name
// holds), so that nothing takes it for a sink's.
func BackfillKey(sink, table string) string { return "/backfill/" + sink + "/" + table }

// backfillFirst runs the backfill of sink i (sinks[i].start.backfill) when
// it needs one, and returns once its live stream may start.
//
// A sink needs one when it has no checkpoint, or when a backfill of it was
// begun and is not done (its keys, BackfillKey, say so). A new backfill
// takes its start P (backfill.Source.Start, one for every outbox table),
// saves each table's backfill checkpoint at P, then the sink's own at P: a
// crash in between resumes both from P, and nothing committed after P is
// lost meanwhile (the binlog keeps it; prune counts the sink's checkpoint).
// Each table is then read to its end by a pipeline of its own, into a sink
// built for it (the live one is not shared: a pipeline closes its sink),
// and the live stream of the sink starts at P once every table is done.
// The backfill's binlog follower registers with the sink's own replica id:
// the sink's stream is not running yet.
func (a *assembly) backfillFirst(ctx context.Context, i int, serverID uint32) error {
	sc := a.cfg.Sinks[i]
	st := sc.Start
	if !st.Backfill {
		return nil
	}
	log := a.r.log.With(slog.String("sink", sc.Name))
	_, liveErr := a.store.Load(ctx, sc.Name)
	if liveErr != nil && !errors.Is(liveErr, checkpoint.ErrNotFound) {
		return liveErr
	}
	var start *event.Position
	var pending []int // indexes in a.src.tables of the tables left to read
	for j, t := range a.src.tables {
		cp, err := a.store.Load(ctx, BackfillKey(sc.Name, t.FullName()))
		switch {
		case errors.Is(err, checkpoint.ErrNotFound):
			pending = append(pending, j)
			continue
		case err != nil:
			return err
		}
		p := cp.Position
		if p.Table == nil || !p.Table.Done {
			pending = append(pending, j)
		}
		p.Table = nil
		start = &p
	}
	if start == nil && liveErr == nil {
		return nil // not a new sink, and no backfill of it was begun
	}
	if len(pending) == 0 {
		return nil // done
	}
	reader, err := a.canalReader(sc.Name+" backfill", serverID, nil)
	if err != nil {
		return err
	}
	source := func(j int) (*backfill.Source, error) {
		t := a.src.tables[j]
		return backfill.New(backfill.Config{DB: a.src.db, Reader: reader, Flavor: a.src.info.Flavor, Schema: t.Schema, Table: t.Name,
			Where: st.Where, Since: st.Since, CreatedAt: backfill.CreatedAt(a.cfg, t), ChunkSize: st.ChunkSize, Logger: log})
	}
	if start == nil {
		src, err := source(pending[0])
		if err != nil {
			return err
		}
		p, err := src.Start(ctx)
		if err != nil {
			return fmt.Errorf("sink %s: backfill: %w", sc.Name, err)
		}
		p.Table = nil
		start = &p
		now := time.Now()
		for _, j := range pending {
			t := a.src.tables[j].FullName()
			cp := a.identity
			cp.Position, cp.UpdatedAt = p, now
			cp.Position.Table = &event.TableCursor{Table: t}
			if err := a.store.Save(ctx, BackfillKey(sc.Name, t), cp); err != nil {
				return fmt.Errorf("sink %s: save the backfill's start: %w", sc.Name, err)
			}
		}
		log.Info("backfill begins: the sink goes live from its start once every outbox table is read", slog.String("start", p.String()))
	}
	if errors.Is(liveErr, checkpoint.ErrNotFound) {
		cp := a.identity
		cp.Position, cp.UpdatedAt = *start, time.Now()
		if err := a.store.Save(ctx, sc.Name, cp); err != nil {
			return fmt.Errorf("sink %s: save the start of its live stream: %w", sc.Name, err)
		}
	}
	for _, j := range pending {
		t := a.src.tables[j].FullName()
		src, err := source(j)
		if err != nil {
			return err
		}
		ts, err := a.r.targets(sc)
		if err != nil {
			return fmt.Errorf("sink %s: build its backfill's sink: %w", sc.Name, err)
		}
		s, err := ts[0].Build()
		if err != nil {
			return fmt.Errorf("sink %s: build its backfill's sink: %w", sc.Name, err)
		}
		from := *start
		from.Table = &event.TableCursor{Table: t}
		// A plain sink: its read-back (Kafka, Redis) finds records by the
		// binlog's GTIDs, which a table's rows have none of.
		p, err := a.newPipeline(BackfillKey(sc.Name, t), a.claiming(sc.Name, plainSink{s}), a.saver, from, a.cfg.Delivery.MaxInFlight, a.cfg.Delivery.MaxInFlightBytes, nil)
		if err != nil {
			return err
		}
		if err := p.Run(ctx, src); err != nil {
			return fmt.Errorf("sink %s: backfill of %s: %w", sc.Name, t, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Info("backfill of a table done", slog.String("table", t))
	}
	return nil
}

func init() { ReplaySources[replay.SourceTable] = openTableReplay }

// openTableReplay is the table source of a replay job (replay.SourceTable:
// the window's start is no longer in the binlog, or it was asked for):
// every outbox table's rows committed before the job's Until (the binlog
// from there is read to drop those committed after it), created at or
// after its Since (and before its UntilTime, when one was asked), meeting
// its Where, one table after the other (backfill.Chain).
func openTableReplay(ctx context.Context, p ReplaySourceParams) (pipeline.Source, error) {
	j := p.Job
	if p.Flavor == "" || p.Config == nil || len(p.Tables) == 0 {
		return nil, errors.New("replay from the outbox table: the relay gave no tables")
	}
	follow, err := p.Binlog()
	if err != nil {
		return nil, err
	}
	mapping, err := canal.New(canal.Config{ServerID: p.ReplicaID, Flavor: p.Flavor, Tables: p.Tables, Logger: p.Logger})
	if err != nil {
		return nil, err
	}
	var chain backfill.Chain
	for _, t := range p.Tables {
		src, err := backfill.New(backfill.Config{DB: p.DB, Reader: mapping, Follow: follow, Until: j.Until, Flavor: p.Flavor,
			Schema: t.Schema, Table: t.Name, Where: j.Where, After: j.Since, Before: untilSecond(j.UntilTime), CreatedAt: backfill.CreatedAt(p.Config, t),
			ChunkSize: backfill.DefaultChunkSize, Logger: p.Logger})
		if err != nil {
			return nil, err
		}
		chain = append(chain, src)
	}
	return chain, nil
}

// untilSecond is the bound "created at or before t's second" (created_at
// columns often have whole seconds); zero stays zero.
func untilSecond(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Truncate(time.Second).Add(time.Second)
}
