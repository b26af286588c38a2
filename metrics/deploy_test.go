package metrics_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/replay"
	"github.com/outbox-relay/outbox-relay/switchover"

	"go.yaml.in/yaml/v3"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/gateway/kafkasource"
	"github.com/outbox-relay/outbox-relay/metrics"
	"github.com/outbox-relay/outbox-relay/prune"
)

const deployDir = "../deploy"

var metricName = regexp.MustCompile(`outbox_relay_[a-z_]+`)

// attemptsTable is the attempts table's default name where it is written
// alone (not the start of a metric's name).
var attemptsTable = regexp.MustCompile(`outbox_relay_attempts([^a-z_]|$)`)

// referenced returns the metric names in s, with the _bucket, _sum and
// _count suffixes of histogram series removed.
func referenced(s string) []string {
	var out []string
	for _, n := range metricName.FindAllString(s, -1) {
		if !slices.Contains(exposed(), n) {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if t, ok := strings.CutSuffix(n, suffix); ok {
					n = t
					break
				}
			}
		}
		out = append(out, n)
	}
	return out
}

// exposed is every metric family a relay may expose: Names, the gateway's
// with a webhook sink, prune's with prune.schedule set, the scaled-out
// gateway's for `outbox-relay gateway`, replay's once a replay job ran, and the switch-over's once a sink claimed rows.
func exposed() []string {
	return slices.Concat(metrics.Names, gateway.MetricNames, prune.MetricNames, kafkasource.MetricNames, replay.MetricNames, switchover.MetricNames, attempts.MetricNames)
}

// checkNames fails for every name in exprs that the relay does not expose,
// and returns the set of names used.
func checkNames(t *testing.T, file string, exprs []string) map[string]bool {
	t.Helper()
	used := map[string]bool{}
	for _, e := range exprs {
		for _, n := range referenced(e) {
			if !slices.Contains(exposed(), n) {
				t.Errorf("%s: %q uses %s, which the relay does not expose", file, e, n)
			}
			used[n] = true
		}
	}
	return used
}

// grafanaDashboard is what the tests read of deploy/grafana-dashboard.json.
type grafanaDashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

func readDashboard(t *testing.T) (grafanaDashboard, []byte) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash grafanaDashboard
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	return dash, b
}

// sinkVariable returns the metric whose sink label lists the dashboard's
// $sink choices.
func sinkVariable(t *testing.T, dash grafanaDashboard) string {
	t.Helper()
	for _, v := range dash.Templating.List {
		if v.Name == "sink" {
			m := regexp.MustCompile(`^label_values\((outbox_relay_[a-z_]+)\{[^}]*\}, sink\)$`).FindStringSubmatch(v.Definition)
			if m == nil {
				t.Fatalf("the dashboard's sink variable is %q, not label_values(<metric>{...}, sink)", v.Definition)
			}
			return m[1]
		}
	}
	t.Fatal("the dashboard has no sink variable")
	return ""
}

func TestGrafanaDashboardUsesOnlyExposedMetrics(t *testing.T) {
	dash, b := readDashboard(t)
	var exprs []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	// Every name in the raw text too, so no query hides in another field.
	exprs = append(exprs, string(b))
	used := checkNames(t, "grafana-dashboard.json", exprs)
	for _, must := range []string{
		"outbox_relay_replication_lag_seconds", "outbox_relay_events_delivered_total",
		"outbox_relay_delivery_latency_seconds", "outbox_relay_oldest_unacked_age_seconds",
		"outbox_relay_events_dead_lettered_total", "outbox_relay_source_reconnects_total",
		"outbox_relay_in_flight_events", "outbox_relay_sink_up",
	} {
		if !used[must] {
			t.Errorf("the dashboard has no panel on %s", must)
		}
	}
	if !strings.Contains(string(b), "histogram_quantile(0.99") {
		t.Error("the dashboard shows no p99 latency")
	}
}

