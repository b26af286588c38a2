package mysqlprimary

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/server"
	"github.com/google/uuid"
)

// Options configure a scripted primary. The zero value is a MySQL 8.0.36
// primary with gtid_mode=ON.
type Options struct {
	// Version is what VERSION() and the FORMAT_DESCRIPTION event say, e.g.
	// "8.0.36" or "8.4.2". Default "8.0.36". Version decides which SHOW
	// statements exist (SHOW MASTER STATUS until 8.3, SHOW BINARY LOG STATUS
	// from 8.2, SHOW REPLICAS from 8.0.22) and whether FORMAT_DESCRIPTION
	// announces GTID_TAGGED_LOG_EVENT (from 8.1).
	Version string
	// ServerUUID is @@server_uuid and the UUID of the GTIDs the server
	// numbers itself. Default a random UUID.
	ServerUUID string
	// ServerID is @@server_id, written in every event. Default 1.
	ServerID uint32
	// GTIDMode is @@gtid_mode: "ON" (default), "OFF", "OFF_PERMISSIVE" or
	// "ON_PERMISSIVE". Only ON numbers transactions; the others write
	// ANONYMOUS_GTID_LOG_EVENTs and refuse COM_BINLOG_DUMP_GTID.
	GTIDMode string
	// Purged is the initial gtid_purged: transactions executed before the
	// first binlog file (also in gtid_executed).
	Purged string
	// RejectDump, when not zero, is the MySQL error code with which the
	// server answers COM_BINLOG_DUMP and COM_BINLOG_DUMP_GTID, e.g. 1047
	// (ER_UNKNOWN_COM_ERROR) for a server without the dump commands.
	RejectDump uint16
	// IgnoreSet, when set, serves a COM_BINLOG_DUMP_GTID from the first
	// binlog file, as if its GTID set were empty, unless the request carries
	// BINLOG_THROUGH_GTID (0x04): what Dolt does (go-mysql sends flags 0).
	IgnoreSet bool
	// Heartbeat overrides the heartbeat period the replica asks for with
	// @source_heartbeat_period: 0 honours the request, a positive value is
	// used whatever is asked (as Dolt's fixed 30 s), a negative value sends
	// no heartbeats.
	Heartbeat time.Duration
	// User and Password are the only account. Default "relay", "relay".
	User     string
	Password string
	// Schema is the database of the default outbox table, of query events,
	// and DATABASE() for connections without one. Default "app".
	Schema string
	// BinlogBaseName names the binlog files. Default "binlog".
	BinlogBaseName string
	// Variables add to or override the server's global variables (SHOW
	// GLOBAL VARIABLES and @@name), by lower-case name.
	Variables map[string]string
	// Grants are the SHOW GRANTS lines. Default: REPLICATION SLAVE,
	// REPLICATION CLIENT and SELECT on *.*.
	Grants []string
}

func (o *Options) defaults() {
	if o.Version == "" {
		o.Version = "8.0.36"
	}
	if o.ServerUUID == "" {
		o.ServerUUID = uuid.NewString()
	}
	if o.ServerID == 0 {
		o.ServerID = 1
	}
	if o.GTIDMode == "" {
		o.GTIDMode = "ON"
	}
	if o.User == "" {
		o.User, o.Password = "relay", "relay"
	}
	if o.Schema == "" {
		o.Schema = "app"
	}
	if o.BinlogBaseName == "" {
		o.BinlogBaseName = "binlog"
	}
	if o.Grants == nil {
		o.Grants = []string{fmt.Sprintf("GRANT SELECT, RELOAD, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `%s`@`%%`", o.User)}
	}
}

// Server is a scripted MySQL 8 primary listening on 127.0.0.1. Its methods
// may be called from any goroutine.
type Server struct {
	t      testing.TB
	opts   Options
	uuid   uuid.UUID
	ln     net.Listener
	conf   *server.Server
	outbox Table

	mu        sync.Mutex
	files     []*binlogFile
	fileSeq   int
	executed  *gtidSet
	purged    *gtidSet
	history   []committed
	tableIDs  map[string]uint64
	tables    map[string]Table
	prepared  map[string]string // XA PREPAREd gtrid -> the prepare's GTID
	failDumps int               // the next dumps refused with a spurious 1236
	xid       uint64
	changed   chan struct{} // closed and replaced when the binlog changes
	conns     map[uint32]*conn
	rules     []rule // added by tests, tried before the built-in ones
	unknown   []string
	closed    bool

	wg sync.WaitGroup
}

