package mysqlprimary

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Result is the answer to a query: a result set, or (with no Columns) an OK.
type Result struct {
	Columns []string
	Rows    [][]any // string, []byte, integers, or nil for NULL
}

// QueryFunc answers a query matched by a pattern; match holds the
// pattern's submatches. A nil Result is an OK packet. Return Error(...) for a
// MySQL error.
type QueryFunc func(match []string) (*Result, error)

// Error is a MySQL error with its code, for QueryFunc.
func Error(code uint16, message string) error { return mysql.NewError(code, message) }

type rule struct {
	re *regexp.Regexp
	fn func(s *Server, c *conn, m []string) (*Result, error)
}

// OnQuery makes the server answer queries matching pattern (a regular
// expression matched case-insensitively against the whole query, trimmed,
// without a trailing semicolon) with fn, before its built-in answers. The
// latest added rule wins.
func (s *Server) OnQuery(pattern string, fn QueryFunc) {
	re := regexp.MustCompile(`(?is)^(?:` + pattern + `)$`)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = append([]rule{{re: re, fn: func(_ *Server, _ *conn, m []string) (*Result, error) { return fn(m) }}}, s.rules...)
}

// builtin are the queries the relay, its check command, go-mysql's syncer
// and go-sql-driver send. Add a line here when a new query appears: an
// unknown query fails with an error that names it.
var builtin = []rule{
	{re: re(`SET\s+(.+)`), fn: (*Server).set},
	{re: re(`(?:BEGIN|COMMIT|ROLLBACK|START\s+TRANSACTION)`), fn: ok},
	{re: re("USE\\s+`?([^`]+)`?"), fn: func(_ *Server, c *conn, m []string) (*Result, error) { c.db = m[1]; return nil, nil }},
	{re: re(`KILL\s+(?:CONNECTION\s+|QUERY\s+)?(\d+)`), fn: (*Server).killQuery},
	{re: re(`SHOW\s+(?:GLOBAL\s+|SESSION\s+)?VARIABLES(?:\s+LIKE\s+'([^']*)')?`), fn: (*Server).showVariables},
	{re: re(`SHOW\s+(?:GLOBAL\s+|SESSION\s+)?VARIABLES\s+WHERE\s+Variable_name\s+IN\s*\((.*)\)`), fn: (*Server).showVariablesIn},
	{re: re(`SHOW\s+(?:GLOBAL\s+|SESSION\s+)?STATUS(?:\s+LIKE\s+'([^']*)')?`), fn: (*Server).showStatus},
	{re: re(`SHOW\s+(?:BINARY|MASTER)\s+LOGS`), fn: (*Server).showBinaryLogs},
	{re: re(`SHOW\s+MASTER\s+STATUS`), fn: (*Server).showMasterStatus},
	{re: re(`SHOW\s+BINARY\s+LOG\s+STATUS`), fn: (*Server).showBinaryLogStatus},
	{re: re(`SHOW\s+GRANTS(?:\s+FOR\s+CURRENT_USER(?:\(\))?)?`), fn: (*Server).showGrants},
	{re: re(`SHOW\s+(REPLICAS|SLAVE\s+HOSTS)`), fn: (*Server).showReplicas},
	{re: re(`SHOW\s+(REPLICA|SLAVE)\s+STATUS`), fn: (*Server).showReplicaStatus},
	{re: re(`SELECT\s+(.+?)\s+FROM\s+information_schema\.COLUMNS\s+WHERE\s+TABLE_SCHEMA\s*=\s*'([^']*)'\s+AND\s+TABLE_NAME\s*=\s*'([^']*)'(?:\s+ORDER\s+BY\s+ORDINAL_POSITION)?`), fn: (*Server).columns},
	{re: re(`SELECT\s+COUNT\(\*\)\s+FROM\s+information_schema\.TABLES\s+WHERE\s+TABLE_SCHEMA\s*=\s*(DATABASE\(\)|'[^']*')\s+AND\s+TABLE_NAME\s*=\s*'([^']*)'`), fn: (*Server).countTables},
	{re: re(`SELECT\s+TABLE_ROWS\s+FROM\s+information_schema\.TABLES\s+WHERE\s+TABLE_SCHEMA\s*=\s*'([^']*)'\s+AND\s+TABLE_NAME\s*=\s*'([^']*)'`), fn: (*Server).tableRows},
	{re: re(`SELECT\s+(.+?)(?:\s+FROM\s+DUAL)?`), fn: (*Server).selectExprs},
}

func re(p string) *regexp.Regexp { return regexp.MustCompile(`(?is)^` + p + `$`) }

