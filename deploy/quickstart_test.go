package deploy_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// quickstart runs a copy of quickstart.sh from a directory of its own (so
// its .quickstart is the test's) with env added, and returns its exit code
// and output.
func quickstart(t *testing.T, env ...string) (int, string, string) {
	t.Helper()
	b, err := os.ReadFile("quickstart.sh")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "deploy"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "deploy", "quickstart.sh")
	if err := os.WriteFile(script, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", script)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, string(out), root
}

// taken listens on a free loopback port for the test's life: another
// program on it.
func taken(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// free is a loopback port nothing listens on (it was free a moment ago).
func free(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	return p
}

// The quickstart stops before it builds, creates or starts anything when
// one of its ports is taken (a server already on its MariaDB port would
// otherwise be the one the demo writes to and the relay reads), naming the
// variable that moves it.
func TestTheQuickstartStopsWhenAPortIsTaken(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatal("bash is needed to run the quickstart")
	}
	db, metrics := taken(t), taken(t)
	cases := []struct {
		name string
		env  []string
		want string
	}{
		{"its MariaDB port is taken", []string{"PORT=" + db, "METRICS_PORT=" + free(t)},
			"port " + db + " (MariaDB) is in use by another program: run again with PORT set to a free port"},
		{"its metrics port is taken", []string{"PORT=" + free(t), "METRICS_PORT=" + metrics},
			"port " + metrics + " (the relay's /metrics) is in use by another program: run again with METRICS_PORT set to a free port"},
		{"both ports are the same", []string{"PORT=" + db, "METRICS_PORT=" + db}, "PORT and METRICS_PORT are both " + db},
		{"a port is no number", []string{"PORT=mariadb", "METRICS_PORT=" + free(t)}, "PORT and METRICS_PORT must be port numbers"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, root := quickstart(t, c.env...)
			if code == 0 || !strings.Contains(out, c.want) {
				t.Fatalf("exit %d, output:\n%s\nwant a failure saying %q", code, out, c.want)
			}
			if strings.Contains(out, "==") {
				t.Errorf("it went on after the check:\n%s", out)
			}
			if _, err := os.Stat(filepath.Join(root, ".quickstart")); err == nil {
				t.Error("it created .quickstart")
			}
		})
	}
}
