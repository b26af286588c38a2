package source

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/config"
)

// Open connects to the first source server that answers (source.host, or
// the first of source.servers that does) and checks the connection.
func Open(ctx context.Context, c config.Source) (*sql.DB, error) {
	return OpenWhere(ctx, c, nil)
}

// OpenWhere connects to the first source server, in order, that answers and,
// when accept is not nil, passes accept (e.g. "a writable primary" for
// prune). The errors of the others are joined in its error.
func OpenWhere(ctx context.Context, c config.Source, accept func(context.Context, *sql.DB) error) (*sql.DB, error) {
	var errs []error
	for _, a := range c.Addrs() {
		db, err := OpenAddr(ctx, c, a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if accept == nil {
			return db, nil
		}
		if err := accept(ctx, db); err != nil {
			db.Close()
			errs = append(errs, fmt.Errorf("%s: %w", a, err))
			continue
		}
		return db, nil
	}
	return nil, errors.Join(errs...)
}

// OpenAddr connects to one source server and checks the connection. TLS
// settings (source.tls) apply to this connection as to the binlog stream.
// The password is never part of an error.
func OpenAddr(ctx context.Context, c config.Source, a config.Addr) (*sql.DB, error) {
	mc := mysql.NewConfig()
	mc.User = c.User
	mc.Passwd = c.Password.Reveal()
	mc.Net = "tcp"
	mc.Addr = a.String()
	mc.Timeout = 10 * time.Second
	mc.ParseTime = true
	tc, err := TLSConfig(c.TLS, a.Host)
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
		if ctx.Err() != nil {
			// Stopped while connecting: the driver reports the cut
			// connection as "bad connection"; the cause is the stop.
			err = ctx.Err()
		}
		return nil, fmt.Errorf("connect to source %s as %q: %w", a, c.User, err)
	}
	return db, nil
}

// Inspect reads the server's flavor, version and identity, and checks the
// flavor against source.flavor.
func Inspect(ctx context.Context, db *sql.DB, c config.Source) (ServerInfo, error) {
	info, err := ReadInfo(ctx, db)
	if err != nil {
		return info, err
	}
	if c.Flavor != "auto" && c.Flavor != info.Flavor {
		return info, fmt.Errorf("source.flavor is %s but the server is %s (%s): set source.flavor: auto or %s", c.Flavor, info.Flavor, info.Version, info.Flavor)
	}
	return info, nil
}
