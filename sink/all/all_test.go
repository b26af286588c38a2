package all_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/sink"
	_ "github.com/outbox-relay/outbox-relay/sink/all"
)

const module = "github.com/outbox-relay/outbox-relay/"

// TestEveryKindRunsTheConformanceSuite holds every registered sink kind to
// the contract of package sink: its package's tests call sinktest.Run (the
// conformance suite, which fails under CI=true when its server is missing).
// A new kind registered without one fails here.
func TestEveryKindRunsTheConformanceSuite(t *testing.T) {
	kinds := sink.Kinds()
	if len(kinds) == 0 {
		t.Fatal("no sink kind is registered")
	}
	for _, k := range kinds {
		pkg := reflect.TypeOf(k.Config()).Elem().PkgPath()
		rel, ok := strings.CutPrefix(pkg, module)
		if !ok {
			t.Errorf("kind %s: its section's package %s is not in this module", k.Type, pkg)
			continue
		}
		if n := conformanceCalls(t, filepath.Join("..", "..", filepath.FromSlash(rel))); n == 0 {
			t.Errorf("kind %s (package %s) registers no conformance test: add a test that calls sinktest.Run (see docs/adding-a-sink.md)", k.Type, rel)
		}
	}
}

// TestEveryAuditableKindHasAnAuditTest: a kind that declares a read-back
// for `outbox-relay audit` (Kind.Audit) has a test of it, named
// TestAudit<Type>… (any case), in its own package (sink/sinktest/audittest
// runs the story) or in relay (the Kafka and RabbitMQ tests, which use
// relay's own helpers).
func TestEveryAuditableKindHasAnAuditTest(t *testing.T) {
	n := 0
	for _, k := range sink.Kinds() {
		if k.Audit == nil {
			continue
		}
		n++
		pkg := reflect.TypeOf(k.Config()).Elem().PkgPath()
		rel, _ := strings.CutPrefix(pkg, module)
		prefix := strings.ToLower("TestAudit" + k.Type)
		found := false
		for _, dir := range []string{filepath.FromSlash(rel), "relay"} {
			for _, name := range testFuncs(t, filepath.Join("..", "..", dir)) {
				found = found || strings.HasPrefix(strings.ToLower(name), prefix)
			}
		}
		if !found {
			t.Errorf("kind %s declares Audit but no test named TestAudit%s… is in %s or relay: add one to %s that audits a run and finds deleted messages missing, with audittest.Stream (see docs/adding-a-sink.md)", k.Type, k.Type, rel, rel)
		}
	}
	if n == 0 {
		t.Fatal("no registered kind declares Audit")
	}
}

// TestEveryKindIsKnownToConfig: registering a kind registers its section,
// so config accepts its type and no other.
func TestEveryKindIsKnownToConfig(t *testing.T) {
	var types []string
	for _, k := range sink.Kinds() {
		types = append(types, k.Type)
		if k.New == nil {
			if _, ok := k.Config().(config.FanOut); !ok {
				t.Errorf("kind %s has no New and its section is not a config.FanOut: nothing can build it", k.Type)
			}
		}
	}
	if got := strings.Join(config.SinkTypes(), ","); got != strings.Join(types, ",") {
		t.Fatalf("config knows the sink types %s, the registry %s", got, strings.Join(types, ","))
	}
}

// testFuncs lists the names of the functions of the tests of dir.
func testFuncs(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil {
				out = append(out, fn.Name.Name)
			}
		}
	}
	return out
}

// conformanceCalls counts the calls of sinktest.Run in the tests of dir.
func conformanceCalls(t *testing.T, dir string) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	fset := token.NewFileSet()
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(node ast.Node) bool {
			if call, ok := node.(*ast.CallExpr); ok {
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Run" {
					if id, ok := sel.X.(*ast.Ident); ok && id.Name == "sinktest" {
						n++
					}
				}
			}
			return true
		})
	}
	return n
}