func ok(*Server, *conn, []string) (*Result, error) { return nil, nil }

// query answers one COM_QUERY (binary=false) or COM_STMT_EXECUTE.
func (s *Server) query(c *conn, q string, binary bool) (*mysql.Result, error) {
	text := strings.TrimSpace(strings.TrimRight(strings.TrimSpace(q), ";"))
	s.mu.Lock()
	rules := append(append([]rule(nil), s.rules...), builtin...)
	s.mu.Unlock()
	for _, r := range rules {
		m := r.re.FindStringSubmatch(text)
		if m == nil {
			continue
		}
		res, err := r.fn(s, c, m)
		if err == errNoAnswer {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buildResult(res, binary)
	}
	s.mu.Lock()
	s.unknown = append(s.unknown, text)
	s.mu.Unlock()
	s.logf("no scripted answer for %q", text)
	return nil, mysql.NewError(mysql.ER_UNKNOWN_ERROR, fmt.Sprintf("mysqlprimary has no scripted answer for query %q: add it to the builtin table in internal/mysqlprimary/query.go, or answer it with Server.OnQuery", text))
}

// errNoAnswer lets a rule pass a query on to the next rule.
var errNoAnswer = fmt.Errorf("no answer")

// buildResult encodes a result set with every column a string (VAR_STRING),
// in the text or the binary protocol.
func buildResult(r *Result, binary bool) (*mysql.Result, error) {
	if r == nil || len(r.Columns) == 0 {
		return mysql.NewResultReserveResultset(0), nil
	}
	rs := mysql.NewResultset(len(r.Columns))
	for i, name := range r.Columns {
		rs.Fields[i] = &mysql.Field{Name: []byte(name), Type: mysql.MYSQL_TYPE_VAR_STRING, Charset: 255, ColumnLength: 1024}
	}
	for _, row := range r.Rows {
		if len(row) != len(r.Columns) {
			return nil, fmt.Errorf("row of %d values for %d columns", len(row), len(r.Columns))
		}
		var data []byte
		var nulls []byte
		if binary {
			nulls = make([]byte, (len(row)+7+2)/8)
			data = append(data, 0)
			data = append(data, nulls...)
		}
		for j, v := range row {
			if v == nil {
				if binary {
					data[1+(j+2)/8] |= 1 << ((j + 2) % 8)
				} else {
					data = append(data, 0xfb)
				}
				continue
			}
			data = append(data, mysql.PutLengthEncodedString([]byte(valueText(v)))...)
		}
		rs.RowDatas = append(rs.RowDatas, data)
	}
	return mysql.NewResult(rs), nil
}

func valueText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	default:
		return fmt.Sprint(x)
	}
}

// set stores user variables (@name = value); other assignments are accepted
// and ignored.
func (s *Server) set(c *conn, m []string) (*Result, error) {
	for _, a := range splitTop(m[1]) {
		name, val, found := strings.Cut(a, "=")
		if !found {
			continue // SET NAMES utf8mb4, ...
		}
		name = strings.TrimSpace(name)
		if !strings.HasPrefix(name, "@") || strings.HasPrefix(name, "@@") {
			continue
		}
		c.vars[strings.ToLower(strings.TrimPrefix(name, "@"))] = unquote(strings.TrimSpace(val))
	}
	return nil, nil
}

func (s *Server) killQuery(c *conn, m []string) (*Result, error) {
	id, _ := strconv.ParseUint(m[1], 10, 32)
	s.mu.Lock()
	victim := s.conns[uint32(id)]
	s.mu.Unlock()
	if victim == nil {
		return nil, mysql.NewError(mysql.ER_NO_SUCH_THREAD, fmt.Sprintf("Unknown thread id: %d", id))
	}
	victim.kill()
	return nil, nil
}