// Start starts a scripted primary and stops it when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := start(t, opts, nil)
	if err != nil {
		t.Fatalf("mysqlprimary: %v", err)
	}
	return s
}

func start(t testing.TB, opts Options, history []committed) (*Server, error) {
	opts.defaults()
	u, err := uuid.Parse(opts.ServerUUID)
	if err != nil {
		return nil, fmt.Errorf("server_uuid %q: %w", opts.ServerUUID, err)
	}
	purged, err := parseGTIDSet(opts.Purged)
	if err != nil {
		return nil, fmt.Errorf("purged %q: %w", opts.Purged, err)
	}
	s := &Server{
		t:        t,
		opts:     opts,
		uuid:     u,
		outbox:   OutboxTable(opts.Schema),
		executed: cloneSet(purged),
		purged:   purged,
		tableIDs: map[string]uint64{},
		tables:   map[string]Table{},
		prepared: map[string]string{},
		changed:  make(chan struct{}),
		conns:    map[uint32]*conn{},
	}
	s.tables[s.outbox.fullName()] = s.outbox
	s.mu.Lock()
	s.newFile(uint32(time.Now().Unix()))
	for _, c := range history {
		if err := s.writeTxn(c); err != nil {
			s.mu.Unlock()
			return nil, err
		}
	}
	s.mu.Unlock()
	// mysql_native_password without TLS: what both go-sql-driver and
	// go-mysql's client accept with no extra settings.
	s.conf = server.NewServer(opts.Version, mysql.DEFAULT_COLLATION_ID, mysql.AUTH_NATIVE_PASSWORD, nil, nil)
	s.ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.Close)
	return s, nil
}

// StartReplica starts a second server that holds this server's binlog
// history (same GTIDs, rows, original server ids and commit times) under its
// own options, as a replica promoted after a failover would: give it another
// ServerUUID and ServerID. Transactions in lacking (a GTID set, may be
// empty) are left out, as if the replica never received them. Its
// gtid_purged is this server's unless opts.Purged says otherwise. XA
// transactions prepared here (and not lacking) are prepared there: XACommit
// and XARollback on the replica end them.
func (s *Server) StartReplica(t testing.TB, opts Options, lacking string) *Server {
	t.Helper()
	skip, err := parseGTIDSet(lacking)
	if err != nil {
		t.Fatalf("mysqlprimary: lacking %q: %v", lacking, err)
	}
	s.mu.Lock()
	var history []committed
	for _, c := range s.history {
		if !c.gtid.anonymous && containsGTID(skip, c.gtid.sid, c.gtid.tag, c.gtid.gno) {
			continue
		}
		history = append(history, c)
	}
	if opts.Purged == "" {
		opts.Purged = minus(s.purged, skip).String()
	}
	if opts.Version == "" {
		opts.Version = s.opts.Version
	}
	if opts.Schema == "" {
		opts.Schema = s.opts.Schema
	}
	// XA transactions prepared here are prepared there too, unless their
	// XA PREPARE is lacking: the promoted server can XA COMMIT them.
	prepared := map[string]string{}
	for gtrid, g := range s.prepared {
		if sid, tag, gno, err := parseGTID(g); err == nil && containsGTID(skip, sid, tag, gno) {
			continue
		}
		prepared[gtrid] = g
	}
	s.mu.Unlock()
	r, err := start(t, opts, history)
	if err != nil {
		t.Fatalf("mysqlprimary: %v", err)
	}
	r.mu.Lock()
	r.prepared = prepared
	r.mu.Unlock()
	return r
}

// Port is the TCP port on 127.0.0.1.
func (s *Server) Port() uint16 { return uint16(s.ln.Addr().(*net.TCPAddr).Port) }

// Addr is "127.0.0.1:port".
func (s *Server) Addr() string { return s.ln.Addr().String() }

// User and Password are the account to connect with.
func (s *Server) User() string     { return s.opts.User }
func (s *Server) Password() string { return s.opts.Password }

// ServerUUID is @@server_uuid.
func (s *Server) ServerUUID() string { return s.uuid.String() }

