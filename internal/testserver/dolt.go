package testserver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// Dolt is the MySQL lane's server: Dolt (github.com/dolthub/dolt) is an
// independent implementation of the MySQL protocol that writes a MySQL-format
// binlog and serves it to replicas, so the relay can be run against a MySQL
// flavor binlog on machines where no MySQL server can be installed.
//
// Dolt is not MySQL. What it does differently, as met by the tests (Dolt
// 2.2.0 reporting 8.0.31):
//   - it reads a COM_BINLOG_DUMP_GTID's GTID set only with the
//     BINLOG_THROUGH_GTID flag, which go-mysql does not send: every
//     (re)connect is sent the whole binlog (canal's reader passes over the
//     transactions its start set holds; tests across crashes still assert
//     that nothing was lost, not that nothing was delivered twice);
//   - it refuses a GTID dump that arrives while a commit is in flight with
//     error 1236 ("purged", naming the committing transaction), which the
//     relay, as on MySQL, takes for a lost position: tests commit only while
//     the relay streams or is stopped;
//   - no file/position dump (error 1047), no SHOW REPLICAS, no SHOW BINLOG
//     EVENTS; SHOW GRANTS needs SELECT on mysql.*; errors MySQL numbers
//     (1193, 1142, ...) come as 1105 with MySQL's text;
//   - heartbeats every 30 s whatever is asked (use read_timeout > 30s);
//   - the stream's first, artificial ROTATE carries a checksum though asked
//     for none;
//   - a transaction is logged as its net change (insert-then-delete leaves
//     nothing), JSON numbers are all doubles and keys are sorted by name;
//   - SIGTERM waits for open connections, replication streams included, and
//     can take 30 s: servers are stopped with SIGKILL.

// DoltModule is the Dolt version the MySQL lane is tested with.
const DoltModule = "github.com/dolthub/dolt/go/cmd/dolt@v0.40.5-0.20260715172757-a6690826d767"

// DoltEnv names the environment variable that points the tests at a dolt
// binary. .ci/run builds one and sets it.
const DoltEnv = "OUTBOX_RELAY_DOLT"

// DoltToolsDir is where .ci/run keeps the dolt binary it builds: a cache
// directory outside the repository ($XDG_CACHE_HOME or ~/.cache).
func DoltToolsDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "outbox-relay-tools", "bin")
}

// DoltInstall is the command that builds the dolt binary the tests look for.
func DoltInstall() string {
	return fmt.Sprintf("GOBIN=%s go install %s (needs gcc; or run .ci/run)", DoltToolsDir(), DoltModule)
}

