package checkpoint

import (
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
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
		return nil, fmt.Errorf("checkpoint.dsn: %s", dsnReason(err))
	}
	db := sql.OpenDB(conn)
	db.SetConnMaxIdleTime(connWaitTimeout / 2)
	return db, nil
}

// CheckDSN reports whether dsn, a go-sql-driver DSN, parses, as OpenDB
// would parse it; its error never quotes the DSN or any part of it.
func CheckDSN(dsn string) error {
	_, err := parseDSN(dsn)
	return err
}

func parseDSN(dsn string) (*mysql.Config, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("checkpoint.dsn does not parse: %s; the form is user:${PASSWORD}@tcp(host:3306)/dbname", dsnReason(err))
	}
	return cfg, nil
}

// dsnReason is the driver's reason a DSN does not parse, without the part
// of the DSN it quotes: the driver cuts the DSN at its last "/" and "@", so
// with a password holding either, what it quotes as a database name, a
// network or a parameter value may be a piece of the password. Its fixed
// messages are kept whole; of the others, only the words before the first
// colon or quote.
func dsnReason(err error) string {
	msg := err.Error()
	if strings.HasPrefix(msg, "invalid DSN: ") && !strings.ContainsAny(msg, `"'`) && !strings.Contains(msg[len("invalid DSN: "):], ":") {
		return msg
	}
	if i := strings.IndexAny(msg, `:"'`); i >= 0 {
		msg = msg[:i]
	}
	return strings.TrimSpace(msg)
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