// ServerID is @@server_id.
func (s *Server) ServerID() uint32 { return s.opts.ServerID }

// Outbox is the server's default outbox table (OutboxTable(Options.Schema)).
func (s *Server) Outbox() Table { return s.outbox }

// DSN is a go-sql-driver/mysql DSN for database db ("" for none).
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("%s:%s@tcp(%s)/%s", s.opts.User, s.opts.Password, s.Addr(), db)
}

// GTIDExecuted is @@GLOBAL.gtid_executed, without MySQL's newlines.
func (s *Server) GTIDExecuted() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.executed.String()
}

// GTIDPurged is @@GLOBAL.gtid_purged, without MySQL's newlines.
func (s *Server) GTIDPurged() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.purged.String()
}

// BinlogFile is one row of SHOW BINARY LOGS.
type BinlogFile struct {
	Name string
	Size uint32
}

// BinaryLogs lists the binlog files, oldest first.
func (s *Server) BinaryLogs() []BinlogFile {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]BinlogFile, len(s.files))
	for i, f := range s.files {
		out[i] = BinlogFile{Name: f.name, Size: f.size}
	}
	return out
}

// Position is the active file and the position after its last event, as
// SHOW BINARY LOG STATUS reports.
func (s *Server) Position() (string, uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.files[len(s.files)-1]
	return f.name, f.size
}

// UnknownQueries are the queries the server had no answer for (each got an
// error naming it).
func (s *Server) UnknownQueries() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.unknown...)
}

// Streams is the number of binlog dumps being served now.
func (s *Server) Streams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.conns {
		if c.dumping {
			n++
		}
	}
	return n
}

// KillConnections drops every client connection at once, without an error
// packet, as a crashed or fenced primary does.
func (s *Server) KillConnections() {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.kill()
	}
}

// Close stops listening, drops every connection and waits for their
// goroutines. It is called when the test ends; calling it earlier simulates
// a primary going away.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.wake()
	s.mu.Unlock()
	_ = s.ln.Close()
	s.KillConnections()
	s.wg.Wait()
}

func (s *Server) gtidOn() bool { return strings.EqualFold(s.opts.GTIDMode, "ON") }

func (s *Server) logf(format string, args ...any) {
	s.t.Helper()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if !closed {
		s.t.Logf("mysqlprimary %s: "+format, append([]any{s.Addr()}, args...)...)
	}
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go s.serve(nc)
	}
}

// conn is one client connection.
type conn struct {
	s       *Server
	nc      net.Conn
	c       *server.Conn
	id      uint32
	db      string
	vars    map[string]string // user variables, lower-case names
	dumping bool              // serving a binlog dump (s.mu)
	replica *replicaInfo      // from COM_REGISTER_SLAVE
	done    chan struct{}     // closed by kill
	once    sync.Once
}

type replicaInfo struct {
	serverID uint32
	host     string
	port     uint16
	uuid     string
}

func (c *conn) kill() {
	c.once.Do(func() {
		close(c.done)
		_ = c.nc.Close()
	})
}

func (s *Server) serve(nc net.Conn) {
	defer s.wg.Done()
	cn := &conn{s: s, nc: nc, vars: map[string]string{}, db: "", done: make(chan struct{})}
	auth := server.NewInMemoryAuthenticationHandler(mysql.AUTH_NATIVE_PASSWORD)
	if err := auth.AddUser(s.opts.User, s.opts.Password); err != nil {
		_ = nc.Close()
		return
	}
	h := &handler{c: cn}
	c, err := s.conf.NewCustomizedConn(nc, auth, h)
	if err != nil {
		_ = nc.Close()
		return
	}
	cn.c = c
	cn.id = c.ConnectionID()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return
	}
	s.conns[cn.id] = cn
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, cn.id)
		s.mu.Unlock()
		cn.kill()
	}()
	for {
		if err := c.HandleCommand(); err != nil {
			return
		}
		if c.Closed() {
			return
		}
	}
}

// handler answers one connection's commands (go-mysql's server.Handler).
// It does not implement server.ReplicationHandler, so the replication
// commands reach HandleOtherCommand with their raw bytes.
type handler struct{ c *conn }

func (h *handler) UseDB(db string) error {
	h.c.db = db
	return nil
}

