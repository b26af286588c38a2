package check

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// inspect fetches only serverVars: a check that reads a variable not in
// that list would see it absent (as on a server without it) and decide
// wrongly. Every vars["…"] read in the package's code is listed, and every
// listed variable is read.
func TestEveryVariableTheChecksReadIsFetched(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	read := map[string]bool{}
	lit := regexp.MustCompile(`vars\["([A-Za-z0-9_]+)"\]`)
	other := regexp.MustCompile(`vars\[[^"\]]`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range lit.FindAllSubmatch(b, -1) {
			read[string(m[1])] = true
		}
		for _, line := range strings.Split(string(b), "\n") {
			if other.MatchString(line) && !strings.Contains(line, "strings.ToLower(k)") {
				t.Errorf("%s: %q reads a variable by a name that is not a literal: write the name in vars[\"…\"] so that this test can hold serverVars to it", f, strings.TrimSpace(line))
			}
		}
	}
	if len(read) == 0 {
		t.Fatal("found no vars[\"…\"] reads: the pattern is stale")
	}
	for v := range read {
		if !slices.Contains(serverVars, v) {
			t.Errorf("the checks read %s, which inspect does not fetch: add it to serverVars", v)
		}
	}
	for _, v := range serverVars {
		if !read[v] {
			t.Errorf("serverVars lists %s, which no check reads: remove it", v)
		}
	}
}
