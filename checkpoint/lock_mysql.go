package checkpoint

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/defaults"
)

// DefaultLockTimeout is how long the server keeps the MySQL store's lock for
// a holder that went silent: its lock connection's wait_timeout.
const DefaultLockTimeout = config.DefaultLockTimeout

// FenceTable is the table, in the checkpoint database, holding one fencing
// row per checkpoint table: the epoch that each new lock holder bumps, who
// took it, and when. It is created by the first Lock (utf8mb4, its name
// binary, as the checkpoint table's); one of an earlier version is brought
// up to date by it; checkpoint tables of earlier versions are used
// unchanged.
const FenceTable = "outbox_relay_fence"

// Lock implements Locker with GET_LOCK on a connection of its own: the
// server frees the lock when that connection ends — at once when the relay
// dies, and after LockTimeout of silence (the connection's wait_timeout)
// when the relay is frozen or cut off — and a standby takes over.
//
// Taking the lock bumps the store's fencing epoch; every later Save checks it
// in its transaction, so a relay that lost the lock can no longer write. The
// lock is confirmed every LockTimeout/5; between confirmations Fence lets
// deliveries through only within LockTimeout×4/5 of the last one (sent
// before the server could have started counting the connection idle), so a
// holder that resumes after a freeze delivers nothing before it knows
// whether it still holds the lock.
func (m *MySQL) Lock(ctx context.Context) (func(), <-chan struct{}, error) {
	timeout := m.LockTimeout
	defaults.Positive(&timeout, DefaultLockTimeout)
	timeout = max(timeout.Round(time.Second), 2*time.Second)
	every := timeout / 5
	name, err := lockName(ctx, m.db, m.table)
	if err != nil {
		return nil, nil, err
	}
	if _, err := m.db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS `"+FenceTable+"` ("+
		"name "+KeyColumnType(keyColumnSize)+" NOT NULL PRIMARY KEY,"+
		"epoch BIGINT UNSIGNED NOT NULL,"+
		"holder VARCHAR(255) NOT NULL DEFAULT '',"+
		"taken_at DATETIME(6) NOT NULL"+
		") "+TableOptions); err != nil {
		return nil, nil, Denied(ctx, m.db, fmt.Errorf("create fencing table %q: %w", FenceTable, err))
	}
	// A table of an earlier version: its name (a checkpoint table's name)
	// compared with a collation, as its checkpoint keys did.
	if err := UpgradeTable(ctx, m.db, "fencing", FenceTable, nil, KeyColumn{"name", keyColumnSize}); err != nil {
		return nil, nil, err
	}
	conn, err := m.db.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION wait_timeout = %d", int(timeout/time.Second))); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("set the lock connection's wait_timeout: %w", err)
	}
	var sent time.Time
	for attempt := 0; ; attempt++ {
		var got sql.NullInt64
		sent = time.Now()
		wait := 2 // seconds; the first attempt does not wait, to tell a standby
		if attempt == 0 {
			wait = 0
		}
		if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", name, wait).Scan(&got); err != nil {
			conn.Close()
			return nil, nil, fmt.Errorf("GET_LOCK(%q): %w", name, err)
		}
		if got.Valid && got.Int64 == 1 {
			m.waited = attempt > 0
			break
		}
		if err := ctx.Err(); err != nil {
			conn.Close()
			return nil, nil, err
		}
	}
	epoch, err := m.bumpEpoch(ctx, conn)
	for isLockWaitTimeout(err) && ctx.Err() == nil {
		// The relay this one takes over from froze in a save, holding the
		// fencing row: its connection is dropped within the server's
		// wait_timeout (OpenDB sets 30s), then the row is free.
		epoch, err = m.bumpEpoch(ctx, conn)
	}
	if err != nil {
		_, _ = conn.ExecContext(context.Background(), "DO RELEASE_LOCK(?)", name)
		conn.Close()
		return nil, nil, err
	}
	m.lease.start(epoch, sent.Add(timeout-every))
	lost := make(chan struct{})
	stop := make(chan struct{})
	done := make(chan struct{})
	kick := m.lease.kick
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			case <-kick:
			}
			var mine sql.NullInt64
			sent := time.Now()
			qctx, cancel := context.WithTimeout(context.Background(), min(5*time.Second, timeout/2))
			err := conn.QueryRowContext(qctx, "SELECT IS_USED_LOCK(?) = CONNECTION_ID()", name).Scan(&mine)
			cancel()
			select {
			case <-stop:
				return
			default:
			}
			if err != nil || !mine.Valid || mine.Int64 != 1 {
				m.lease.lose()
				close(lost)
				return
			}
			m.lease.renew(sent.Add(timeout - every))
		}
	}()
	release := func() {
		close(stop)
		<-done
		m.lease.lose() // nothing is saved after release
		qctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = conn.ExecContext(qctx, "DO RELEASE_LOCK(?)", name)
		conn.Close()
	}
	return release, lost, nil
}

