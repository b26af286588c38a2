package config

import (
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// CheckDSN reports whether dsn, a go-sql-driver DSN, parses, as
// checkpoint.OpenDB parses it; its error never quotes the DSN or any part
// of it.
func CheckDSN(dsn string) error {
	if _, err := mysql.ParseDSN(dsn); err != nil {
		return fmt.Errorf("checkpoint.dsn does not parse: %s; the form is user:${PASSWORD}@tcp(host:3306)/dbname", DSNReason(err))
	}
	return nil
}

// DSNReason is the driver's reason a DSN does not parse, without the part
// of the DSN it quotes: the driver cuts the DSN at its last "/" and "@", so
// with a password holding either, what it quotes as a database name, a
// network or a parameter value may be a piece of the password. Its fixed
// messages are kept whole; of the others, only the words before the first
// colon or quote.
func DSNReason(err error) string {
	msg := err.Error()
	if strings.HasPrefix(msg, "invalid DSN: ") && !strings.ContainsAny(msg, `"'`) && !strings.Contains(msg[len("invalid DSN: "):], ":") {
		return msg
	}
	if i := strings.IndexAny(msg, `:"'`); i >= 0 {
		msg = msg[:i]
	}
	return strings.TrimSpace(msg)
}

// ValidTableName reports whether name can be used, unquoted of any risk, as
// the table of a MySQL store (checkpoints or dead letters).
func ValidTableName(name string) bool { return identRe.MatchString(name) }