// The dashboard loads under Grafana's file provisioning as well as by
// import: no import input (${DS_...}, __inputs, which provisioning leaves
// unresolved), every panel and variable on the datasource variable's
// Prometheus, and the scaled-out gateway (its lag, replicas, stuck and
// expired partitions) has panels.
func TestGrafanaDashboardLoadsUnderFileProvisioning(t *testing.T) {
	dash, b := readDashboard(t)
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	if _, ok := raw["__inputs"]; ok || strings.Contains(string(b), "${DS_") {
		t.Error("the dashboard has an import input (__inputs, ${DS_...}): file provisioning does not resolve it; use the datasource variable")
	}
	hasVar := false
	for _, v := range raw["templating"].(map[string]any)["list"].([]any) {
		m := v.(map[string]any)
		hasVar = hasVar || (m["name"] == "datasource" && m["type"] == "datasource" && m["query"] == "prometheus")
	}
	if !hasVar {
		t.Error("the dashboard has no datasource variable of type prometheus")
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				if k == "datasource" {
					if ds, ok := c.(map[string]any); ok && ds["uid"] != "${datasource}" {
						t.Errorf("%s: datasource %v, want uid ${datasource}", path, ds)
					}
					continue
				}
				walk(path+"."+k, c)
			}
		case []any:
			for i, c := range x {
				walk(fmt.Sprintf("%s[%d]", path, i), c)
			}
		}
	}
	walk("dashboard", raw)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, n := range referenced(tg.Expr) {
				used[n] = true
			}
		}
	}
	for _, must := range kafkasource.MetricNames {
		if must != "outbox_relay_gateway_partition_committed_offset" && !used[must] {
			t.Errorf("the dashboard has no panel on the scaled-out gateway's %s", must)
		}
	}
}

// Every sink, whatever its type (stdout, Kafka, webhook endpoints, NATS
// JetStream, Redis Streams, RabbitMQ), is one of the dashboard's $sink
// choices and a series of its own on each per-sink panel: every query of a
// per-sink metric selects sink=~"$sink" and keeps sink in its grouping, and
// no query picks sinks by name or type. (TestEverySinkTypeHasItsSeries shows
// that a relay with each type sets the variable's metric for it.)
func TestGrafanaDashboardShowsEverySinkOfEveryType(t *testing.T) {
	dash, _ := readDashboard(t)
	if v := sinkVariable(t, dash); v != "outbox_relay_sink_up" {
		t.Errorf("the sink variable lists %s: want outbox_relay_sink_up, which every pipeline sets from its first connect", v)
	}
	perSink := regexp.MustCompile(`(outbox_relay_[a-z_]+)\{([^}]*)\}`)
	grouping := regexp.MustCompile(`\b(?:by|without) \(([^)]*)\)`)
	ungrouped := regexp.MustCompile(`\b(?:sum|min|max|avg|count)\s*\(`)
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range perSink.FindAllStringSubmatch(tg.Expr, -1) {
				labels := m[2]
				if !strings.Contains(labels, `sink=~"$sink"`) {
					t.Errorf("panel %q: %s is not filtered by sink=~\"$sink\": %s", p.Title, m[1], tg.Expr)
				}
				for _, typ := range config.SinkTypes() {
					if strings.Contains(labels, `"`+typ) {
						t.Errorf("panel %q picks sinks by name or type %q: %s", p.Title, typ, tg.Expr)
					}
				}
			}
			if ungrouped.MatchString(tg.Expr) {
				t.Errorf("panel %q aggregates without by (sink), which merges the sinks into one series: %s", p.Title, tg.Expr)
			}
			for _, g := range grouping.FindAllStringSubmatch(tg.Expr, -1) {
				if !slices.Contains(strings.Split(strings.ReplaceAll(g[1], " ", ""), ","), "sink") {
					t.Errorf("panel %q groups by (%s), which merges the sinks into one series: %s", p.Title, g[1], tg.Expr)
				}
			}
		}
	}
}

