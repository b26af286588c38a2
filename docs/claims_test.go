package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/metrics"
)

// userPages are the pages a user reads: README.md and docs/ (BENCHMARKS.md
// is the record of how each figure was made, and may cite its history).
func userPages(t *testing.T) []string {
	t.Helper()
	pages := []string{"../README.md"}
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			pages = append(pages, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return pages
}

var issueRef = regexp.MustCompile(`(?i)\bissues? #?\d+|(^|[\s(])#\d+\b`)

// TestUserDocsCiteNoIssueNumbers: a user page says what holds, not which
// issue of this project's history changed it.
func TestUserDocsCiteNoIssueNumbers(t *testing.T) {
	for _, page := range userPages(t) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := issueRef.FindString(line); m != "" {
				t.Errorf("%s:%d cites %q: say what holds instead", page, i+1, strings.TrimSpace(m))
			}
		}
	}
}

// TestGettingStartedSectionsAreTheConfigs holds getting-started's table of
// sections to the config's top-level keys, in their order.
func TestGettingStartedSectionsAreTheConfigs(t *testing.T) {
	b, err := os.ReadFile("getting-started.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| \\[`([a-z_]+)`\\]\\(options\\.md#([a-z_]+)\\) \\|")
	var got []string
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		if m[1] != m[2] {
			t.Errorf("getting-started.md: section %s links to options.md#%s", m[1], m[2])
		}
		got = append(got, m[1])
	}
	var want []string
	for _, s := range sections(t) {
		want = append(want, s.name)
	}
	if !slices.Equal(got, want) {
		t.Errorf("getting-started.md's table of sections lists\n%v\nthe config has\n%v", got, want)
	}
}

// TestCheckPageListsEveryCheck holds docs/commands/check.md's table to the
// checks the check package declares (its Name… constants).
func TestCheckPageListsEveryCheck(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, "../check", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.CONST {
					continue
				}
				for _, s := range g.Specs {
					vs := s.(*ast.ValueSpec)
					for i, id := range vs.Names {
						if !strings.HasPrefix(id.Name, "Name") || i >= len(vs.Values) {
							continue
						}
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							v, _ := strconv.Unquote(lit.Value)
							names = append(names, v)
						}
					}
				}
			}
		}
	}
	if len(names) < 10 {
		t.Fatalf("found %d check names in ../check: %v", len(names), names)
	}
	b, err := os.ReadFile("commands/check.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !strings.Contains(string(b), "\n| `"+n+"` |") {
			t.Errorf("commands/check.md has no row for the check %s", n)
		}
	}
}

// TestTroubleshootingQuotesTheCode: every log message (msg="…") and metric
// name troubleshooting.md quotes is in the relay's code, and so is the
// standby's /readyz line.
func TestTroubleshootingQuotesTheCode(t *testing.T) {
	b, err := os.ReadFile("troubleshooting.md")
	if err != nil {
		t.Fatal(err)
	}
	// A quote may be wrapped over lines (Markdown): join them.
	page := strings.Join(strings.Fields(string(b)), " ")
	var code strings.Builder
	err = filepath.WalkDir("..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "docs" || d.Name() == "internal" || strings.HasPrefix(d.Name(), ".")) && p != ".." {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			src, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			code.Write(src)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	src := code.String()
	msgs := regexp.MustCompile(`msg="([^"]+)"`).FindAllStringSubmatch(page, -1)
	if len(msgs) < 10 {
		t.Fatalf("found %d quoted log messages", len(msgs))
	}
	for _, m := range msgs {
		if !strings.Contains(src, strconv.Quote(m[1])) {
			t.Errorf("troubleshooting.md quotes msg=%q, which no log call of the relay has", m[1])
		}
	}
	for _, m := range regexp.MustCompile("`(outbox_relay_[a-z_]+)").FindAllStringSubmatch(page, -1) {
		name := strings.TrimPrefix(m[1], "outbox_relay_")
		if !strings.Contains(src, strconv.Quote(name)) && !strings.Contains(src, strconv.Quote(m[1])) {
			t.Errorf("troubleshooting.md names the metric %s, which the relay does not have", m[1])
		}
	}
	if !strings.Contains(page, metrics.StandbyReason) {
		t.Errorf("troubleshooting.md does not quote the standby's /readyz line %q", metrics.StandbyReason)
	}
}