// variables are the global variables now, by lower-case name.
func (s *Server) variables() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	port := strconv.Itoa(int(s.Port()))
	v := map[string]string{
		"version":                                s.opts.Version,
		"version_comment":                        "MySQL Community Server - GPL",
		"server_id":                              strconv.FormatUint(uint64(s.opts.ServerID), 10),
		"server_uuid":                            s.uuid.String(),
		"gtid_mode":                              strings.ToUpper(s.opts.GTIDMode),
		"enforce_gtid_consistency":               map[bool]string{true: "ON", false: "OFF"}[s.gtidOn()],
		"gtid_executed":                          mysqlText(s.executed),
		"gtid_purged":                            mysqlText(s.purged),
		"log_bin":                                "ON",
		"log_bin_basename":                       "/var/lib/mysql/" + s.opts.BinlogBaseName,
		"log_replica_updates":                    "ON",
		"binlog_format":                          "ROW",
		"binlog_row_image":                       "FULL",
		"binlog_row_metadata":                    "FULL",
		"binlog_row_value_options":               "",
		"binlog_checksum":                        "CRC32",
		"binlog_transaction_compression":         "OFF",
		"binlog_expire_logs_seconds":             "2592000",
		"binlog_gtid_simple_recovery":            "ON",
		"sync_binlog":                            "1",
		"max_allowed_packet":                     "67108864",
		"transaction_isolation":                  "REPEATABLE-READ",
		"character_set_server":                   "utf8mb4",
		"collation_server":                       "utf8mb4_0900_ai_ci",
		"lower_case_table_names":                 "0",
		"time_zone":                              "SYSTEM",
		"system_time_zone":                       "UTC",
		"hostname":                               "mysqlprimary",
		"port":                                   port,
		"read_only":                              "OFF",
		"super_read_only":                        "OFF",
		"auto_increment_increment":               "1",
		"auto_increment_offset":                  "1",
		"session_track_gtids":                    "OFF",
		"replica_parallel_workers":               "4",
		"performance_schema":                     "ON",
		"default_authentication_plugin":          "mysql_native_password",
		"innodb_version":                         s.opts.Version,
		"require_secure_transport":               "OFF",
		"sql_mode":                               "ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION",
		"binlog_transaction_dependency_tracking": "COMMIT_ORDER",
	}
	if versionNumber(s.opts.Version) < 80400 {
		v["log_slave_updates"] = "ON"
		v["slave_parallel_workers"] = "4"
	}
	for k, val := range s.opts.Variables {
		v[strings.ToLower(k)] = val
	}
	return v
}