func TestAlertRulesParseAndUseOnlyExposedMetrics(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "prometheus-alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		t.Fatalf("prometheus-alerts.yaml: %v", err)
	}
	alerts := map[string]string{}
	var exprs []string
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || strings.TrimSpace(r.Expr) == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("rule %q lacks alert, expr, severity, summary or description", r.Alert)
			}
			if strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") {
				t.Errorf("rule %s: unbalanced parentheses in %q", r.Alert, r.Expr)
			}
			alerts[r.Alert] = r.Expr
			exprs = append(exprs, r.Expr)
		}
	}
	checkNames(t, "prometheus-alerts.yaml", exprs)
	for alert, metric := range map[string]string{
		"OutboxRelayDown":                      "outbox_relay_build_info",
		"OutboxRelayReplicationLagHigh":        "outbox_relay_replication_lag_seconds",
		"OutboxRelayOldestUnackedEventOld":     "outbox_relay_oldest_unacked_age_seconds",
		"OutboxRelayDeadLettersGrowing":        "outbox_relay_events_dead_lettered_total",
		"OutboxRelayDeadLetterWaiting":         "outbox_relay_dead_letter_waiting_events",
		"OutboxRelaySinkDown":                  "outbox_relay_sink_up",
		"OutboxRelayCheckpointNotSaved":        "outbox_relay_checkpoint_last_save_timestamp_seconds",
		"OutboxRelayCheckpointNearBinlogPurge": "outbox_relay_checkpoint_binlog_purge_margin_files",
		"OutboxRelayWebhookEndpointDisabled":   "outbox_relay_gateway_endpoints",
		"OutboxRelayGatewayPartitionStuck":     "outbox_relay_gateway_partition_oldest_unacked_seconds",
		"OutboxRelayWebhookEndpointHeldLong":   "outbox_relay_gateway_held_cursor_age_seconds",
		"OutboxRelayGatewayRecordsExpired":     "outbox_relay_gateway_partition_records_expired_total",
	} {
		if !strings.Contains(alerts[alert], metric) {
			t.Errorf("alert %s is missing or does not use %s", alert, metric)
		}
	}
}

// documents decodes every YAML document of a file.
func documents(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var out []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if doc != nil {
			out = append(out, doc)
		}
	}
}

// dig follows keys (string) and indexes (int) into decoded YAML.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// parseConfig checks a relay config with every ${NAME} it uses set.
func parseConfig(t *testing.T, what, text string) *config.Config {
	t.Helper()
	for _, m := range regexp.MustCompile(`\$\{([A-Z_]+)\}`).FindAllStringSubmatch(text, -1) {
		t.Setenv(m[1], "test-secret")
	}
	cfg, err := config.Parse([]byte(text))
	if err != nil {
		t.Fatalf("%s is not a valid relay config: %v", what, err)
	}
	return cfg
}

