package checkpoint

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/config"
)

// OpenDB opens the database of a MySQL store (checkpoints, dead letters, the
// store's lock) from a go-sql-driver DSN. It sets what the stores rely on
// itself — DATETIME columns scanned as time.Time (parseTime), in UTC — so a
// DSN written without those options, as operators write them, works the same.
// The DSN is never part of an error: it may hold a password.
func OpenDB(dsn string) (*sql.DB, error) {
	cfg, err := parseDSN(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	// A relay frozen in the middle of a save holds its transaction's row
	// locks (the fencing row among them) until the server drops its
	// connection: bound that, so the standby that takes over is not kept
	// waiting for it (it retries meanwhile). Idle connections are closed
	// by the pool before the server would.
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	if _, set := cfg.Params["wait_timeout"]; !set {
		cfg.Params["wait_timeout"] = fmt.Sprint(int(connWaitTimeout / time.Second))
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("checkpoint.dsn: %s", config.DSNReason(err))
	}
	db := sql.OpenDB(conn)
	db.SetConnMaxIdleTime(connWaitTimeout / 2)
	return db, nil
}

// QualifiedTable returns "schema.table" of the table named table (as
// checkpoint.table has it: qualified or not) in the database dsn names; ""
// when neither names a schema.
func QualifiedTable(dsn, table string) string {
	if strings.Contains(table, ".") {
		return table
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil || cfg.DBName == "" {
		return ""
	}
	return cfg.DBName + "." + table
}

func parseDSN(dsn string) (*mysql.Config, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, config.CheckDSN(dsn)
	}
	return cfg, nil
}

// connWaitTimeout is the server's wait_timeout on the store's connections.
const connWaitTimeout = 30 * time.Second

// dbTime scans a DATETIME column whether the driver hands it over as a
// time.Time (parseTime=true) or as text (the default), so a store opened on a
// caller's *sql.DB does not depend on its DSN options.
type dbTime struct{ t *time.Time }

func (d dbTime) Scan(v any) error {
	var s string
	switch v := v.(type) {
	case time.Time:
		*d.t = v.UTC()
		return nil
	case []byte:
		s = string(v)
	case string:
		s = v
	case nil:
		*d.t = time.Time{}
		return nil
	default:
		return fmt.Errorf("scan DATETIME: unsupported type %T", v)
	}
	t, err := time.ParseInLocation("2006-01-02 15:04:05.999999", s, time.UTC)
	if err != nil {
		return fmt.Errorf("scan DATETIME %q: %w", s, err)
	}
	*d.t = t
	return nil
}

var deniedRe = regexp.MustCompile(`user '([^']*)'@'([^']*)'(?: to database '([^']*)')?`)

// StoreGrants are the privileges the user of a MySQL store (checkpoint.dsn)
// needs on its database: SELECT, INSERT, UPDATE and DELETE on the tables it
// keeps (checkpoints, the fencing row, dead letters), CREATE for creating
// them on first use and ALTER for bringing a table of an earlier version up
// to date.
const StoreGrants = "SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER"

// SideTableName is the table of one of the relay's own stores kept beside
// the checkpoint table, in its database (dead letters, delivery attempts):
// table, or def when table is empty. A name that is not a plain identifier
// is an error naming what the table is for.
func SideTableName(what, table, def string) (string, error) {
	if table == "" {
		table = def
	}
	if !ValidTableName(table) {
		return "", fmt.Errorf("%s table name %q: use letters, digits, _ and $ only", what, table)
	}
	return table, nil
}

// CreateSideTable creates table (a SideTableName) with the column and key
// definitions defs, unless it exists, in utf8mb4 whatever the database's
// default (TableOptions); its keys should be binary (KeyColumnType), and
// one of an earlier version brought up to date (UpgradeTable). A
// statement refused for want of a privilege is told with the GRANT that
// would let it run (Denied).
func CreateSideTable(ctx context.Context, db *sql.DB, what, table, defs string) error {
	_, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS `"+table+"` ("+defs+") "+TableOptions)
	if err != nil {
		return Denied(ctx, db, fmt.Errorf("create %s table %q: %w", what, table, err))
	}
	return nil
}

// Denied returns err with the GRANT that would have let it run when the
// server refused a statement to the store's user for want of a privilege
// (MySQL errors 1044, 1142 and 1143), else err unchanged. It asks db who the
// user is (CURRENT_USER()) and which database the DSN names.
func Denied(ctx context.Context, db *sql.DB, err error) error {
	var me *mysql.MySQLError
	if !errors.As(err, &me) || (me.Number != 1044 && me.Number != 1142 && me.Number != 1143) {
		return err
	}
	account, schema := "'USER'@'HOST'", "DATABASE"
	// Error 1044 ("Access denied for user 'u'@'h' to database 'd'") is
	// the connection's own: it names both, and no query can run.
	if m := deniedRe.FindStringSubmatch(me.Message); m != nil {
		account = "'" + m[1] + "'@'" + m[2] + "'"
		if m[3] != "" {
			schema = m[3]
		}
	}
	var user, name sql.NullString
	if me.Number != 1044 && db.QueryRowContext(ctx, "SELECT CURRENT_USER(), DATABASE()").Scan(&user, &name) == nil {
		if u, h, ok := strings.Cut(user.String, "@"); ok {
			account = "'" + u + "'@'" + h + "'"
		}
		if name.Valid {
			schema = name.String
		}
	}
	return fmt.Errorf("%w; the checkpoint store's user needs these privileges on its database: GRANT %s ON `%s`.* TO %s;", err, StoreGrants, schema, account)
}