func (s *Server) showVariables(_ *conn, m []string) (*Result, error) {
	vars := s.variables()
	names := make([]string, 0, len(vars))
	for k := range vars {
		if m[1] == "" || like(k, m[1]) {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	r := &Result{Columns: []string{"Variable_name", "Value"}}
	for _, k := range names {
		r.Rows = append(r.Rows, []any{k, vars[k]})
	}
	return r, nil
}

func (s *Server) showVariablesIn(_ *conn, m []string) (*Result, error) {
	vars := s.variables()
	r := &Result{Columns: []string{"Variable_name", "Value"}}
	for _, item := range splitTop(m[1]) {
		k := strings.ToLower(unquote(strings.TrimSpace(item)))
		if v, ok := vars[k]; ok {
			r.Rows = append(r.Rows, []any{k, v})
		}
	}
	return r, nil
}

// like matches MySQL's LIKE pattern (% and _), case-insensitively.
func like(s, pattern string) bool {
	var b strings.Builder
	b.WriteString("(?is)^")
	for _, r := range pattern {
		switch r {
		case '%':
			b.WriteString(".*")
		case '_':
			b.WriteString(".")
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String()).MatchString(s)
}

func (s *Server) showStatus(_ *conn, m []string) (*Result, error) {
	status := map[string]string{"Uptime": "1000", "Threads_connected": "1"}
	r := &Result{Columns: []string{"Variable_name", "Value"}}
	for k, v := range status {
		if m[1] == "" || like(k, m[1]) {
			r.Rows = append(r.Rows, []any{k, v})
		}
	}
	return r, nil
}

func (s *Server) showBinaryLogs(*conn, []string) (*Result, error) {
	r := &Result{Columns: []string{"Log_name", "File_size", "Encrypted"}}
	for _, f := range s.BinaryLogs() {
		r.Rows = append(r.Rows, []any{f.Name, f.Size, "No"})
	}
	return r, nil
}

func syntaxError(near string) error {
	return mysql.NewError(mysql.ER_PARSE_ERROR, fmt.Sprintf("You have an error in your SQL syntax; check the manual that corresponds to your MySQL server version for the right syntax to use near '%s' at line 1", near))
}

func (s *Server) binlogStatus() *Result {
	file, pos := s.Position()
	return &Result{
		Columns: []string{"File", "Position", "Binlog_Do_DB", "Binlog_Ignore_DB", "Executed_Gtid_Set"},
		Rows:    [][]any{{file, pos, "", "", mysqlText(mustGTIDSet(s.GTIDExecuted()))}},
	}
}

// SHOW MASTER STATUS was removed in 8.4 (deprecated from 8.2).
func (s *Server) showMasterStatus(*conn, []string) (*Result, error) {
	if versionNumber(s.opts.Version) >= 80400 {
		return nil, syntaxError("MASTER STATUS")
	}
	return s.binlogStatus(), nil
}

// SHOW BINARY LOG STATUS exists from 8.2.
func (s *Server) showBinaryLogStatus(*conn, []string) (*Result, error) {
	if versionNumber(s.opts.Version) < 80200 {
		return nil, syntaxError("BINARY LOG STATUS")
	}
	return s.binlogStatus(), nil
}

func (s *Server) showGrants(*conn, []string) (*Result, error) {
	r := &Result{Columns: []string{fmt.Sprintf("Grants for %s@%%", s.opts.User)}}
	for _, g := range s.opts.Grants {
		r.Rows = append(r.Rows, []any{g})
	}
	return r, nil
}

func (s *Server) showReplicas(_ *conn, m []string) (*Result, error) {
	v := versionNumber(s.opts.Version)
	old := !strings.EqualFold(m[1], "REPLICAS")
	if (old && v >= 80400) || (!old && v < 80022) {
		return nil, syntaxError(m[1])
	}
	cols := []string{"Server_Id", "Host", "Port", "Source_Id", "Replica_UUID"}
	if old {
		cols = []string{"Server_id", "Host", "Port", "Master_id", "Slave_UUID"}
	}
	r := &Result{Columns: cols}
	s.mu.Lock()
	for _, c := range s.conns {
		if c.replica != nil {
			r.Rows = append(r.Rows, []any{c.replica.serverID, c.replica.host, c.replica.port, s.opts.ServerID, c.replica.uuid})
		}
	}
	s.mu.Unlock()
	return r, nil
}

// A primary that replicates from nowhere: an empty result.
func (s *Server) showReplicaStatus(_ *conn, m []string) (*Result, error) {
	v := versionNumber(s.opts.Version)
	old := strings.EqualFold(m[1], "SLAVE")
	if (old && v >= 80400) || (!old && v < 80022) {
		return nil, syntaxError(m[1] + " STATUS")
	}
	return &Result{Columns: []string{"Replica_IO_State", "Source_Host", "Source_Port"}}, nil
}

// columns answers SELECT … FROM information_schema.COLUMNS for one table.
func (s *Server) columns(_ *conn, m []string) (*Result, error) {
	s.mu.Lock()
	t, ok := s.tables[m[2]+"."+m[3]]
	s.mu.Unlock()
	var cols []string
	for _, c := range splitTop(m[1]) {
		cols = append(cols, strings.TrimSpace(c))
	}
	r := &Result{Columns: cols}
	if !ok {
		return r, nil
	}
	for i, c := range t.Columns {
		var row []any
		for _, name := range cols {
			switch strings.ToUpper(name) {
			case "COLUMN_NAME":
				row = append(row, c.Name)
			case "DATA_TYPE":
				row = append(row, c.dataType())
			case "COLUMN_TYPE":
				row = append(row, c.columnType())
			case "IS_NULLABLE":
				row = append(row, map[bool]string{true: "YES", false: "NO"}[c.Nullable])
			case "ORDINAL_POSITION":
				row = append(row, i+1)
			default:
				return nil, errNoAnswer
			}
		}
		r.Rows = append(r.Rows, row)
	}
	return r, nil
}

func (s *Server) countTables(c *conn, m []string) (*Result, error) {
	schema := c.db
	if !strings.EqualFold(m[1], "DATABASE()") {
		schema = unquote(m[1])
	}
	s.mu.Lock()
	_, ok := s.tables[schema+"."+m[2]]
	s.mu.Unlock()
	n := 0
	if ok {
		n = 1
	}
	return &Result{Columns: []string{"COUNT(*)"}, Rows: [][]any{{n}}}, nil
}

// tableRows answers information_schema.TABLES.TABLE_ROWS: the scripted
// tables keep no rows (their events are scripted into the binlog).
func (s *Server) tableRows(_ *conn, m []string) (*Result, error) {
	s.mu.Lock()
	_, ok := s.tables[m[1]+"."+m[2]]
	s.mu.Unlock()
	r := &Result{Columns: []string{"TABLE_ROWS"}}
	if ok {
		r.Rows = [][]any{{0}}
	}
	return r, nil
}

var (
	sysVarRe  = regexp.MustCompile(`(?i)^@@(?:(global|session|local)\.)?([a-z_0-9]+)$`)
	userVarRe = regexp.MustCompile(`(?i)^@([a-z_0-9]+)$`)
	funcRe    = regexp.MustCompile(`(?i)^([a-z_0-9]+)\s*\((.*)\)$`)
	numberRe  = regexp.MustCompile(`^-?\d+(\.\d+)?$`)
)

// selectExprs evaluates SELECT of system and user variables, a few
// functions and literals, without FROM.
func (s *Server) selectExprs(c *conn, m []string) (*Result, error) {
	items := splitTop(m[1])
	r := &Result{}
	var row []any
	var vars map[string]string
	for _, it := range items {
		it = strings.TrimSpace(it)
		name := it
		if i := strings.LastIndex(strings.ToUpper(it), " AS "); i > 0 {
			name = unquote(strings.TrimSpace(it[i+4:]))
			it = strings.TrimSpace(it[:i])
		}
		var v any
		switch {
		case sysVarRe.MatchString(it):
			sm := sysVarRe.FindStringSubmatch(it)
			if vars == nil {
				vars = s.variables()
			}
			val, ok := vars[strings.ToLower(sm[2])]
			if !ok {
				return nil, mysql.NewError(mysql.ER_UNKNOWN_SYSTEM_VARIABLE, fmt.Sprintf("Unknown system variable '%s'", sm[2]))
			}
			v = val
		case userVarRe.MatchString(it):
			val, ok := c.vars[strings.ToLower(userVarRe.FindStringSubmatch(it)[1])]
			if ok {
				v = val
			}
		case numberRe.MatchString(it):
			v = it
		case len(it) >= 2 && (it[0] == '\'' || it[0] == '"'):
			v = unquote(it)
		case funcRe.MatchString(it):
			fm := funcRe.FindStringSubmatch(it)
			switch strings.ToUpper(fm[1]) {
			case "VERSION":
				v = s.opts.Version
			case "CURRENT_USER", "USER", "SESSION_USER":
				v = s.opts.User + "@%"
				if strings.ToUpper(fm[1]) != "CURRENT_USER" {
					v = s.opts.User + "@127.0.0.1"
				}
			case "DATABASE", "SCHEMA":
				if c.db != "" {
					v = c.db
				}
			case "CONNECTION_ID":
				v = c.id
			case "NOW", "CURRENT_TIMESTAMP", "UTC_TIMESTAMP":
				v = timeNow().Format("2006-01-02 15:04:05")
			case "GTID_SUBSET", "GTID_SUBTRACT":
				args := splitTop(fm[2])
				if len(args) != 2 {
					return nil, errNoAnswer
				}
				a, err1 := parseGTIDSet(unquote(strings.TrimSpace(args[0])))
				b, err2 := parseGTIDSet(unquote(strings.TrimSpace(args[1])))
				if err1 != nil || err2 != nil {
					return nil, mysql.NewError(1772, "Malformed GTID set specification")
				}
				if strings.EqualFold(fm[1], "GTID_SUBSET") {
					v = map[bool]int{true: 1, false: 0}[b.Contain(a)]
				} else {
					v = minus(a, b).String()
				}
			default:
				if _, known := mysqlOnlyOnMariaDB[strings.ToUpper(fm[1])]; known {
					return nil, mysql.NewError(1305, fmt.Sprintf("FUNCTION %s.%s does not exist", c.dbOr("mysql"), fm[1]))
				}
				return nil, errNoAnswer
			}
		default:
			return nil, errNoAnswer
		}
		r.Columns = append(r.Columns, name)
		row = append(row, v)
	}
	r.Rows = [][]any{row}
	return r, nil
}

// Functions MariaDB has and MySQL does not: MySQL says they do not exist.
var mysqlOnlyOnMariaDB = map[string]struct{}{"BINLOG_GTID_POS": {}}

func (c *conn) dbOr(d string) string {
	if c.db != "" {
		return c.db
	}
	return d
}

// quotes follows the quoting of a statement read rune by rune.
type quotes struct{ open rune }

// in reports whether r, the statement's next rune, is quoted: inside
// single, double or back quotes, or one of the quotes themselves.
func (q *quotes) in(r rune) bool {
	switch {
	case q.open != 0:
		if r == q.open {
			q.open = 0
		}
		return true
	case r == '\'' || r == '"' || r == '`':
		q.open = r
		return true
	}
	return false
}

// splitTop splits s at commas outside quotes and parentheses.
func splitTop(s string) []string {
	var out []string
	depth := 0
	var q quotes
	start := 0
	for i, r := range s {
		switch {
		case q.in(r):
		case r == '(':
			depth++
		case r == ')':
			depth--
		case r == ',' && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '\'' || s[0] == '"' || s[0] == '`') && s[len(s)-1] == s[0] {
		inner := s[1 : len(s)-1]
		return strings.NewReplacer(`\\`, `\`, `\'`, `'`, `''`, `'`).Replace(inner)
	}
	return s
}
