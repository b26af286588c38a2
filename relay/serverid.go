package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/pipeline"
	"github.com/outbox-relay/outbox-relay/source"
)

// idGuard keeps a pipeline's binlog stream from fighting another replica
// with the same server_id (a copied config): two replicas with one id make
// the server drop one whenever the other connects, forever.
//
// Before the stream first connects it looks for its id in the server's
// replica list. A registration that goes away within idWait was a relay that
// just stopped (the server drops it once it notices the closed connection);
// one that stays is another replica, and the pipeline stops with an error
// naming the ids in use and a free one — unless this relay has just taken
// over the checkpoint lock as a standby: then the registration is the
// relay it took over from (frozen, or gone unnoticed), which has the same
// config, and connecting takes the id over. A stream dropped later because
// another replica connected with its id (canal.ErrServerIDInUse) stops the
// same way instead of reconnecting.
type idGuard struct {
	src      *canal.Reader
	db       *sql.DB
	relay    *Relay
	own      uint32 // the server's own server_id
	tookOver bool
	wait     time.Duration
	log      *slog.Logger
	checked  bool // before has let a stream connect
}

// idWait bounds the wait for a registration to go away: a few heartbeats of
// the stream (the server notices a closed replica connection when it next
// writes to it).
func idWait(heartbeat time.Duration) time.Duration { return max(3*heartbeat, 5*time.Second) }

func (r *Relay) guardServerID(db *sql.DB, own uint32, tookOver bool, src *canal.Reader) pipeline.Source {
	if len(r.cfg.Source.Addrs()) > 1 {
		// db is one of several servers, maybe not the one the stream
		// reads: only a dropped stream tells of a collision.
		db = nil
	}
	return &idGuard{src: src, db: db, relay: r, own: own, tookOver: tookOver, wait: idWait(r.cfg.Source.Heartbeat),
		log: r.log.With(slog.Uint64("server_id", uint64(src.ServerID())))}
}

func (g *idGuard) Run(ctx context.Context, from event.Position, handle func(context.Context, *event.Txn) error) error {
	// Only before the first stream: a gateway's catch-up stream opens again
	// on its id, which its own last stream may still hold for a moment.
	if !g.checked {
		if err := g.before(ctx); err != nil {
			return err
		}
		g.checked = true
	}
	err := g.src.Run(ctx, from, handle)
	if errors.Is(err, canal.ErrServerIDInUse) && ctx.Err() == nil {
		var reps []source.Replica
		if g.db != nil {
			lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			reps, _ = source.ListReplicas(lctx, g.db)
		}
		return fmt.Errorf("the server dropped this stream because another replica connected with its server_id %d: %s (%w)", g.src.ServerID(), g.advice(reps), err)
	}
	return err
}

func (g *idGuard) before(ctx context.Context) error {
	if g.db == nil {
		return nil
	}
	id := g.src.ServerID()
	deadline := time.Now().Add(g.wait)
	for first := true; ; first = false {
		reps, err := source.ListReplicas(ctx, g.db)
		if err != nil {
			// Cannot tell (MariaDB needs REPLICATION MASTER ADMIN): a
			// collision shows as the server dropping one of the streams.
			g.log.Debug("cannot list the server's replicas before connecting", slog.Any("err", err))
			return nil
		}
		i := slices.IndexFunc(reps, func(x source.Replica) bool { return x.ID == id })
		if i < 0 {
			return nil
		}
		if g.tookOver {
			g.log.Warn("this relay's server_id is still registered, most likely by the relay it took over from (frozen, or gone unnoticed): connecting takes the id over",
				slog.String("registered_from", orUnset(reps[i].Host)))
			return nil
		}
		if first {
			g.log.Info("this relay's server_id is registered by another connection: waiting for it to go (a relay that just stopped)",
				slog.String("registered_from", orUnset(reps[i].Host)), slog.Duration("wait", g.wait))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: server_id %d is in use by a replica connected from %s for more than %s: %s",
				canal.ErrServerIDInUse, id, orUnset(reps[i].Host), g.wait.Round(time.Second), g.advice(reps))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// advice names the ids in use and a free range for this relay.
func (g *idGuard) advice(reps []source.Replica) string {
	first := g.relay.cfg.Source.ServerID
	n := uint32(max(g.relay.cfg.ReplicaIDs(), 1))
	free := max(first+n-1, g.own)
	var used []string
	for _, x := range reps {
		free = max(free, x.ID)
		used = append(used, fmt.Sprintf("%d (%s)", x.ID, orUnset(x.Host)))
	}
	inUse := "not listed (see SHOW SLAVE HOSTS / SHOW REPLICAS on the server)"
	if len(used) > 0 {
		inUse = strings.Join(used, ", ")
	}
	uses := "one id per pipeline and replay slot: this relay uses 1"
	if n > 1 {
		uses = fmt.Sprintf("one id per pipeline and replay slot: this relay uses %d, source.server_id to source.server_id+%d", n, n-1)
	}
	return fmt.Sprintf("replica ids in use: %s; the server's own id: %d. Two replicas with one id make the server drop one whenever the other connects. "+
		"If this is a copy of another relay's config, give it its own ids: set source.server_id to %d (%s); "+
		"a hot standby of the same relay needs no change: it shares the checkpoint store and its lock", inUse, g.own, free+1, uses)
}

func orUnset(s string) string {
	if s == "" {
		return "(host not reported)"
	}
	return s
}
