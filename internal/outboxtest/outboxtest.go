// Package outboxtest drives workloads against a private test server and checks
// what a sink received: the shared part of the end-to-end tests.
package outboxtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// outboxTable opens the Debezium-style outbox table's CREATE TABLE with its
// columns; each schema adds its own and closes it.
const outboxTable = `CREATE TABLE outbox (
  seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  id VARCHAR(64) NOT NULL UNIQUE,
  aggregatetype VARCHAR(64) NOT NULL,
  aggregateid VARCHAR(64) NOT NULL,
  type VARCHAR(64) NOT NULL,
  payload JSON NOT NULL`

// Schema creates the Debezium-style outbox table and a business table.
const Schema = outboxTable + `
);
CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY, total INT NOT NULL, note TEXT)`

// Committed is one committed transaction as its producer saw it.
type Committed struct {
	GTID   string    // @@last_gtid after commit (MariaDB); "" on MySQL, which has no such variable
	At     time.Time // when COMMIT returned
	IDs    []string  // event ids in insert order
	AggIDs []string
}

// Workload is what producers committed and rolled back.
type Workload struct {
	// Prefix starts every id, so that several workloads can share a table.
	Prefix string
	// Until, when set, stops the producers once closed, between transactions
	// (txns is then an upper bound).
	Until <-chan struct{}
	// NetChange is set for a server that logs a transaction's net change
	// (Dolt): an insert-then-delete transaction leaves nothing in its
	// binlog, so Produce runs none.
	NetChange bool
	// Retained: every committed row stays in the table (Produce runs no
	// insert-then-delete), as a test of reading the table needs.
	Retained bool
	// OwnAggregates gives each producer aggregates of its own, so that an
	// aggregate's events are written by one connection in turn (as an
	// application that locks the aggregate's row writes them): their
	// commit order is then their insert order.
	OwnAggregates bool
	mu            sync.Mutex
	Txns          []Committed
	RolledBack    map[string]bool
}

// Committed returns a copy of the transactions committed so far; safe while
// producers run.
func (w *Workload) Committed() []Committed {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Committed(nil), w.Txns...)
}

// Events returns the number of committed events.
func (w *Workload) Events() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, t := range w.Txns {
		n += len(t.IDs)
	}
	return n
}

// Produce runs producers goroutines, each committing txns transactions of
// varied shape: multi-row inserts, single-row inserts, insert-then-delete,
// writes to another table, and extra rolled-back transactions. sizes cycles
// through the events per committed transaction. It returns when all are done
// or ctx ends.
func Produce(ctx context.Context, t testing.TB, db *sql.DB, w *Workload, producers, txns int, sizes []int, aggregates int) {
	t.Helper()
	if w.RolledBack == nil {
		w.RolledBack = map[string]bool{}
	}
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(p), 42))
			conn, err := db.Conn(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			noLastGTID := false // MySQL: no @@last_gtid
			aggPrefix := "agg-"
			if w.OwnAggregates {
				aggPrefix = fmt.Sprintf("%sagg-p%d-", w.Prefix, p)
			}
			for i := 0; i < txns && ctx.Err() == nil && !closed(w.Until); i++ {
				n := sizes[(p+i)%len(sizes)]
				prefix := fmt.Sprintf("%sp%d-t%d", w.Prefix, p, i)
				if i%7 == 3 { // a transaction that rolls back
					ids, _, err := insertTxn(ctx, conn, r, prefix+"-rb", aggPrefix, n, aggregates, false, true)
					if err != nil {
						errs <- err
						return
					}
					w.mu.Lock()
					for _, id := range ids {
						w.RolledBack[id] = true
					}
					w.mu.Unlock()
				}
				ids, aggs, err := insertTxn(ctx, conn, r, prefix, aggPrefix, n, aggregates, i%5 == 2 && !w.NetChange && !w.Retained, false)
				if err != nil {
					errs <- err
					return
				}
				var gtid string
				if !noLastGTID {
					err := conn.QueryRowContext(ctx, "SELECT @@last_gtid").Scan(&gtid)
					switch {
					case unknownVariable(err):
						noLastGTID = true
					case err != nil:
						errs <- err
						return
					}
				}
				w.mu.Lock()
				w.Txns = append(w.Txns, Committed{GTID: gtid, At: time.Now(), IDs: ids, AggIDs: aggs})
				w.mu.Unlock()
				if i%3 == 0 { // a transaction with no outbox rows
					if _, err := conn.ExecContext(ctx, "INSERT INTO orders VALUES (?, 1, 'plain')", prefix+"-plain"); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && ctx.Err() == nil {
			t.Errorf("producer: %v", err)
		}
	}
}

// unknownVariable reports MySQL's "Unknown system variable" (1193; Dolt
// sends it as 1105, with the same text): MySQL has no @@last_gtid, so a
// producer there cannot tell its transaction's GTID.
func unknownVariable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1193 || strings.HasPrefix(me.Message, "Unknown system variable"))
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func insertTxn(ctx context.Context, conn *sql.Conn, r *rand.Rand, prefix, aggPrefix string, n, aggregates int, deleteAfter, rollback bool) ([]string, []string, error) {
	for attempt := 0; ; attempt++ {
		ids, aggs, err := tryTxn(ctx, conn, r, prefix, aggPrefix, n, aggregates, deleteAfter, rollback)
		var me *mysql.MySQLError
		if errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205) && attempt < 20 {
			continue // deadlock or lock wait timeout: the application retries
		}
		return ids, aggs, err
	}
}

