package checkpoint

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Lock implements Locker with GET_LOCK on a connection of its own: the
// server frees the lock when that connection ends, so a relay that dies
// hands over to a standby within the time the server notices.
func (m *MySQL) Lock(ctx context.Context) (func(), <-chan struct{}, error) {
	name := MySQLLockName(m.table)
	conn, err := m.db.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	for {
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 2)", name).Scan(&got); err != nil {
			conn.Close()
			return nil, nil, fmt.Errorf("GET_LOCK(%q): %w", name, err)
		}
		if got.Valid && got.Int64 == 1 {
			break
		}
		if err := ctx.Err(); err != nil {
			conn.Close()
			return nil, nil, err
		}
	}
	lost := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				var mine sql.NullInt64
				qctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := conn.QueryRowContext(qctx, "SELECT IS_USED_LOCK(?) = CONNECTION_ID()", name).Scan(&mine)
				cancel()
				if err != nil || !mine.Valid || mine.Int64 != 1 {
					close(lost)
					return
				}
			}
		}
	}()
	release := func() {
		close(stop)
		qctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = conn.ExecContext(qctx, "DO RELEASE_LOCK(?)", name)
		conn.Close()
	}
	return release, lost, nil
}

// MySQLLockName is the GET_LOCK name of the MySQL store using table.
func MySQLLockName(table string) string {
	name := "outbox-relay:" + table
	if len(name) > 64 {
		name = name[:64]
	}
	return name
}

// MySQLLockHeld reports whether a relay holds the lock of the store using
// table in db's server, without taking it.
func MySQLLockHeld(ctx context.Context, db *sql.DB, table string) (bool, error) {
	var holder sql.NullInt64
	err := db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", MySQLLockName(table)).Scan(&holder)
	return holder.Valid, err
}
