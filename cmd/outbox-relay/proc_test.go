package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// startRelay starts the built binary on cfgPath as a process of its own.
func startRelay(t *testing.T, bin, cfgPath string, stdout, stderr io.Writer) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "run", "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// waitForFile waits until path exists: for the relay's first checkpoint,
// which fixes its start position.
func waitForFile(t *testing.T, path string, limit time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(limit); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %s", path, limit)
		}
	}
}

// killedRelay is the relay binary of a SIGKILL test: run on dir/relay.yaml,
// every process's stdout and stderr appended to dir/relay.log, SIGKILLed
// (kill) and started again (start) as the test says; one still running
// when the test ends is killed.
type killedRelay struct {
	t               *testing.T
	bin, cfg, logTo string
	log             *os.File
	cmd             *exec.Cmd
}

// startKilledRelay writes cfg to dir/relay.yaml and starts bin on it.
func startKilledRelay(t *testing.T, bin, dir, cfg string) *killedRelay {
	t.Helper()
	r := &killedRelay{t: t, bin: bin, cfg: filepath.Join(dir, "relay.yaml"), logTo: filepath.Join(dir, "relay.log")}
	if err := os.WriteFile(r.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	if r.log, err = os.Create(r.logTo); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if r.cmd != nil && r.cmd.ProcessState == nil {
			_ = r.cmd.Process.Kill()
			_ = r.cmd.Wait()
		}
		r.log.Close()
	})
	r.start()
	return r
}

// start starts a relay process (the last one has exited).
func (r *killedRelay) start() {
	r.t.Helper()
	r.cmd = startRelay(r.t, r.bin, r.cfg, r.log, r.log)
}

// kill SIGKILLs the relay process and waits for it to exit.
func (r *killedRelay) kill() {
	r.t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		r.t.Fatal(err)
	}
	_ = r.cmd.Wait()
}

// stop SIGTERMs the relay process and returns how it exited.
func (r *killedRelay) stop() error {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	return r.cmd.Wait()
}

// showLog logs the end of the relay's log.
func (r *killedRelay) showLog() {
	b, _ := os.ReadFile(r.logTo)
	r.t.Logf("relay log:\n%s", tail(b))
}
