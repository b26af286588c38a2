package relay

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
	"github.com/outbox-relay/outbox-relay/source"
)

// ReplayAsk is a replay as asked (outbox-relay replay): a time or a GTID
// set for each end of the window.
type ReplayAsk struct {
	Sink, Endpoint string
	Source         string // replay.SourceBinlog (default) or replay.SourceTable
	Since          time.Time
	From           string // a GTID set: the events after it
	UntilTime      time.Time
	Until          string // a GTID set: the events up to it
	Types          []string
	Where          string
}

// ReplayPlanner resolves asked replays against the source server: the
// command's side of a replay. Close it when done.
type ReplayPlanner struct {
	r    *Relay
	db   *sql.DB
	info source.ServerInfo
	// Scanned is how many binlog files the last Plan read to find a time.
	Scanned int
}

// NewReplayPlanner connects to the source server.
func NewReplayPlanner(ctx context.Context, r *Relay) (*ReplayPlanner, error) {
	db, err := source.Open(ctx, r.cfg.Source)
	if err != nil {
		return nil, err
	}
	info, err := source.Inspect(ctx, db, r.cfg.Source)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &ReplayPlanner{r: r, db: db, info: info}, nil
}

// Close closes the connection to the source.
func (p *ReplayPlanner) Close() { p.db.Close() }

// ReplayCommandReplicaID is the replica id of a replay command's own binlog
// reads (finding a time, --dry-run): the one after `outbox-relay audit`'s,
// itself after the relay's range (config.ReplicaIDs).
func ReplayCommandReplicaID(cfg *config.Config) uint32 {
	return cfg.Source.ServerID + uint32(cfg.ReplicaIDs()) + 1
}

func (p *ReplayPlanner) locator() (*replay.Locator, error) {
	a := p.r.cfg.Source.Addrs()[0]
	tc, err := source.TLSConfig(p.r.cfg.Source.TLS, a.Host)
	if err != nil {
		return nil, err
	}
	return &replay.Locator{DB: p.db, Info: p.info, Scan: canal.ScanConfig{Host: a.Host, Port: uint16(a.Port), User: p.r.cfg.Source.User,
		Password: p.r.cfg.Source.Password.Reveal(), TLS: tc, ServerID: ReplayCommandReplicaID(p.r.cfg), Flavor: p.info.Flavor,
		Logger: p.r.log}}, nil
}

// Plan checks ask and resolves its window to positions: a job, pending,
// ready to be stored. Every error says what to give instead.
func (p *ReplayPlanner) Plan(ctx context.Context, ask ReplayAsk, now time.Time) (replay.Job, error) {
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
	s, _, err := p.r.ReplayTarget(ctx, p.db, j)
	if err != nil {
		return j, err
	}
	_ = s.Close(ctx) // built to check it; the relay builds its own
	if j.Source == replay.SourceTable {
		if _, ok := ReplaySources[replay.SourceTable]; !ok {
			return j, errors.New("--source table is not supported by this build: replay from the binlog (--source binlog)")
		}
	}
	var loc *replay.Locator
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
				if _, ok := ReplaySources[replay.SourceTable]; ok {
					// The binlog no longer holds the window: the
					// outbox table's rows may (the table source finds
					// its own start from Since).
					j.Source, j.From = replay.SourceTable, event.Position{}
					p.r.log.Warn("the binlog no longer holds the window's start: replaying from the outbox table instead", slog.Any("why", err))
					if j.Gone, err = p.gone(ctx, j.Since); err != nil {
						return j, err
					}
					for _, g := range j.Gone {
						p.r.log.Warn("rows of the window are gone", slog.String("what", g))
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
func (p *ReplayPlanner) DryRun(ctx context.Context, j replay.Job) (send, skipped int64, err error) {
	if j.Source != replay.SourceBinlog {
		return 0, 0, fmt.Errorf("--dry-run reads the binlog; a %s replay has no dry run", j.Source)
	}
	_, match, err := p.r.ReplayTarget(ctx, p.db, j)
	if err != nil {
		return 0, 0, err
	}
	rc, err := audit.Reader(p.r.cfg, p.info, p.r.log)
	if err != nil {
		return 0, 0, err
	}
	rc.ServerID = ReplayCommandReplicaID(p.r.cfg)
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
func (p *ReplayPlanner) gone(ctx context.Context, since time.Time) ([]string, error) {
	var out []string
	for _, t := range canal.TablesOf(p.r.cfg.Tables) {
		g, err := backfill.Pruned(ctx, p.db, t.Schema, t.Name, createdAt(p.r.cfg, t), since)
		if err != nil {
			return nil, err
		}
		out = append(out, g.String())
	}
	return out, nil
}
