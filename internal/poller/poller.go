// Package poller is the articles' polling outbox worker (the seeds'
// SKIP LOCKED poller), for benchmarks and for tests of a switch-over from
// it: claim a batch of pending rows with SELECT … FOR UPDATE SKIP LOCKED,
// mark them processing and commit, publish, then mark them published. Its
// table has the seeds' columns (status, claimed_at, claimed_by, attempts,
// available_at, published_at, last_error). A Poller is used by one
// goroutine; several Pollers may share a table.
package poller

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
)

// Poller is the seeds' polling relay, as written there: claim a batch of
// pending rows with SELECT … FOR UPDATE SKIP LOCKED and mark them
// processing under a lease (claimed_at, claimed_by, attempts+1), commit,
// publish outside the transaction, then mark them published; a reaper
// returns rows whose lease expired to pending.
type Poller struct {
	DB       *sql.DB
	Table    string
	Batch    int
	Interval time.Duration // sleep when a poll finds nothing
	// Publish sends a claimed batch; an error stops Run.
	Publish func(ids []int64) error
	// Stop, when it returns true at the top of a poll, ends Run (a graceful
	// stop: a claimed batch is always published and marked first).
	Stop func() bool
}

// Run polls until ctx ends, Stop says so, or, with drain, until a poll
// finds nothing. It returns how many rows it published.
func (p *Poller) Run(ctx context.Context, drain bool) (int, error) {
	token := uuid.New()
	total := 0
	for ctx.Err() == nil && (p.Stop == nil || !p.Stop()) {
		ids, err := p.claim(ctx, token[:])
		if Deadlock(err) {
			continue // InnoDB chose this transaction as a deadlock victim: claim again
		}
		if err != nil {
			return total, err
		}
		if len(ids) == 0 {
			if drain {
				return total, nil
			}
			select {
			case <-ctx.Done():
			case <-time.After(p.Interval):
			}
			continue
		}
		if err := p.Publish(ids); err != nil {
			return total, err
		}
		for {
			_, err := p.DB.ExecContext(ctx, "UPDATE "+p.Table+` SET status = 'published', published_at = NOW(6),
			claimed_at = NULL, claimed_by = NULL, last_error = NULL WHERE id IN (`+inList(ids)+`) AND claimed_by = ?`, token[:])
			if Deadlock(err) {
				continue
			}
			if err != nil {
				return total, err
			}
			break
		}
		total += len(ids)
	}
	return total, nil
}

func (p *Poller) claim(ctx context.Context, token []byte) ([]int64, error) {
	tx, err := p.DB.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, "SELECT id, aggregateid, type, payload FROM "+p.Table+
		` WHERE status = 'pending' AND available_at <= NOW(6) ORDER BY id LIMIT `+strconv.Itoa(p.Batch)+` FOR UPDATE SKIP LOCKED`)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		var agg, typ string
		var payload []byte
		if err := rows.Scan(&id, &agg, &typ, &payload); err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, tx.Commit()
	}
	if _, err := tx.ExecContext(ctx, "UPDATE "+p.Table+` SET status = 'processing', claimed_at = NOW(6), claimed_by = ?,
		attempts = attempts + 1 WHERE id IN (`+inList(ids)+`)`, token); err != nil {
		return nil, err
	}
	return ids, tx.Commit()
}

// Reap returns rows whose lease (5 minutes) expired to pending, every 5 s.
func (p *Poller) Reap(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
		_, _ = p.DB.ExecContext(ctx, "UPDATE "+p.Table+` SET status = 'pending', available_at = DATE_ADD(NOW(6), INTERVAL 30 SECOND),
			claimed_at = NULL, claimed_by = NULL WHERE status = 'processing' AND claimed_at < NOW(6) - INTERVAL 5 MINUTE`)
	}
}

// Deadlock reports a deadlock or lock wait timeout, which a poller retries.
func Deadlock(err error) bool {
	var me *mysqldriver.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

func inList(ids []int64) string {
	b := make([]byte, 0, len(ids)*8)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(b)
}