// DoltBinary returns the dolt binary the tests use: $OUTBOX_RELAY_DOLT, then
// dolt on PATH, then the one .ci/run builds into DoltToolsDir.
func DoltBinary() (string, error) {
	if p := os.Getenv(DoltEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", DoltEnv, p, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("dolt"); err == nil {
		return p, nil
	}
	if dir := DoltToolsDir(); dir != "" {
		p := filepath.Join(dir, "dolt")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("dolt not found (%s, PATH, %s): build it with %s", DoltEnv, DoltToolsDir(), DoltInstall())
}

// RequireDolt returns the dolt binary. When there is none it skips the test
// with the command that builds it — except under CI (CI=true) or when
// OUTBOX_RELAY_DOLT names a binary that is not there, where a missing server
// is a failure: the MySQL lane never passes silently there.
func RequireDolt(t testing.TB) string {
	t.Helper()
	bin, err := DoltBinary()
	if err == nil {
		return bin
	}
	if os.Getenv("CI") == "true" || os.Getenv(DoltEnv) != "" {
		t.Fatalf("MySQL lane: %v", err)
	}
	t.Skipf("MySQL lane skipped: %v", err)
	return ""
}

// DoltOptions change how a Dolt server starts. The zero value gives the
// defaults.
type DoltOptions struct {
	// ServerID is the server's @@server_id. Default 1.
	ServerID uint32
}

// DoltServer is a running private `dolt sql-server`, set up as a binlog
// primary (log_bin, gtid_mode=ON, enforce_gtid_consistency=ON,
// binlog_row_metadata=FULL as the relay needs), with a root
// account that has every privilege. It is safe for concurrent use.
type DoltServer struct {
	endpoint
	// Dir holds everything of this server: its data directory, the private
	// HOME that holds dolt's global config, and its log.
	Dir     string
	bin     string
	data    string
	env     []string
	cmd     *exec.Cmd
	exited  chan struct{}
	stopped atomic.Bool
	logPath string
}

// StartDolt starts a Dolt server and registers its Stop with t.Cleanup. It
// skips the test when dolt is absent (fails under CI, see RequireDolt) and
// fails it when the server cannot start.
func StartDolt(t testing.TB, opts DoltOptions) *DoltServer {
	t.Helper()
	bin := RequireDolt(t)
	return startFor(t, "private dolt sql-server", func() (*DoltServer, error) { return startDolt(bin, opts) })
}

// StartDoltServer starts a Dolt server; the caller must call Stop.
func StartDoltServer(opts DoltOptions) (*DoltServer, error) {
	bin, err := DoltBinary()
	if err != nil {
		return nil, err
	}
	return startDolt(bin, opts)
}

func startDolt(bin string, opts DoltOptions) (*DoltServer, error) {
	if opts.ServerID == 0 {
		opts.ServerID = 1
	}
	dir, err := os.MkdirTemp("", "outbox-relay-dolt-")
	if err != nil {
		return nil, err
	}
	home := filepath.Join(dir, "home")
	data := filepath.Join(dir, "data")
	for _, d := range []string{home, data} {
		if err := os.Mkdir(d, 0o700); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &DoltServer{
		endpoint: endpoint{Host: "127.0.0.1", Port: port}, Dir: dir, bin: bin, data: data,
		logPath: filepath.Join(dir, "dolt.log"),
		// dolt keeps its global config (user name, email, metrics opt-out)
		// under DOLT_ROOT_PATH, else $HOME: both point into dir, so the
		// real home is never read or written.
		env: append(os.Environ(), "HOME="+home, "DOLT_ROOT_PATH="+home, "DOLT_DISABLE_EVENT_FLUSH=true"),
	}
	// Each step is a separate dolt process; a binlog primary must be
	// configured before sql-server starts (log_bin is read at start only).
	steps := [][]string{
		{"config", "--global", "--add", "user.name", "outbox-relay tests"},
		{"config", "--global", "--add", "user.email", "tests@outbox-relay.invalid"},
		{"config", "--global", "--add", "metrics.disabled", "true"},
		{"init"},
		{"sql", "-q", "SET @@PERSIST.log_bin = 1; SET @@PERSIST.gtid_mode = 'ON'; " +
			"SET @@PERSIST.enforce_gtid_consistency = 'ON'; SET @@PERSIST.binlog_row_metadata = 'FULL'; " +
			"SET @@PERSIST.server_id = " + strconv.FormatUint(uint64(opts.ServerID), 10) + "; " +
			"CREATE USER IF NOT EXISTS 'root'@'%'; GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION"},
	}
	for _, args := range steps {
		if out, err := s.dolt(args...); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("dolt %v: %v\n%s", args, err, out)
		}
	}
	return launchReady(s, dir)
}

// dolt runs one dolt command in the data directory and returns its output.
func (s *DoltServer) dolt(args ...string) ([]byte, error) {
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.data
	cmd.Env = s.env
	return cmd.CombinedOutput()
}

func (s *DoltServer) launch() error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	s.cmd = exec.Command(s.bin, "sql-server",
		"--host=127.0.0.1", "--port="+strconv.Itoa(s.Port),
		"--socket="+filepath.Join(s.Dir, "dolt.sock"),
		"--data-dir="+s.data, "--loglevel=warning")
	s.cmd.Dir = s.data
	s.cmd.Env = s.env
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.exited = make(chan struct{})
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start %s sql-server: %w", s.bin, err)
	}
	exited, cmd := s.exited, s.cmd
	go func() { _ = cmd.Wait(); close(exited) }()
	return nil
}

func (s *DoltServer) waitReady(limit time.Duration) error {
	return s.endpoint.waitReady("dolt sql-server", limit, s.exited, s.logPath)
}

// kill stops the server with SIGKILL and waits for it: Dolt's graceful
// shutdown (SIGTERM) waits for open connections, replication streams
// included, and can take 30 s.
func (s *DoltServer) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// Restart kills the server (SIGKILL: a crash, see kill) and starts it again
// on the same data directory and port: its databases and binlog survive, and
// every client connection, replication streams included, is cut.
func (s *DoltServer) Restart(t testing.TB) {
	t.Helper()
	s.kill()
	// A killed server leaves its lock files behind; a new one refuses to
	// start on a data directory whose lock names a live process, and the
	// pid could have been reused.
	_ = filepath.WalkDir(s.data, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "sql-server.lock" {
			_ = os.Remove(p)
		}
		return nil
	})
	if err := s.launch(); err != nil {
		t.Fatal(err)
	}
	if err := s.waitReady(60 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// Stop kills the server and removes its directory. It is safe to call twice.
func (s *DoltServer) Stop() {
	if !s.stopped.CompareAndSwap(false, true) {
		return
	}
	s.kill()
	os.RemoveAll(s.Dir)
}

// PID is the server process's id (0 before it started), for a benchmark
// that measures its CPU.
func (s *DoltServer) PID() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Log returns the end of the server's log, for a failing test's message.
func (s *DoltServer) Log() string {
	b, _ := os.ReadFile(s.logPath)
	return tail(b, 4000)
}