// bumpEpoch takes the next fencing epoch of the store, under its lock.
func (m *MySQL) bumpEpoch(ctx context.Context, conn *sql.Conn) (uint64, error) {
	host, _ := os.Hostname()
	holder := FitText(fmt.Sprintf("%s pid %d", host, os.Getpid()), 255)
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("take the fencing epoch: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT INTO `"+FenceTable+"` (name, epoch, holder, taken_at) VALUES (?, 1, ?, UTC_TIMESTAMP(6)) "+
		"ON DUPLICATE KEY UPDATE epoch = epoch + 1, holder = VALUES(holder), taken_at = VALUES(taken_at)", m.table, holder); err != nil {
		return 0, fmt.Errorf("take the fencing epoch: %w", err)
	}
	var epoch uint64
	if err := tx.QueryRowContext(ctx, "SELECT epoch FROM `"+FenceTable+"` WHERE name = ?", m.table).Scan(&epoch); err != nil {
		return 0, fmt.Errorf("take the fencing epoch: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("take the fencing epoch: %w", err)
	}
	return epoch, nil
}

// isLockWaitTimeout reports MySQL's 1205 (lock wait timeout exceeded).
func isLockWaitTimeout(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1205
}

// LockWaited reports whether the last Lock had to wait for another holder:
// this relay was a standby and has taken over.
func (m *MySQL) LockWaited() bool { return m.waited }

// MySQLLockName is the GET_LOCK name of the MySQL store using table in
// database (the connection's default database; a table named
// "schema.table" names its own). GET_LOCK names are server-wide, so the
// database is part of it: relays whose checkpoint tables share a name in
// two databases of one server are not each other's standby. A name over
// the server's 64 characters ends in a hash of the whole.
func MySQLLockName(database, table string) string {
	name := "outbox-relay:" + table
	if !strings.Contains(table, ".") {
		name = "outbox-relay:" + database + "." + table
	}
	if len(name) > 64 {
		sum := sha256.Sum256([]byte(name))
		name = name[:64-17] + "#" + hex.EncodeToString(sum[:8])
	}
	return name
}

// lockName is MySQLLockName for the store's table, in db's database.
func lockName(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, table string) (string, error) {
	var database sql.NullString
	if err := q.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&database); err != nil {
		return "", fmt.Errorf("read the checkpoint connection's database: %w", err)
	}
	return MySQLLockName(database.String, table), nil
}

// MySQLLockHeld reports whether a relay holds the lock of the store using
// table in db's server and database, without taking it.
func MySQLLockHeld(ctx context.Context, db *sql.DB, table string) (bool, error) {
	name, err := lockName(ctx, db, table)
	if err != nil {
		return false, err
	}
	var holder sql.NullInt64
	err = db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", name).Scan(&holder)
	return holder.Valid, err
}
