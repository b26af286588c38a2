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
