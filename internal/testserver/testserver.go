// Package testserver starts private MariaDB servers for tests, and private
// Dolt servers, the MySQL lane's binlog primary (StartDolt, in dolt.go).
//
// Each Server is a mariadbd process of its own: a fresh data directory under a
// temporary folder, a free loopback port, and the binlog options outbox-relay
// needs (ROW format, FULL row image, FULL row metadata). Nothing outside the
// temporary folder is touched, so tests never depend on, or disturb, a server
// that happens to run on the machine.
//
// A Server is safe for concurrent use; Stop waits for the process to exit.
package testserver

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver for the tests' own connections
)

// Options change how the server starts. The zero value gives the defaults.
type Options struct {
	// ServerID is the server's --server-id. Default 1.
	ServerID uint32
	// ExtraArgs are appended to mariadbd's command line, after the defaults,
	// so they can override them (for example "--binlog-format=STATEMENT").
	ExtraArgs []string
	// NoBinlog starts the server without --log-bin.
	NoBinlog bool
}

// Server is a running private mariadbd.
type Server struct {
	endpoint
	Dir     string
	bin     string
	args    []string
	cmd     *exec.Cmd
	exited  chan struct{}
	stopped atomic.Bool
	logPath string
}

var counter atomic.Int64

// Binary returns the path of mariadbd, or an error that says how to install it.
func Binary() (string, error) {
	for _, name := range []string{"mariadbd", "/usr/sbin/mariadbd", "mysqld", "/usr/sbin/mysqld"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("mariadbd not found: install it with `apt-get install mariadb-server` (the tests start their own private server)")
}

// Start starts a server and registers its Stop with t.Cleanup. It fails the
// test when the server cannot start: a missing server never passes silently.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	return startFor(t, "private mariadbd", func() (*Server, error) { return StartServer(opts) })
}