func tryTxn(ctx context.Context, conn *sql.Conn, r *rand.Rand, prefix, aggPrefix string, n, aggregates int, deleteAfter, rollback bool) ([]string, []string, error) {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders VALUES (?, ?, 'order')", prefix, n); err != nil {
		return nil, nil, err
	}
	ids := make([]string, n)
	aggs := make([]string, n)
	var vals []string
	var args []any
	multi := r.IntN(2) == 0
	for k := range n {
		ids[k] = fmt.Sprintf("%s-r%d", prefix, k)
		aggs[k] = aggPrefix + strconv.Itoa(r.IntN(aggregates))
		payload := fmt.Sprintf(`{"id": %q, "n": %d, "nested": {"b": 1.50, "a": [true, null]}}`, ids[k], k)
		if multi {
			vals = append(vals, "(?, 'order', ?, 'created', ?)")
			args = append(args, ids[k], aggs[k], payload)
		} else if _, err := tx.ExecContext(ctx, "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, 'order', ?, 'created', ?)", ids[k], aggs[k], payload); err != nil {
			return nil, nil, err
		}
	}
	if multi {
		if _, err := tx.ExecContext(ctx, "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES "+strings.Join(vals, ","), args...); err != nil {
			return nil, nil, err
		}
	}
	if deleteAfter {
		in := make([]any, n)
		for k := range n {
			in[k] = ids[k]
		}
		q := "DELETE FROM outbox WHERE id IN (?" + strings.Repeat(",?", n-1) + ")"
		if _, err := tx.ExecContext(ctx, q, in...); err != nil {
			return nil, nil, err
		}
	}
	if rollback {
		return ids, aggs, tx.Rollback()
	}
	return ids, aggs, tx.Commit()
}

// Payload returns the payload the workload wrote for event id n.
func Payload(id string, n int) string {
	return fmt.Sprintf(`{"id": %q, "n": %d, "nested": {"b": 1.50, "a": [true, null]}}`, id, n)
}

// Delivered is one event as a sink received it.
type Delivered struct {
	ID, AggregateID, GTID string
}

// Report is what Check found.
type Report struct {
	Committed, Delivered, Unique, Duplicates int
}

// Check verifies deliveries against the workload: every committed event
// delivered (at least once, or exactly once when exactlyOnce), nothing rolled
// back delivered, and first deliveries in commit order (by MariaDB GTID
// sequence, and row order within each transaction). Where the producers could
// not read their GTIDs (MySQL), commit order is the order in which COMMIT
// returned: exact with one producer only, so use one there.
func Check(t testing.TB, w *Workload, got []Delivered, exactlyOnce bool) Report {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	// commit rank of each event: (gtid seq, row index)
	type rank struct{ seq, row int }
	ranks := map[string]rank{}
	for i, txn := range w.Txns {
		seq := i + 1
		if txn.GTID != "" {
			seq = gtidSeq(t, txn.GTID)
		}
		for k, id := range txn.IDs {
			ranks[id] = rank{seq, k}
		}
	}
	seen := map[string]int{}
	var last rank
	rep := Report{Committed: len(ranks), Delivered: len(got)}
	lastByAgg := map[string]rank{}
	orderErrs := 0
	for _, d := range got {
		if w.RolledBack[d.ID] {
			t.Errorf("rolled-back event %s was delivered", d.ID)
			continue
		}
		rk, ok := ranks[d.ID]
		if !ok {
			t.Errorf("delivered event %s was never committed by the workload", d.ID)
			continue
		}
		seen[d.ID]++
		if seen[d.ID] > 1 {
			rep.Duplicates++
			continue
		}
		if exactlyOnce && (rk.seq < last.seq || (rk.seq == last.seq && rk.row < last.row)) && orderErrs < 5 {
			t.Errorf("event %s (gtid seq %d row %d) delivered after seq %d row %d: not commit order", d.ID, rk.seq, rk.row, last.seq, last.row)
			orderErrs++
		}
		last = rk
		if prev, ok := lastByAgg[d.AggregateID]; ok && (rk.seq < prev.seq || (rk.seq == prev.seq && rk.row < prev.row)) && orderErrs < 5 {
			t.Errorf("aggregate %s: first delivery of %s out of commit order", d.AggregateID, d.ID)
			orderErrs++
		}
		lastByAgg[d.AggregateID] = rk
	}
	rep.Unique = len(seen)
	missing := 0
	for id := range ranks {
		if seen[id] == 0 {
			if missing < 5 {
				t.Errorf("committed event %s was never delivered", id)
			}
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d committed events were never delivered", missing, len(ranks))
	}
	if exactlyOnce && rep.Duplicates > 0 {
		t.Errorf("%d duplicate deliveries in a run that should deliver exactly once", rep.Duplicates)
	}
	return rep
}

func gtidSeq(t testing.TB, gtid string) int {
	i := strings.LastIndexByte(gtid, '-')
	n, err := strconv.Atoi(gtid[i+1:])
	if err != nil {
		t.Fatalf("bad MariaDB GTID %q", gtid)
	}
	return n
}
