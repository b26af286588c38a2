package check

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	driver "github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/grants"
	"github.com/outbox-relay/outbox-relay/source"
)

// replica is one row of SHOW REPLICAS / SHOW SLAVE HOSTS.
type replica struct {
	ID   uint32
	Host string
}

func serverIDResult(ctx context.Context, db *sql.DB, s server, cfg *config.Config) Result {
	own, _ := strconv.ParseUint(s.vars["server_id"], 10, 32)
	reps, err := replicas(ctx, db, s)
	hostname, _ := os.Hostname()
	standby := cfg.Checkpoint.Lock != nil && *cfg.Checkpoint.Lock && lockHeld(ctx, cfg)
	return serverIDDecision(idRange{cfg.Source.ServerID, cfg.ReplicaIDs()}, uint32(own), reps, err, hostname, standby, s)
}

// idRange is the relay's replica ids: first .. first+n-1.
type idRange struct {
	first uint32
	n     int
}

func (r idRange) last() uint32 { return r.first + uint32(max(r.n, 1)) - 1 }

func (r idRange) contains(id uint32) bool { return id >= r.first && id <= r.last() }

func (r idRange) String() string {
	if r.last() == r.first {
		return strconv.FormatUint(uint64(r.first), 10)
	}
	return fmt.Sprintf("%d..%d", r.first, r.last())
}

// serverIDDecision judges the relay's replica ids against the server's own
// id and the connected replicas'. A colliding replica registered from this
// very host may be an earlier run of this relay whose connection the server
// has not dropped yet, or another relay with a copied config: check cannot
// tell, so it is a WARN, and the relay itself decides before it connects
// (it waits for a registration that goes away, and stops otherwise). When another relay holds the checkpoint store's lock, a
// collision is that active relay, which this one will stand by for: also a
// WARN. Any other collision is a FAIL.
func serverIDDecision(ids idRange, own uint32, reps []replica, listErr error, hostname string, standby bool, s server) Result {
	r := Result{Name: NameServerID}
	free := max(ids.last(), own)
	for _, x := range reps {
		free = max(free, x.ID)
	}
	suggest := fmt.Sprintf("set source.server_id to %d in the config (the relay uses source.server_id to source.server_id+%d, one id per pipeline and replay slot)", free+1, max(ids.n, 1)-1)
	var fails, warns []string
	if ids.contains(own) {
		fails = append(fails, fmt.Sprintf("the server's own server_id is %d", own))
	}
	for _, x := range reps {
		if !ids.contains(x.ID) {
			continue
		}
		if hostname != "" && x.Host == hostname {
			warns = append(warns, fmt.Sprintf("a replica with server_id %d is registered from this host (%s): an earlier run of this relay whose connection the server has not dropped yet, or another relay on this host with a copied config; the relay waits a few seconds for it to go, and otherwise stops that sink with an error naming a free id", x.ID, x.Host))
			continue
		}
		if standby {
			warns = append(warns, fmt.Sprintf("a replica with server_id %d is connected from %s, and another relay holds the checkpoint lock: if that replica is it, this one waits as its standby; any other replica with that id would be kicked off", x.ID, orUnset(x.Host)))
			continue
		}
		fails = append(fails, fmt.Sprintf("connected replica %s uses server_id %d", orUnset(x.Host), x.ID))
	}
	switch {
	case len(fails) > 0:
		r.Status = Fail
		r.Detail = fmt.Sprintf("the relay's replica ids %s collide: %s; two replicas with one id kick each other off", ids, strings.Join(fails, ", "))
		r.Fix = suggest
	case len(warns) > 0:
		r.Status = Warn
		r.Detail = strings.Join(warns, "; ")
		r.Fix = "if that is not an outbox-relay on this checkpoint store, " + suggest
	case listErr != nil:
		r.Status = Warn
		r.Detail = fmt.Sprintf("the relay's replica ids %s differ from the server's %d, but connected replicas could not be listed: %v", ids, own, listErr)
		grant := "REPLICATION SLAVE"
		if s.flavor == flavorMariaDB {
			grant = "REPLICATION MASTER ADMIN"
		}
		r.Fix = fmt.Sprintf("make sure no replica uses server_id %s, or let check see them: GRANT %s ON *.* TO %s;", ids, grant, s.user)
		var me *driver.MySQLError
		if errors.As(listErr, &me) && !grants.Denied(listErr) {
			// The server refused, not for a missing privilege: it cannot
			// list its replicas at all (Dolt has no SHOW REPLICAS).
			r.Fix = fmt.Sprintf("make sure no replica uses server_id %s: this server cannot list its replicas", ids)
		}
	default:
		r.Detail = fmt.Sprintf("the relay's replica ids %s differ from the server's %d and from %d connected replica(s)", ids, own, len(reps))
	}
	return r
}

// lockHeld reports whether another relay holds the checkpoint store's lock
// now (this relay would wait as its standby). Errors count as not held.
func lockHeld(ctx context.Context, cfg *config.Config) bool {
	if cfg.Checkpoint.Store == "mysql" {
		db, err := checkpoint.OpenDB(cfg.Checkpoint.DSN.Reveal())
		if err != nil {
			return false
		}
		defer db.Close()
		held, err := checkpoint.MySQLLockHeld(ctx, db, cfg.Checkpoint.Table)
		return err == nil && held
	}
	held, err := checkpoint.FileLockHeld(cfg.Checkpoint.Path)
	return err == nil && held
}

func replicas(ctx context.Context, db *sql.DB, s server) ([]replica, error) {
	q := "SHOW SLAVE HOSTS"
	if s.flavor == flavorMySQL && s.atLeast(8, 0, 22) {
		q = "SHOW REPLICAS"
	}
	reps, err := source.ListReplicasWith(ctx, db, q)
	var out []replica
	for _, r := range reps {
		out = append(out, replica{ID: r.ID, Host: r.Host})
	}
	return out, err
}
