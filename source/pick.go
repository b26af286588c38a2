package source

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/defaults"
	"github.com/outbox-relay/outbox-relay/position"
)

// Set is a relay's list of source servers (source.servers): one history
// served by several servers, a primary and replicas replicating by GTID.
// Pick chooses, for one sink's position, the server to read. A Set keeps one
// small connection pool per server; it is safe for concurrent use by every
// sink's reader.
type Set struct {
	cfg   config.Source
	log   *slog.Logger
	addrs []config.Addr

	mu  sync.Mutex
	dbs map[string]*sql.DB
}

// NewSet returns the Set of cfg's servers; it connects lazily.
func NewSet(cfg config.Source, log *slog.Logger) *Set {
	defaults.Logger(&log)
	return &Set{cfg: cfg, log: log, addrs: cfg.Addrs(), dbs: map[string]*sql.DB{}}
}

// Len is the number of servers.
func (s *Set) Len() int { return len(s.addrs) }

// Close closes every connection pool.
func (s *Set) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, db := range s.dbs {
		db.Close()
		delete(s.dbs, k)
	}
}

func (s *Set) db(ctx context.Context, a config.Addr) (*sql.DB, error) {
	s.mu.Lock()
	db := s.dbs[a.String()]
	s.mu.Unlock()
	if db != nil {
		if err := db.PingContext(ctx); err == nil {
			return db, nil
		}
	}
	db, err := OpenAddr(ctx, s.cfg, a)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if old := s.dbs[a.String()]; old != nil {
		old.Close()
	}
	s.dbs[a.String()] = db
	s.mu.Unlock()
	return db, nil
}

// candidate is one server as Pick saw it.
type candidate struct {
	addr    config.Addr
	info    ServerInfo
	state   ServerState
	replica bool
	problem string // why it cannot be read (checks), "" if it can
}

// Pick returns the first server, in the configured order, that passes the
// binlog checks (ROW / FULL / FULL, GTIDs on, log_slave_updates on a
// replica) and can serve pos by the resume rule (ServerState.Gaps):
// its executed GTIDs contain pos and pos contains its purged ones (and, on
// the MariaDB server pos was read from, its binlog agrees at pos's File:Pos:
// ServerState.OwnBinlog). A server
// behind pos is skipped with a log line saying by how much, until it has
// caught up. Servers holding GTIDs no other listed server has (errant
// transactions on a replica) are reported. When every server answered and
// each purged part of what comes after pos, the error wraps
// position.ErrLost; when none is usable for other reasons, the error
// lists each server's and the caller retries.
//
// It returns the server's address and the TLS settings to read it with (nil
// without source.tls).
func (s *Set) Pick(ctx context.Context, flavor string, pos event.Position) (config.Addr, *tls.Config, error) {
	var (
		cands    []candidate
		reasons  []string
		allLost  = true
		lostErrs []string
	)
	for _, a := range s.addrs {
		c := candidate{addr: a}
		db, err := s.db(ctx, a)
		if err != nil {
			reasons = append(reasons, fmt.Sprintf("%s: unreachable: %v", a, err))
			allLost = false
			continue
		}
		if c.info, err = ReadInfo(ctx, db); err != nil {
			reasons = append(reasons, fmt.Sprintf("%s: %v", a, err))
			allLost = false
			continue
		}
		if c.info.Flavor != flavor {
			c.problem = fmt.Sprintf("a %s server, but the relay reads %s servers", c.info.Flavor, flavor)
		} else if c.replica, err = usable(ctx, db, c.info); err != nil {
			c.problem = err.Error()
		} else if c.state, err = ReadServerState(ctx, db, c.info); err != nil {
			c.problem = err.Error()
		} else if err = c.state.ReadHistory(ctx, db, pos); err != nil {
			c.problem = err.Error()
		}
		cands = append(cands, c)
	}
	s.reportErrant(cands)
	for _, c := range cands {
		if c.problem != "" {
			reasons = append(reasons, fmt.Sprintf("%s: %s", c.addr, c.problem))
			allLost = false
			continue
		}
		if pos.GTIDSet == "" && pos.Server != "" && pos.Server != c.addr.String() {
			reasons = append(reasons, fmt.Sprintf("%s: the checkpoint is a file/position of %s (GTIDs are off), which only that server can serve", c.addr, pos.Server))
			allLost = false
			continue
		}
		g, err := c.state.Gaps(pos)
		switch {
		case err != nil:
			reasons = append(reasons, fmt.Sprintf("%s: %v", c.addr, err))
			allLost = false
		case len(g.Foreign) > 0:
			s.log.Warn("source server holds the checkpoint's GTIDs in another history (its binlog differs where the checkpoint was read from it): skipped",
				slog.String("server", c.addr.String()), slog.String("why", strings.Join(g.Foreign, "; ")))
			reasons = append(reasons, fmt.Sprintf("%s: another history: %s", c.addr, strings.Join(g.Foreign, "; ")))
			allLost = false
		case len(g.Missing) > 0:
			s.log.Warn("source server is behind the checkpoint: skipped until it has caught up",
				slog.String("server", c.addr.String()), slog.String("behind_by", strings.Join(g.Missing, "; ")))
			reasons = append(reasons, fmt.Sprintf("%s: behind the checkpoint: %s", c.addr, strings.Join(g.Missing, "; ")))
			allLost = false
		case len(g.Purged) > 0:
			reasons = append(reasons, fmt.Sprintf("%s: purged: %s", c.addr, strings.Join(g.Purged, "; ")))
			lostErrs = append(lostErrs, c.addr.String()+": "+strings.Join(g.Purged, "; "))
		default:
			tc, err := TLSConfig(s.cfg.TLS, c.addr.Host)
			if err != nil {
				return config.Addr{}, nil, err
			}
			return c.addr, tc, nil
		}
	}
	if allLost && len(lostErrs) > 0 {
		return config.Addr{}, nil, fmt.Errorf("%w: checkpoint %s: every source server purged part of what comes after it: %s; restore the binlogs, or remove the sink's checkpoint and start from checkpoint.start: earliest (`outbox-relay check` shows how)",
			position.ErrLost, pos, strings.Join(lostErrs, "; "))
	}
	return config.Addr{}, nil, fmt.Errorf("no source server can serve checkpoint %s now: %s", pos, strings.Join(reasons, "; "))
}

