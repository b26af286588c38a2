package walkthrough_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// touched are the files outside a kind's package that a new kind touches,
// as docs/adding-a-sink.md counts them, in its order, each with whether the
// toy kind of this package (no server of its own, no read-back) needs it.
// The aim is 2, both for every kind: sink/all and its page.
var touched = []struct {
	file string
	toy  bool
}{
	{"sink/all/all.go", true},
	{"docs/sinks/<kind>.md", true},
	{".ci/run", false},             // the kind's server in CI (sinktest.Require under CI=true)
	{"relay/audit_test.go", false}, // streamAudit is private to relay's tests
	{"sink/audit.go", false},       // an AuditParams field per read-back setting
}

// The page states the count this test holds, and lists the same files: a
// place a new kind must touch that the page does not list is a step the
// page misses; one listed here that no longer needs touching shrinks both.
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
	var want []string
	toy := 0
	for _, f := range touched {
		want = append(want, f.file)
		if f.toy {
			toy++
		}
	}
	if fmt.Sprint(listed) != fmt.Sprint(want) {
		t.Errorf("docs/adding-a-sink.md lists %q as what a new kind touches, this test %q: make them agree", listed, want)
	}
	for _, claim := range []string{fmt.Sprintf("touches %d for a kind with no server", toy), fmt.Sprintf("up to %d", len(touched))} {
		if !strings.Contains(section, claim) {
			t.Errorf("docs/adding-a-sink.md does not state %q", claim)
		}
	}
	if toy > 2 {
		t.Errorf("the toy kind touches %d files outside its package; the aim is 2 (sink/all and its page)", toy)
	}
}
