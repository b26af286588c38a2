package replayplan

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/audit"
	"github.com/outbox-relay/outbox-relay/backfill"
	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/position"
	"github.com/outbox-relay/outbox-relay/replay"
	"github.com/outbox-relay/outbox-relay/replay/binlog"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/source"
)

// Targets builds the sink a replay job sends to, as the relay would
// (relay.Relay is one): a fresh one, from the configuration of its target
// sink or endpoint (of the configuration, or of the sink's endpoints table,
// read from db), and the endpoint's filter (nil: every event). An unknown
// target is an error that says what to give.
type Targets interface {
	ReplayTarget(ctx context.Context, db *sql.DB, j replay.Job) (sink.Sink, func(*event.Event) bool, error)
}

// Params are what a Planner is built with.
type Params struct {
	Config *config.Config
	Logger *slog.Logger
	// Targets checks a job's target and gives its filter.
	Targets Targets
	// TableSource: this build replays from the outbox table
	// (replay.SourceTable), and a window the binlog no longer holds falls
	// back to it.
	TableSource bool
}

// Planner resolves asked replays against the source server: the command's
// (and the console's) side of a replay. Close it when done.
type Planner struct {
	p    Params
	db   *sql.DB
	info source.ServerInfo
	own  bool // db is the planner's: Close closes it
	// Scanned is how many binlog files the last Plan read to find a time.
	Scanned int
}

// Open connects to the source server and inspects it.
func Open(ctx context.Context, p Params) (*Planner, error) {
	db, err := source.Open(ctx, p.Config.Source)
	if err != nil {
		return nil, err
	}
	info, err := source.Inspect(ctx, db, p.Config.Source)
	if err != nil {
		db.Close()
		return nil, err
	}
	pl := New(p, db, info)
	pl.own = true
	return pl, nil
}

// New returns a planner over a connection to the source server that the
// caller keeps (the running relay's, for the console), inspected as info.
func New(p Params, db *sql.DB, info source.ServerInfo) *Planner {
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	return &Planner{p: p, db: db, info: info}
}

// Close closes the connection to the source, when Open made it.
func (p *Planner) Close() {
	if p.own {
		p.db.Close()
	}
}

// CommandReplicaID is the replica id of a replay command's own binlog
// reads (finding a time, --dry-run): the one after `outbox-relay audit`'s,
// itself after the relay's range (config.ReplicaIDs).
func CommandReplicaID(cfg *config.Config) uint32 {
	return cfg.Source.ServerID + uint32(cfg.ReplicaIDs()) + 1
}

func (p *Planner) locator() (*binlog.Locator, error) {
	cfg := p.p.Config
	a := cfg.Source.Addrs()[0]
	tc, err := source.TLSConfig(cfg.Source.TLS, a.Host)
	if err != nil {
		return nil, err
	}
	return &binlog.Locator{DB: p.db, Info: p.info, Scan: canal.ScanConfig{Host: a.Host, Port: uint16(a.Port), User: cfg.Source.User,
		Password: cfg.Source.Password.Reveal(), TLS: tc, ServerID: CommandReplicaID(cfg), Flavor: p.info.Flavor,
		Logger: p.p.Logger}}, nil
}

