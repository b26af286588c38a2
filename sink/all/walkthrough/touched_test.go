package walkthrough_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/sink"
)

// touched are the files outside a kind's package that a new kind touches,
// as docs/adding-a-sink.md counts them, in its order: the same 2 for every
// kind. This package's two toy kinds show it: toyline (no server, no
// read-back, walkthrough_test.go) and toylog (a server, a read-back and an
// audit flag, readback_test.go), each declared in its test file alone.
var touched = []string{"sink/all/all.go", "docs/sinks/<kind>.md"}

// The page states the count this test holds, and lists the same files: a
// place a new kind must touch that the page does not list is a step the
// page misses.
func TestAddingASinkStatesTheFilesANewKindTouches(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "adding-a-sink.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "## What a new kind touches outside its package\n")
	if !ok {
		t.Fatal(`docs/adding-a-sink.md has no section "What a new kind touches outside its package"`)
	}
	item := regexp.MustCompile("(?m)^(\\d+)\\. `([^`]+)`")
	var listed []string
	for _, m := range item.FindAllStringSubmatch(section, -1) {
		listed = append(listed, m[2])
	}
	if fmt.Sprint(listed) != fmt.Sprint(touched) {
		t.Errorf("docs/adding-a-sink.md lists %q as what a new kind touches, this test %q: make them agree", listed, touched)
	}
	if claim := fmt.Sprintf("touches %d files for every kind", len(touched)); !strings.Contains(section, claim) {
		t.Errorf("docs/adding-a-sink.md does not state %q", claim)
	}
	if len(touched) > 2 {
		t.Errorf("a new kind touches %d files outside its package; the aim is 2 (sink/all and its page)", len(touched))
	}
}

// The places a kind with a server and a read-back used to touch besides
// those two are declarations in its package now; each check here fails if
// one comes back.
func TestAServerKindTouchesNothingElse(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	// .ci/run: CI starts the servers the kinds declare (sink.Kind.Server,
	// listed by sink/all/servers), and names none itself.
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	servers := 0
	for _, k := range sink.Kinds() {
		if k.Server == nil {
			continue
		}
		servers++
		_, port, _ := strings.Cut(k.Server.Addr, ":")
		for _, name := range append([]string{k.Type, ":" + port}, k.Server.Packages...) {
			if strings.Contains(string(ci), name) {
				t.Errorf(".ci/run names %q of kind %s: CI gets a kind's server from its declaration (sink.Kind.Server)", name, k.Type)
			}
		}
	}
	if servers < 2 { // the toy's and at least one real kind's
		t.Fatalf("%d registered kinds declare a server", servers)
	}
	if !strings.Contains(string(ci), "go run ./sink/all/servers") {
		t.Error(".ci/run does not start the declared servers (go run ./sink/all/servers)")
	}
	// sink/audit.go: a read-back's own settings are the kind's audit
	// flags (AuditParams.Flags), not fields of AuditParams.
	var fields []string
	for f := range reflect.TypeFor[sink.AuditParams]().Fields() {
		fields = append(fields, f.Name)
	}
	if got := strings.Join(fields, ","); got != "Config,ClockSkew,Flags" {
		t.Errorf("sink.AuditParams has the fields %s: a setting one kind's read-back needs is its AuditFlags, read from Flags", got)
	}
	// relay/audit_test.go: the audit's story is exported
	// (sink/sinktest/audittest), so the toy's audit test is in its own
	// package, this one.
	k, ok := sink.KindOf("toylog")
	if !ok || k.Audit == nil || k.Server == nil || len(k.AuditFlags) == 0 {
		t.Fatal("the toylog kind is not registered with a server, a read-back and an audit flag")
	}
}