// reportErrant logs, for each replica among cands (MySQL), the GTIDs it has
// executed that no other reachable server has: transactions written on the
// replica itself, which a failover would either lose or replay elsewhere.
func (s *Set) reportErrant(cands []candidate) {
	for i, c := range cands {
		if !c.replica || c.problem != "" || c.info.Flavor != gomysql.MySQLFlavor || c.state.Executed == "" {
			continue
		}
		others, _ := gomysql.ParseMysqlGTIDSet("")
		n := 0
		for j, o := range cands {
			if j == i || o.problem != "" || o.state.Executed == "" {
				continue
			}
			if err := others.Update(o.state.Executed); err == nil {
				n++
			}
		}
		if n == 0 {
			continue
		}
		errant, count, err := position.GTIDMinus(c.state.Executed, others.String())
		if err == nil && count > 0 {
			s.log.Warn("source replica has errant transactions: GTIDs no other listed server has (written on the replica itself?)",
				slog.String("server", c.addr.String()), slog.String("gtids", errant), slog.Int64("count", count))
		}
	}
}

// usable checks what a server needs to be read after a failover: ROW
// binlogs with full row images and metadata, GTIDs on (MySQL; MariaDB always
// has them), and log_slave_updates on a replica. It returns whether the
// server is a replica.
func usable(ctx context.Context, db *sql.DB, info ServerInfo) (bool, error) {
	var logBin, format, image string
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.log_bin, @@GLOBAL.binlog_format, @@GLOBAL.binlog_row_image").Scan(&logBin, &format, &image); err != nil {
		return false, fmt.Errorf("read binlog settings: %w", err)
	}
	var problems []string
	if !on(logBin) {
		problems = append(problems, "log_bin is OFF")
	}
	if !strings.EqualFold(format, "ROW") {
		problems = append(problems, "binlog_format is "+format+", not ROW")
	}
	if !strings.EqualFold(image, "FULL") {
		problems = append(problems, "binlog_row_image is "+image+", not FULL")
	}
	var meta string
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.binlog_row_metadata").Scan(&meta); err == nil && !strings.EqualFold(meta, "FULL") {
		problems = append(problems, "binlog_row_metadata is "+meta+", not FULL")
	}
	if info.Flavor == gomysql.MySQLFlavor && !info.GTIDMode {
		problems = append(problems, "gtid_mode is not ON (failing over between servers needs GTIDs)")
	}
	primary, known := ReplicaOf(ctx, db)
	replica := known && primary != ""
	if replica {
		v := ""
		if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.log_slave_updates").Scan(&v); err != nil {
			_ = db.QueryRowContext(ctx, "SELECT @@GLOBAL.log_replica_updates").Scan(&v)
		}
		if !on(v) {
			problems = append(problems, "a replica of "+primary+" with log_slave_updates OFF (what it replicates is not in its binlog)")
		}
	}
	if len(problems) > 0 {
		return replica, errors.New(strings.Join(problems, "; "))
	}
	return replica, nil
}

func on(v string) bool { return strings.EqualFold(v, "ON") || v == "1" }