func TestDockerComposeParsesAndWiresMySQLKafkaAndRelay(t *testing.T) {
	docs := documents(t, filepath.Join(deployDir, "docker-compose.yml"))
	if len(docs) != 1 {
		t.Fatalf("docker-compose.yml has %d documents, want 1", len(docs))
	}
	c := docs[0]
	mysqlCmd := strings.Join(toStrings(dig(c, "services", "mysql", "command")), " ")
	if img := dig(c, "services", "mysql", "image"); img != "mysql:8.4" {
		t.Errorf("mysql image = %v, want mysql:8.4", img)
	}
	for _, flag := range []string{"--binlog-format=ROW", "--binlog-row-image=FULL", "--binlog-row-metadata=FULL", "--gtid-mode=ON", "--enforce-gtid-consistency=ON", "--server-id=", "--log-bin"} {
		if !strings.Contains(mysqlCmd, flag) {
			t.Errorf("mysql command lacks %s", flag)
		}
	}
	if img, _ := dig(c, "services", "kafka", "image").(string); !strings.HasPrefix(img, "apache/kafka:") {
		t.Errorf("kafka image = %q, want apache/kafka", img)
	}
	if roles := dig(c, "services", "kafka", "environment", "KAFKA_PROCESS_ROLES"); roles != "broker,controller" {
		t.Errorf("kafka is not in KRaft combined mode: KAFKA_PROCESS_ROLES = %v", roles)
	}
	if df := dig(c, "services", "relay", "build", "dockerfile"); df != "Dockerfile" {
		t.Errorf("relay is not built from the Dockerfile: %v", df)
	}
	vols := strings.Join(toStrings(dig(c, "services", "relay", "volumes")), " ")
	if !strings.Contains(vols, "./compose-config.yaml:/etc/outbox-relay/config.yaml") {
		t.Errorf("relay volumes %q do not mount compose-config.yaml", vols)
	}
	b, err := os.ReadFile(filepath.Join(deployDir, "compose-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := parseConfig(t, "compose-config.yaml", string(b))
	if cfg.HTTP.Listen == "" || cfg.Source.Host != "mysql" {
		t.Errorf("compose-config.yaml: http.listen %q, source.host %q", cfg.HTTP.Listen, cfg.Source.Host)
	}
	if env := dig(c, "services", "relay", "environment", "RELAY_DB_PASSWORD"); env == nil {
		t.Error("the relay service does not set RELAY_DB_PASSWORD, which compose-config.yaml uses")
	}
}

func toStrings(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

func TestKubernetesManifestsParseAndProbeHealthAndReadiness(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(deployDir, "k8s", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/k8s: %v", err)
	}
	byKind := map[string]map[string]any{}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		for _, d := range documents(t, f) {
			kind, _ := d["kind"].(string)
			if kind == "" || d["apiVersion"] == nil {
				t.Errorf("%s: a document without kind or apiVersion", f)
				continue
			}
			byKind[kind] = d
		}
	}
	for _, k := range []string{"Deployment", "ConfigMap", "Service", "ServiceMonitor", "NetworkPolicy"} {
		if byKind[k] == nil {
			t.Errorf("deploy/k8s has no %s", k)
		}
	}
	// The Secret is an example outside the directory: applying deploy/k8s
	// (-k or -f) must never overwrite the real one with placeholders.
	if byKind["Secret"] != nil {
		t.Error("deploy/k8s holds a Secret: kubectl apply would replace the real one with its placeholders")
	}
	dep := byKind["Deployment"]
	ctr := dig(dep, "spec", "template", "spec", "containers", 0)
	if p := dig(ctr, "livenessProbe", "httpGet", "path"); p != "/healthz" {
		t.Errorf("liveness probe path = %v, want /healthz", p)
	}
	if p := dig(ctr, "readinessProbe", "httpGet", "path"); p != "/readyz" {
		t.Errorf("readiness probe path = %v, want /readyz", p)
	}
	if dig(dep, "spec", "template", "spec", "securityContext", "runAsNonRoot") != true {
		t.Error("the pod does not require a non-root user")
	}
	text, _ := dig(byKind["ConfigMap"], "data", "config.yaml").(string)
	cfg := parseConfig(t, "the ConfigMap's config.yaml", text)
	if !strings.HasSuffix(cfg.HTTP.Listen, ":9108") {
		t.Errorf("the ConfigMap's http.listen = %q, want the probes' port 9108", cfg.HTTP.Listen)
	}
	if p := dig(byKind["ServiceMonitor"], "spec", "endpoints", 0, "port"); p != "metrics" {
		t.Errorf("ServiceMonitor endpoint port = %v, want metrics", p)
	}

	// The example Secret holds every variable the config uses.
	secretDocs := documents(t, filepath.Join(deployDir, "k8s-secret.example.yaml"))
	if len(secretDocs) != 1 || secretDocs[0]["kind"] != "Secret" || dig(secretDocs[0], "metadata", "name") != dig(ctr, "envFrom", 0, "secretRef", "name") {
		t.Fatalf("deploy/k8s-secret.example.yaml is not the Secret the Deployment reads: %v", secretDocs)
	}
	secret, _ := dig(secretDocs[0], "stringData").(map[string]any)
	for _, m := range regexp.MustCompile(`\$\{([A-Z_]+)\}`).FindAllStringSubmatch(text, -1) {
		if _, ok := secret[m[1]]; !ok {
			t.Errorf("the config uses ${%s}, which the example Secret does not hold", m[1])
		}
	}

	// The kustomization applies every manifest of the directory, and pins
	// the image to the same release tag as the Deployment.
	kust := documents(t, filepath.Join(deployDir, "k8s", "kustomization.yaml"))[0]
	resources := toStrings(kust["resources"])
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" && !slices.Contains(resources, b) {
			t.Errorf("kustomization.yaml does not list %s", b)
		}
	}
	for _, r := range resources {
		if _, err := os.Stat(filepath.Join(deployDir, "k8s", r)); err != nil {
			t.Errorf("kustomization.yaml lists %s: %v", r, err)
		}
	}
	image, _ := dig(ctr, "image").(string)
	name, tag, _ := strings.Cut(image, ":")
	release := regexp.MustCompile(`^v\d+\.\d+\.\d+$`)
	if !release.MatchString(tag) {
		t.Errorf("the Deployment's image %q is not pinned to a release tag (vX.Y.Z)", image)
	}
	if n, nt := dig(kust, "images", 0, "name"), dig(kust, "images", 0, "newTag"); n != name || nt != tag {
		t.Errorf("kustomization.yaml images: %v:%v, want the Deployment's %s", n, nt, image)
	}

	// The NetworkPolicy admits only the metrics port, to the relay's pods.
	np := byKind["NetworkPolicy"]
	if sel := dig(np, "spec", "podSelector", "matchLabels", "app.kubernetes.io/name"); sel != dig(dep, "spec", "template", "metadata", "labels", "app.kubernetes.io/name") {
		t.Errorf("the NetworkPolicy selects %v, not the relay's pods", sel)
	}
	if types := toStrings(dig(np, "spec", "policyTypes")); !slices.Contains(types, "Ingress") {
		t.Errorf("the NetworkPolicy does not restrict ingress: policyTypes %v", types)
	}
	ingress, _ := dig(np, "spec", "ingress").([]any)
	if len(ingress) == 0 {
		t.Fatal("the NetworkPolicy has no ingress rule: it would block the scrapes")
	}
	for i := range ingress {
		ports, _ := dig(ingress[i], "ports").([]any)
		if len(ports) == 0 || dig(ingress[i], "from") == nil {
			t.Errorf("ingress rule %d admits every port or every source", i)
		}
		for j := range ports {
			if p := dig(ports[j], "port"); p != 9108 && p != "metrics" {
				t.Errorf("ingress rule %d admits port %v, want only 9108 (/metrics, /readyz)", i, p)
			}
		}
	}
}

