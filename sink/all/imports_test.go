package all_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/sink"
)

// kindImportsLeft are the files outside sink/ that still import a sink
// kind's package in code that is not a test, each with why. The list only
// shrinks: a new import fails TestNoPackageOutsideSinkImportsAKind, and so
// does an entry whose file no longer imports the kind.
var kindImportsLeft = map[string]string{}

// kindImportsInTests are the test files outside sink/ that import a sink
// kind's package, each with the reason: a test that exercises that kind
// end to end, or builds its section or its rows itself.
var kindImportsInTests = map[string]string{
	"cmd/outbox-relay/auditfilter_test.go sink/webhook":  "builds a webhook section with endpoint filters to audit one endpoint against",
	"config/defaults_test.go sink/kafka":                 "holds the kafka kind's declared defaults to its exported constants",
	"config/endpoints_table_test.go sink/webhook":        "decodes and validates the webhook endpoints table's section into its own type",
	"docs/retries_test.go sink/webhook":                  "generates receiving-webhooks.md's retry schedule from the webhook endpoint's declared retry defaults",
	"metrics/sinks_test.go sink/nats":                    "runs the nats sink against the broker and reads its metrics",
	"metrics/sinks_test.go sink/rabbitmq":                "runs the rabbitmq sink against the broker and reads its metrics",
	"metrics/sinks_test.go sink/redis":                   "runs the redis sink against the server and reads its metrics",
	"relay/audit_bench_test.go sink/kafka":               "benchmarks the kafka kind's audit read-back",
	"relay/endpoints_rows_test.go sink/webhook":          "writes endpoints table rows with webhook secrets (EncryptSecret) and runs the relay on them",
	"relay/endpoints_test.go sink/webhook":               "writes endpoints table rows with webhook secrets and runs the relay on them",
	"cmd/outbox-relay/webhook_test.go sink/webhook":      "verifies the signatures of the relay's webhook requests end to end",
	"cmd/outbox-relay/kafkagateway_test.go sink/kafka":   "runs `outbox-relay gateway` on the kafka sink's topics end to end",
	"cmd/outbox-relay/kafkagateway_test.go sink/webhook": "runs `outbox-relay gateway` to webhook endpoints end to end, with signed requests",
	"cmd/outbox-relay/endpoints_test.go sink/webhook":    "decrypts what `endpoints encrypt-secret` printed with the webhook kind's own code",
	"cmd/outbox-relay/status_test.go sink/webhook":       "writes endpoints table rows with webhook secrets for status to list",
	"cmd/outbox-relay/dlq_test.go sink/stdout":           "compares `dlq list --json` with what the stdout sink writes for the same events",
	"cmd/outbox-relay/dlq_test.go sink/webhook":          "replays dead letters to webhook endpoints end to end",
	"check/check_test.go sink/webhook":                   "writes endpoints table rows with webhook secrets for check to read",
	"cmd/outbox-relay/gatewayidle_test.go sink/webhook":  "creates the webhook endpoints table of 10,000 rows the relay's gateway reads, killed and restarted end to end",
	"cmd/outbox-relay/console_test.go sink/webhook":      "creates the webhook endpoints table the console writes to, end to end",
	"relay/attempts_test.go sink/webhook":                "creates the webhook endpoints table whose rows' tenants the attempts record keeps",
	"console/names_test.go sink/webhook":                 "folds endpoint names as the webhook kind's table and static names do, to show a tenant's create tells nothing of them",
	"relay/replaytarget_test.go sink/webhook":            "creates the webhook endpoints table whose row a running replay follows",
	"console/paging_test.go sink/webhook":                "walks the console's pages over the webhook kind's endpoints table in MariaDB",
	"console/paging_bench_test.go sink/webhook":          "benchmarks the console's pages over the webhook kind's endpoints table in MariaDB",
	"relay/table_bench_test.go sink/webhook":             "fills the webhook endpoints table with rows to benchmark a new row's first delivery",
}

// TestNoPackageOutsideSinkImportsAKind holds the registry's promise: a sink
// kind is known to the rest of the program through package sink (and
// gateway, for a fan-out kind) only, so adding one touches its package and
// sink/all. Only sink/... and the bench (cmd/outbox-bench, which builds
// each kind's sink to measure it) import a kind's package; any other
// import must be listed above with its reason.
func TestNoPackageOutsideSinkImportsAKind(t *testing.T) {
	var kinds []string // module-relative package paths, "sink/kafka"
	for _, k := range sink.Kinds() {
		rel, _ := strings.CutPrefix(reflect.TypeOf(k.Config()).Elem().PkgPath(), module)
		kinds = append(kinds, rel)
	}
	if len(kinds) == 0 {
		t.Fatal("no sink kind is registered")
	}
	isKind := func(imp string) (string, bool) {
		rel, ok := strings.CutPrefix(imp, module)
		if !ok {
			return "", false
		}
		for _, k := range kinds {
			if rel == k || strings.HasPrefix(rel, k+"/") {
				return k, true
			}
		}
		return "", false
	}
	root := filepath.Join("..", "..")
	seen := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, root+string(filepath.Separator)))
		if d.IsDir() {
			if path != root && strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel == "sink" || rel == "cmd/outbox-bench" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		test := strings.HasSuffix(rel, "_test.go")
		for _, is := range f.Imports {
			imp, _ := strconv.Unquote(is.Path.Value)
			k, ok := isKind(imp)
			if !ok {
				continue
			}
			key := rel + " " + k
			seen[key] = true
			switch {
			case !test && kindImportsLeft[key] != "":
			case test && kindImportsInTests[key] != "":
			case test:
				t.Errorf("%s imports %s: use package sink's registry or a kind-neutral helper (sink/sinktest, event/jsonline), or, for a test that exercises that kind end to end, list it in kindImportsInTests with the reason", rel, k)
			default:
				t.Errorf("%s imports %s: only sink/... and cmd/outbox-bench may import a sink kind's package; declare what the caller needs in the kind's sink.Kind (see docs/adding-a-sink.md) and reach it through package sink", rel, k)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, list := range []map[string]string{kindImportsLeft, kindImportsInTests} {
		keys := make([]string, 0, len(list))
		for key := range list {
			keys = append(keys, key)
		}
		slices.Sort(keys)
		for _, key := range keys {
			if !seen[key] {
				t.Errorf("%q no longer imports that kind: remove it from the list", key)
			}
		}
	}
}