func (h *handler) HandleQuery(q string) (*mysql.Result, error) {
	return h.c.s.query(h.c, q, false)
}

func (h *handler) HandleFieldList(table, wildcard string) ([]*mysql.Field, error) {
	return nil, mysql.NewError(mysql.ER_UNKNOWN_COM_ERROR, "mysqlprimary: COM_FIELD_LIST is not scripted")
}

func (h *handler) HandleStmtPrepare(q string) (int, int, any, error) {
	return countParams(q), 0, q, nil
}

func (h *handler) HandleStmtExecute(ctx any, q string, args []any) (*mysql.Result, error) {
	full, err := interpolate(q, args)
	if err != nil {
		return nil, mysql.NewError(mysql.ER_UNKNOWN_ERROR, err.Error())
	}
	return h.c.s.query(h.c, full, true)
}

func (h *handler) HandleStmtClose(ctx any) error { return nil }

func (h *handler) HandleOtherCommand(cmd byte, data []byte) error {
	s := h.c.s
	switch cmd {
	case mysql.COM_REGISTER_SLAVE:
		r, err := parseRegister(data)
		if err != nil {
			return err
		}
		r.uuid = h.c.vars["replica_uuid"]
		if r.uuid == "" {
			r.uuid = h.c.vars["slave_uuid"]
		}
		s.mu.Lock()
		h.c.replica = &r
		s.mu.Unlock()
		return nil // OK packet
	case mysql.COM_BINLOG_DUMP, mysql.COM_BINLOG_DUMP_GTID:
		if s.opts.RejectDump != 0 {
			return rejectDump(s.opts.RejectDump, cmd)
		}
		req, err := parseDump(cmd, data)
		if err != nil {
			return err
		}
		if s.opts.IgnoreSet && req.gtid && req.flags&dumpThroughGTIDSet == 0 {
			req.set = newGTIDSet()
		}
		return s.dump(h.c, req)
	}
	return mysql.NewError(mysql.ER_UNKNOWN_COM_ERROR, "Unknown command")
}

func rejectDump(code uint16, cmd byte) error {
	if code == mysql.ER_UNKNOWN_COM_ERROR {
		return mysql.NewError(code, "Unknown command")
	}
	return mysql.NewError(code, fmt.Sprintf("mysqlprimary: command %d rejected by Options.RejectDump", cmd))
}

func parseRegister(data []byte) (replicaInfo, error) {
	var r replicaInfo
	if len(data) < 4+1 {
		return r, mysql.ErrMalformPacket
	}
	r.serverID = uint32(data[0]) | uint32(data[1])<<8 | uint32(data[2])<<16 | uint32(data[3])<<24
	p := 4
	str := func() (string, error) {
		if p >= len(data) {
			return "", mysql.ErrMalformPacket
		}
		n := int(data[p])
		p++
		if p+n > len(data) {
			return "", mysql.ErrMalformPacket
		}
		v := string(data[p : p+n])
		p += n
		return v, nil
	}
	var err error
	if r.host, err = str(); err != nil {
		return r, err
	}
	if _, err = str(); err != nil { // user
		return r, err
	}
	if _, err = str(); err != nil { // password
		return r, err
	}
	if p+2 <= len(data) {
		r.port = uint16(data[p]) | uint16(data[p+1])<<8
	}
	return r, nil
}

// countParams counts the ? placeholders outside quotes.
func countParams(q string) int {
	n := 0
	var qs quotes
	for _, r := range q {
		if !qs.in(r) && r == '?' {
			n++
		}
	}
	return n
}

// interpolate replaces the placeholders with SQL literals.
func interpolate(q string, args []any) (string, error) {
	var b strings.Builder
	var qs quotes
	i := 0
	for _, r := range q {
		if !qs.in(r) && r == '?' {
			if i >= len(args) {
				return "", errors.New("more placeholders than arguments")
			}
			b.WriteString(literal(args[i]))
			i++
			continue
		}
		b.WriteRune(r)
	}
	return b.String(), nil
}

func literal(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case mysql.TypedBytes: // go-mysql's string and blob parameters
		return quoteString(string(x.Bytes))
	case []byte:
		return quoteString(string(x))
	case string:
		return quoteString(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	default:
		return quoteString(fmt.Sprint(x))
	}
}

func quoteString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

var timeNow = time.Now