func TestDockerfileIsMultiStageStaticNonRootWithHealthcheck(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{
		"FROM golang:1.26 AS build", "CGO_ENABLED=0", "-trimpath", "-X main.version=",
		"FROM gcr.io/distroless/static-debian12:nonroot", "USER 65532",
		`HEALTHCHECK`, `["/outbox-relay", "healthcheck", "--url", "http://127.0.0.1:9108/healthz"]`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}

func TestDocsDocumentEveryMetric(t *testing.T) {
	b, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range exposed() {
		if !bytes.Contains(b, []byte("`"+n+"`")) {
			t.Errorf("docs/operations.md does not document %s", n)
		}
	}
	// Every metric-like name the README and docs/ write must exist; the
	// relay's tables share the prefix and are not metrics.
	pages, err := filepath.Glob("../docs/*/*.md")
	if err != nil {
		t.Fatal(err)
	}
	top, _ := filepath.Glob("../docs/*.md")
	for _, p := range append(append([]string{"../README.md"}, top...), pages...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.NewReplacer("outbox_relay_dead_letters", "", "outbox_relay_checkpoints", "", "outbox_relay_fence", "").Replace(string(b))
		// The attempts table shares its name with the start of the
		// attempts record's metrics.
		text = attemptsTable.ReplaceAllString(text, "$1")
		checkNames(t, strings.TrimPrefix(p, "../"), []string{text})
	}
}

// The scaled-out gateway's manifests (deploy/k8s/gateway) and compose file
// parse, name sinks their configs have, and autoscale on a metric the
// gateway exposes.
func TestGatewayDeployParsesAndScalesOnItsLag(t *testing.T) {
	dir := filepath.Join(deployDir, "k8s", "gateway")
	kust := documents(t, filepath.Join(dir, "kustomization.yaml"))[0]
	kinds := map[string]map[string]any{}
	for _, r := range toStrings(dig(kust, "resources")) {
		for _, doc := range documents(t, filepath.Join(dir, r)) {
			kinds[fmt.Sprint(doc["kind"])] = doc
		}
	}
	for _, k := range []string{"ConfigMap", "Deployment", "HorizontalPodAutoscaler"} {
		if kinds[k] == nil {
			t.Fatalf("deploy/k8s/gateway has no %s", k)
		}
	}
	hpaMetric := fmt.Sprint(dig(kinds["HorizontalPodAutoscaler"], "spec", "metrics", 0, "external", "metric", "name"))
	if !slices.Contains(kafkasource.MetricNames, hpaMetric) {
		t.Errorf("the autoscaler scales on %q, not a metric of the gateway", hpaMetric)
	}
	checkArgs := func(what string, args []string, cfg *config.Config) {
		t.Helper()
		if len(args) == 0 || args[0] != "gateway" {
			t.Errorf("%s does not run `outbox-relay gateway`: %v", what, args)
		}
		for _, flag := range []string{"--webhook", "--kafka"} {
			i := slices.Index(args, flag)
			if i < 0 || i+1 >= len(args) {
				t.Errorf("%s lacks %s", what, flag)
				continue
			}
			if !slices.ContainsFunc(cfg.Sinks, func(s config.Sink) bool { return s.Name == args[i+1] }) {
				t.Errorf("%s: %s %s names no sink of its config", what, flag, args[i+1])
			}
		}
		if cfg.Checkpoint.Store != "mysql" {
			t.Errorf("%s: checkpoint.store %q; the replicas share their cursors in mysql", what, cfg.Checkpoint.Store)
		}
	}
	k8sCfg := parseConfig(t, "deploy/k8s/gateway/configmap.yaml", fmt.Sprint(dig(kinds["ConfigMap"], "data", "config.yaml")))
	checkArgs("deploy/k8s/gateway/deployment.yaml", toStrings(dig(kinds["Deployment"], "spec", "template", "spec", "containers", 0, "args")), k8sCfg)
	b, err := os.ReadFile(filepath.Join(deployDir, "compose-gateway-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	composeCfg := parseConfig(t, "compose-gateway-config.yaml", string(b))
	c := documents(t, filepath.Join(deployDir, "docker-compose.gateway.yml"))[0]
	for _, svc := range []string{"gateway-1", "gateway-2"} {
		checkArgs("docker-compose.gateway.yml "+svc, toStrings(dig(c, "services", svc, "command")), composeCfg)
	}
	if inc := toStrings(dig(c, "include")); !slices.Contains(inc, "docker-compose.yml") {
		t.Errorf("docker-compose.gateway.yml does not include the relay's docker-compose.yml: %v", inc)
	}
}

// Every metric the Helm chart's renderings name (the PrometheusRule, the
// dashboard's ConfigMap, the HorizontalPodAutoscaler, the KEDA
// ScaledObject's query) and the prometheus-adapter rule name is exposed,
// and both autoscalers scale on the gateway's lag.
func TestChartAndAutoscalersUseOnlyExposedMetrics(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(deployDir, "helm", "rendered", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no renderings of the chart in deploy/helm/rendered: %v", err)
	}
	scalers := 0
	for _, f := range append(files, filepath.Join(deployDir, "prometheus-adapter.yaml")) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// The checkpoint database in the configs' DSNs is not a metric.
		checkNames(t, f, []string{strings.ReplaceAll(string(b), "/outbox_relay\n", "\n")})
		for _, d := range documents(t, f) {
			var metric string
			switch d["kind"] {
			case "HorizontalPodAutoscaler":
				metric = fmt.Sprint(dig(d, "spec", "metrics", 0, "external", "metric", "name"))
			case "ScaledObject":
				metric = metricName.FindString(fmt.Sprint(dig(d, "spec", "triggers", 0, "metadata", "query")))
			default:
				continue
			}
			scalers++
			if metric != "outbox_relay_gateway_partition_lag_records" || !slices.Contains(kafkasource.MetricNames, metric) {
				t.Errorf("%s: the %s scales on %q, not the gateway's lag", f, d["kind"], metric)
			}
		}
	}
	if scalers < 2 {
		t.Errorf("the chart's renderings hold %d autoscalers: want its HPA and its ScaledObject", scalers)
	}
}