// startFor starts a server of test t (named what, for a failure) with
// start, and registers its Stop with t.Cleanup. A server that cannot start
// fails the test.
func startFor[S interface{ Stop() }](t testing.TB, what string, start func() (S, error)) S {
	t.Helper()
	s, err := start()
	if err != nil {
		t.Fatalf("start %s: %v", what, err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartServer starts a server; the caller must call Stop. Use it from TestMain.
func StartServer(opts Options) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "outbox-relay-mariadb-")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	install, err := exec.LookPath("mariadb-install-db")
	if err != nil {
		install, err = exec.LookPath("mysql_install_db")
		if err != nil {
			return nil, errors.New("mariadb-install-db not found: install `mariadb-server`")
		}
	}
	// Each server has its own tmpdir: servers bootstrapping side by side
	// (test packages run in parallel) must not share /tmp's temporary tables.
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, err
	}
	var out []byte
	for attempt := 0; attempt < 2; attempt++ {
		os.RemoveAll(data)
		out, err = exec.Command(install, "--no-defaults", "--datadir="+data, "--tmpdir="+tmp, "--user=root",
			"--auth-root-authentication-method=normal", "--skip-test-db").CombinedOutput()
		if err == nil {
			break
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("mariadb-install-db: %v\n%s", err, out)
	}
	if opts.ServerID == 0 {
		opts.ServerID = 1
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{endpoint: endpoint{Host: "127.0.0.1", Port: port}, Dir: dir, logPath: filepath.Join(dir, "error.log")}
	args := []string{
		"--no-defaults",
		"--user=root",
		"--datadir=" + data,
		"--tmpdir=" + tmp,
		"--bind-address=127.0.0.1",
		"--port=" + strconv.Itoa(port),
		"--socket=" + filepath.Join(dir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(dir, "mysqld.pid"),
		"--log-error=" + s.logPath,
		"--skip-name-resolve",
		"--server-id=" + strconv.FormatUint(uint64(opts.ServerID), 10),
		"--innodb-buffer-pool-size=64M",
		"--innodb-log-file-size=48M",
		"--innodb-flush-log-at-trx-commit=2",
		"--sync-binlog=0",
		"--max-connections=200",
	}
	if !opts.NoBinlog {
		args = append(args,
			"--log-bin="+filepath.Join(data, "binlog"),
			"--binlog-format=ROW",
			"--binlog-row-image=FULL",
			"--binlog-row-metadata=FULL",
		)
	}
	args = append(args, opts.ExtraArgs...)
	s.bin, s.args = bin, args
	return launchReady(s, dir)
}

// launcher is a server of the package: MariaDB's, Dolt's.
type launcher interface {
	launch() error
	waitReady(limit time.Duration) error
	Stop()
}

// launchReady launches s, whose data is under dir, and waits (a minute at
// most) until it answers. One that does not launch leaves nothing of dir;
// one that does not answer is stopped.
func launchReady[S launcher](s S, dir string) (S, error) {
	var none S
	if err := s.launch(); err != nil {
		os.RemoveAll(dir)
		return none, err
	}
	if err := s.waitReady(60 * time.Second); err != nil {
		s.Stop()
		return none, err
	}
	return s, nil
}

func (s *Server) launch() error {
	s.cmd = exec.Command(s.bin, s.args...)
	s.exited = make(chan struct{})
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := s.exited
	cmd := s.cmd
	go func() { _ = cmd.Wait(); close(exited) }()
	return nil
}

// Restart stops the server (SIGTERM, as an operator would) and starts it
// again on the same data directory and port: its binlog survives, and every
// client connection, replication streams included, is cut.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("mariadbd did not stop within 30s")
	}
	if err := s.launch(); err != nil {
		t.Fatal(err)
	}
	if err := s.waitReady(60 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// Kill SIGKILLs the server (a crash) and waits for it to exit; Start brings
// it back on the same data directory and port.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// Start starts a killed or stopped server again on the same data directory
// and port, and waits until it answers.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if err := s.launch(); err != nil {
		t.Fatal(err)
	}
	if err := s.waitReady(60 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func (s *Server) waitReady(limit time.Duration) error {
	return s.endpoint.waitReady("mariadbd", limit, s.exited, s.logPath)
}

// waitReady pings the server until it answers, it exits (exited closes), or
// limit passes; errors carry the end of its log.
func (e endpoint) waitReady(name string, limit time.Duration, exited <-chan struct{}, logPath string) error {
	deadline := time.Now().Add(limit)
	db, err := sql.Open("mysql", e.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	for {
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("%s exited during start:\n%s", name, tail(log, 3000))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = db.PingContext(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("%s not ready after %s: %v\n%s", name, limit, err, tail(log, 3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// endpoint is a private server's loopback address, with what tests do on it
// as root. Server and DoltServer share it.
type endpoint struct {
	Host string
	Port int
}

// DSN returns a go-sql-driver DSN for root on database db ("" for none).
func (s endpoint) DSN(db string) string {
	return fmt.Sprintf("root@tcp(%s:%d)/%s?multiStatements=true&parseTime=true", s.Host, s.Port, db)
}

// DB opens a connection pool to database db and closes it when the test ends.
func (s endpoint) DB(t testing.TB, db string) *sql.DB {
	t.Helper()
	conn, err := sql.Open("mysql", s.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Exec runs statements as root and fails the test on error.
func (s endpoint) Exec(t testing.TB, stmts ...string) {
	t.Helper()
	db, err := sql.Open("mysql", s.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("exec %q: %v", q, err)
		}
	}
}

// NewDatabase creates a database with a unique name and returns the name.
func (s endpoint) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), counter.Add(1))
	s.Exec(t, "CREATE DATABASE "+name)
	return name
}

// Stop kills the server and removes its directory. It is safe to call twice.
func (s *Server) Stop() {
	if !s.stopped.CompareAndSwap(false, true) {
		return
	}
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM) // mariadbd ignores SIGINT
		select {
		case <-s.exited:
		case <-time.After(15 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	}
	os.RemoveAll(s.Dir)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Main is a package's TestMain: it starts a server, stores it in *srv, runs
// the tests, stops the server and exits. A server that cannot start fails the
// whole package loudly. A fuzzing run (-test.fuzz, and its workers) starts
// no server: fuzz targets do not use one, and each worker would start its own.
func Main(m *testing.M, opts Options, srv **Server) {
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		os.Exit(m.Run())
	}
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		os.Exit(m.Run())
	}
	s, err := StartServer(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "start private mariadbd: %v\n", err)
		os.Exit(1)
	}
	*srv = s
	code := m.Run()
	s.Stop()
	os.Exit(code)
}
