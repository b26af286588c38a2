// Package source connects to the configured source server: the SQL
// connection the relay, `check` and `status` use to inspect it (flavor,
// identity, GTID state, binlogs). The binlog stream itself is canal's.
//
// It sits below the wiring (relay) and the diagnostics (check), so neither
// depends on the other. Functions are safe for concurrent use.
package source

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/config"
)

// Open connects to the source server and checks the connection. TLS
// settings (source.tls) apply to this connection as to the binlog stream.
// The password is never part of an error.
func Open(ctx context.Context, c config.Source) (*sql.DB, error) {
	mc := mysql.NewConfig()
	mc.User = c.User
	mc.Passwd = c.Password.Reveal()
	mc.Net = "tcp"
	mc.Addr = net.JoinHostPort(c.Host, strconv.Itoa(c.Port))
	mc.Timeout = 10 * time.Second
	mc.ParseTime = true
	tc, err := c.TLS.Build(c.Host)
	if err != nil {
		return nil, err
	}
	mc.TLS = tc
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(4)
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to source %s:%d as %q: %w", c.Host, c.Port, c.User, err)
	}
	return db, nil
}

// Inspect reads the server's flavor, version and identity, and checks the
// flavor against source.flavor.
func Inspect(ctx context.Context, db *sql.DB, c config.Source) (canal.ServerInfo, error) {
	info, err := canal.Inspect(ctx, db)
	if err != nil {
		return info, err
	}
	if c.Flavor != "auto" && c.Flavor != info.Flavor {
		return info, fmt.Errorf("source.flavor is %s but the server is %s (%s): set source.flavor: auto or %s", c.Flavor, info.Flavor, info.Version, info.Flavor)
	}
	return info, nil
}