// Plan checks ask and resolves its window to positions: a job, pending,
// ready to be stored. Every error says what to give instead.
func (p *Planner) Plan(ctx context.Context, ask replay.Ask, now time.Time) (replay.Job, error) {
	now = now.UTC()
	j := replay.Job{ID: replay.NewID(now), Sink: ask.Sink, Endpoint: ask.Endpoint, Source: ask.Source, Since: ask.Since.UTC(), UntilTime: ask.UntilTime.UTC(),
		Types: ask.Types, Where: ask.Where, State: replay.Pending, CreatedAt: now}
	if j.Source == "" {
		j.Source = replay.SourceBinlog
	}
	if ask.Since.IsZero() == (ask.From == "") {
		return j, errors.New("give where the window starts: --since TIME or --from GTID, one of them")
	}
	if !ask.UntilTime.IsZero() && ask.Until != "" {
		return j, errors.New("give where the window ends with --until TIME or --until GTID, not both")
	}
	if err := j.Check(); err != nil {
		return j, err
	}
	if !ask.Since.IsZero() && ask.Since.After(now) {
		return j, fmt.Errorf("--since %s is in the future (it is %s now): give a past time, such as --since 2h (two hours ago)", ask.Since.UTC().Format(time.RFC3339), now.Format(time.RFC3339))
	}
	if !ask.UntilTime.IsZero() && ask.UntilTime.After(now) {
		return j, fmt.Errorf("--until %s is in the future: leave it out to replay up to now", ask.UntilTime.UTC().Format(time.RFC3339))
	}
	s, _, err := p.p.Targets.ReplayTarget(ctx, p.db, j)
	if err != nil {
		return j, err
	}
	_ = s.Close(ctx) // built to check it; the relay builds its own
	if j.Source == replay.SourceTable {
		if !p.p.TableSource {
			return j, errors.New("--source table is not supported by this build: replay from the binlog (--source binlog)")
		}
	}
	var loc *binlog.Locator
	locate := func(t time.Time) (event.Position, error) {
		if loc == nil {
			if loc, err = p.locator(); err != nil {
				return event.Position{}, err
			}
		}
		pos, err := loc.Locate(ctx, t)
		p.Scanned = loc.Scanned
		return pos, err
	}
	switch {
	case ask.From != "":
		j.From = event.Position{GTIDSet: strings.TrimSpace(ask.From)}
		if _, err := position.Parse(j.From.GTIDSet); err != nil {
			return j, fmt.Errorf("--from: %v: give a GTID set (MySQL uuid:1-5, MariaDB 0-1-100), as a checkpoint has it", err)
		}
		if err := source.CheckResume(ctx, p.db, p.info, j.From); err != nil {
			if j.Source == replay.SourceBinlog {
				return j, fmt.Errorf("%w: --from %s: %v; replay with --source table (the outbox table's retained rows), or from a later position", replay.ErrPurged, j.From.GTIDSet, err)
			}
		}
	case j.Source == replay.SourceBinlog:
		if j.From, err = locate(ask.Since); err != nil {
			if errors.Is(err, replay.ErrPurged) {
				if p.p.TableSource {
					// The binlog no longer holds the window: the
					// outbox table's rows may (the table source finds
					// its own start from Since).
					j.Source, j.From = replay.SourceTable, event.Position{}
					p.p.Logger.Warn("the binlog no longer holds the window's start: replaying from the outbox table instead", slog.Any("why", err))
					if j.Gone, err = p.gone(ctx, j.Since); err != nil {
						return j, err
					}
					for _, g := range j.Gone {
						p.p.Logger.Warn("rows of the window are gone", slog.String("what", g))
					}
					break
				}
			}
			return j, err
		}
	}
	switch {
	case ask.Until != "":
		j.Until = event.Position{GTIDSet: strings.TrimSpace(ask.Until)}
		if _, err := position.Parse(j.Until.GTIDSet); err != nil {
			return j, fmt.Errorf("--until: %v: give a GTID set or a time", err)
		}
	case !ask.UntilTime.IsZero() && j.Source == replay.SourceBinlog:
		if j.Until, err = locate(ask.UntilTime); err != nil {
			return j, fmt.Errorf("--until: %w", err)
		}
	default:
		if j.Until, err = source.CurrentPosition(ctx, p.db, p.info); err != nil {
			return j, err
		}
		if j.UntilTime.IsZero() && j.Source != replay.SourceTable {
			// For humans. Not for a table job: it would bound the rows
			// by their insert time, and rows committed while the plan ran
			// (before Until) were inserted after now.
			j.UntilTime = now.Truncate(time.Second)
		}
	}
	if j.Source == replay.SourceBinlog && j.From.GTIDSet != "" && j.Until.GTIDSet != "" && position.Covers(p.info.Flavor, j.From, j.Until) {
		return j, fmt.Errorf("the window is empty: nothing was committed after %s up to %s; give an earlier start or a later end", j.From, j.Until)
	}
	return j, nil
}

// DryRun reads job's window from the binlog, as the relay would, and
// counts the events it would send and those its filters pass over; it
// sends nothing.
func (p *Planner) DryRun(ctx context.Context, j replay.Job) (send, skipped int64, err error) {
	if j.Source != replay.SourceBinlog {
		return 0, 0, fmt.Errorf("--dry-run reads the binlog; a %s replay has no dry run", j.Source)
	}
	_, match, err := p.p.Targets.ReplayTarget(ctx, p.db, j)
	if err != nil {
		return 0, 0, err
	}
	rc, err := audit.Reader(p.p.Config, p.info, p.p.Logger)
	if err != nil {
		return 0, 0, err
	}
	rc.ServerID = CommandReplicaID(p.p.Config)
	reader, err := canal.New(rc)
	if err != nil {
		return 0, 0, err
	}
	w := &replay.Window{Source: reader, Job: &j, Flavor: p.info.Flavor, Select: match, Skipped: func() { skipped++ }}
	err = w.Run(ctx, j.From, func(_ context.Context, txn *event.Txn) error {
		send += int64(len(txn.Events))
		w.Saved(txn.Position) // nothing to deliver: each is done once read
		return nil
	})
	return send, skipped, err
}

// gone says, per outbox table, what the table no longer holds of a window
// starting at since (backfill.Pruned).
func (p *Planner) gone(ctx context.Context, since time.Time) ([]string, error) {
	var out []string
	for _, t := range canal.TablesOf(p.p.Config.Tables) {
		g, err := backfill.Pruned(ctx, p.db, t.Schema, t.Name, backfill.CreatedAt(p.p.Config, t), since)
		if err != nil {
			return nil, err
		}
		out = append(out, g.String())
	}
	return out, nil
}
