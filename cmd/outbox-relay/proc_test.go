package main

import (
	"io"
	"os"
	"os/exec"
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
