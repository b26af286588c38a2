package prune

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/position"
	"github.com/outbox-relay/outbox-relay/source"
)

// SinkHorizon is how far one sink (or webhook endpoint) has acknowledged.
type SinkHorizon struct {
	Name       string
	Checkpoint checkpoint.Checkpoint
	// CaughtUp: the checkpoint holds every transaction the server had
	// executed when the horizon was taken.
	CaughtUp bool
	// Acked is the time before which every committed transaction was
	// acknowledged; zero when unknown (the sink holds everything back).
	Acked time.Time
	// Why explains a zero Acked.
	Why string
}

// Horizon is what may be pruned now.
type Horizon struct {
	// Now is the server's clock when the horizon was taken.
	Now time.Time
	// Retention is Now minus prune.older_than.
	Retention time.Time
	// OpenTxn is the start of the oldest open transaction that wrote rows;
	// zero when none, or when the user cannot see them (OpenTxnUnknown).
	OpenTxn        time.Time
	OpenTxnUnknown string
	Sinks          []SinkHorizon
	// Cutoff: rows whose timestamp is before it may be pruned. Zero:
	// nothing may be.
	Cutoff time.Time
	// HeldBy says what set Cutoff.
	HeldBy string
}

// Horizon reads the server's clock and GTID state, then every sink's
// checkpoint, and computes the cutoff. The order matters: a transaction
// committed before Now is in the state read after it.
func (p *Pruner) Horizon(ctx context.Context) (Horizon, error) {
	var h Horizon
	var now string
	if err := p.db.QueryRowContext(ctx, "SELECT UNIX_TIMESTAMP(NOW(6))").Scan(&now); err != nil {
		return h, fmt.Errorf("read the server's clock: %w", err)
	}
	t, err := parseUnix(now)
	if err != nil {
		return h, err
	}
	h.Now = t
	cur, err := source.CurrentPosition(ctx, p.db, p.info)
	if err != nil {
		return h, fmt.Errorf("read the server's position: %w", err)
	}
	h.Retention = h.Now.Add(-p.opts.OlderThan)
	h.Cutoff, h.HeldBy = h.Retention, fmt.Sprintf("the retention (older than %s)", p.opts.OlderThan)
	for _, name := range p.sinks {
		s := SinkHorizon{Name: name}
		cp, err := p.store.Load(ctx, name)
		switch {
		case errors.Is(err, checkpoint.ErrNotFound):
			s.Why = "has no checkpoint yet (it never ran)"
		case err != nil:
			return h, err
		default:
			s.Checkpoint = cp
			s.CaughtUp = position.Covers(p.info.Flavor, cp.Position, cur)
			switch {
			case s.CaughtUp:
				s.Acked = h.Now
			case !cp.CommitTime.IsZero():
				s.Acked = cp.CommitTime
			default:
				s.Why = "has a checkpoint without a commit time (saved by an earlier version, or before its first transaction); it gets one at its next transaction"
			}
		}
		h.Sinks = append(h.Sinks, s)
		if s.Acked.IsZero() {
			if !h.Cutoff.IsZero() {
				h.Cutoff, h.HeldBy = time.Time{}, fmt.Sprintf("sink %s %s", name, s.Why)
			}
			continue
		}
		if c := s.Acked.Add(-p.opts.SafetyMargin); !h.Cutoff.IsZero() && c.Before(h.Cutoff) {
			h.Cutoff, h.HeldBy = c, fmt.Sprintf("sink %s (acknowledged up to %s, minus the safety margin %s)", name, s.Acked.Format(time.RFC3339), p.opts.SafetyMargin)
		}
	}
	open, why, err := p.oldestOpenTxn(ctx)
	if err != nil {
		return h, err
	}
	h.OpenTxn, h.OpenTxnUnknown = open, why
	if c := open.Add(-time.Second); !open.IsZero() && !h.Cutoff.IsZero() && c.Before(h.Cutoff) {
		h.Cutoff, h.HeldBy = c, fmt.Sprintf("an open transaction that has written rows since %s", open.Format(time.RFC3339))
	}
	return h, nil
}

// oldestOpenTxn is the start of the oldest open InnoDB transaction that has
// modified rows. Without the PROCESS privilege it is unknown, and the
// safety margin alone covers open transactions.
func (p *Pruner) oldestOpenTxn(ctx context.Context) (time.Time, string, error) {
	var started sql.NullString
	err := p.db.QueryRowContext(ctx, "SELECT UNIX_TIMESTAMP(MIN(trx_started)) FROM information_schema.INNODB_TRX WHERE trx_rows_modified > 0").Scan(&started)
	switch {
	case err != nil && ctx.Err() != nil:
		return time.Time{}, "", err
	case err != nil:
		return time.Time{}, "cannot read information_schema.INNODB_TRX (" + err.Error() + "): grant PROCESS, or rely on the safety margin alone", nil
	case !started.Valid:
		return time.Time{}, "", nil
	}
	t, err := parseUnix(started.String)
	return t, "", err
}

// parseUnix parses the text of UNIX_TIMESTAMP(…): seconds with an optional
// fraction.
func parseUnix(s string) (time.Time, error) {
	sec, frac, _ := strings.Cut(s, ".")
	n, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("parse the server's time %q: %w", s, err)
	}
	var ns int64
	if frac != "" {
		frac = (frac + "000000000")[:9]
		if ns, err = strconv.ParseInt(frac, 10, 64); err != nil {
			return time.Time{}, fmt.Errorf("parse the server's time %q: %w", s, err)
		}
	}
	return time.Unix(n, ns).UTC(), nil
}

// unixArg renders t for FROM_UNIXTIME(?), to the microsecond, never rounded up.
func unixArg(t time.Time) string {
	return fmt.Sprintf("%d.%06d", t.Unix(), t.Nanosecond()/1000)
}
