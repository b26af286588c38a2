package deploy_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
)

var update = flag.Bool("update", false, "write k8s/prometheusrule.yaml from prometheus-alerts.yaml")

const prometheusRuleHead = `# Generated from ../prometheus-alerts.yaml (go test ./deploy/ -run TestPrometheusRule -update):
# the same alert rules as a PrometheusRule, for the Prometheus Operator
# (monitoring.coreos.com CRDs) that the ServiceMonitors assume. Your
# Prometheus may select rules by a label such as release: prometheus: add it.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: outbox-relay
  labels:
    app.kubernetes.io/name: outbox-relay
spec:
`

// prometheusRule is the PrometheusRule that wraps the bare rules file: its
// groups, from "groups:" on, indented under spec.
func prometheusRule(bare []byte) ([]byte, bool) {
	i := bytes.Index(bare, []byte("\ngroups:\n"))
	if i < 0 {
		return nil, false
	}
	var b bytes.Buffer
	b.WriteString(prometheusRuleHead)
	for _, line := range strings.SplitAfter(string(bare[i+1:]), "\n") {
		if strings.TrimSpace(line) != "" {
			b.WriteString("  ")
		}
		b.WriteString(line)
	}
	return b.Bytes(), true
}

// The PrometheusRule shipped beside the ServiceMonitors holds the very rules
// of prometheus-alerts.yaml, and decodes as the Operator's type.
func TestPrometheusRuleHoldsTheAlertRules(t *testing.T) {
	bare, err := os.ReadFile("prometheus-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want, ok := prometheusRule(bare)
	if !ok {
		t.Fatal("prometheus-alerts.yaml has no top-level groups:")
	}
	path := filepath.Join("k8s", "prometheusrule.yaml")
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from prometheus-alerts.yaml's rules: run go test ./deploy/ -run TestPrometheusRule -update", path)
	}
	objs, err := decodeStrict(got)
	if err != nil || len(objs) != 1 {
		t.Fatalf("%s: %v", path, err)
	}
	r := objs[0].(*prometheusRuleObj)
	n := 0
	for _, g := range r.Spec.Groups {
		n += len(g.Rules)
	}
	if n != strings.Count(string(bare), "- alert: ") || n == 0 {
		t.Errorf("%s holds %d rules, prometheus-alerts.yaml %d", path, n, strings.Count(string(bare), "- alert: "))
	}
}

// OutboxRelayDown covers every pod a ServiceMonitor scrapes: the relay's and
// the gateway's replicas, of the manifests and of the chart (the Operator's
// job label is the Service's name, or the Service label jobLabel names).
func TestOutboxRelayDownCoversEveryScrapedService(t *testing.T) {
	bare, err := os.ReadFile("prometheus-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`alert: OutboxRelayDown\s+expr: up\{job=~?"([^"]+)"\} == 0`).FindSubmatch(bare)
	if m == nil {
		t.Fatal(`OutboxRelayDown is not up{job=~"..."} == 0 or ...`)
	}
	jobs := regexp.MustCompile("^(?:" + string(m[1]) + ")$")
	sets := map[string][]any{}
	for _, dir := range []string{"k8s", "k8s/gateway"} {
		sets[dir] = kustomized(t, dir)
	}
	for name, objs := range renderings(t) {
		sets[filepath.Join(renderedDir, name+".yaml")] = objs
	}
	for where, objs := range sets {
		for _, o := range objs {
			sm, ok := o.(*serviceMonitor)
			if !ok {
				continue
			}
			for _, o := range objs {
				svc, ok := o.(*corev1.Service)
				if !ok || !labelsMatch(sm.Spec.Selector.MatchLabels, svc.Labels) {
					continue
				}
				if job := jobOf(sm, svc); !jobs.MatchString(job) {
					t.Errorf("%s: ServiceMonitor %s scrapes Service %s (job %q), which OutboxRelayDown's job=~%q does not cover", where, sm.Name, svc.Name, job, m[1])
				}
			}
		}
	}
}

func labelsMatch(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// kustomized decodes every resource dir's kustomization lists.
func kustomized(t *testing.T, dir string) []any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeStrict(b)
	if err != nil || len(objs) != 1 {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	var all []any
	for _, r := range objs[0].(*kustomization).Resources {
		b, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			t.Fatal(err)
		}
		o, err := decodeStrict(b)
		if err != nil {
			t.Fatalf("%s/%s: %v", dir, r, err)
		}
		all = append(all, o...)
	}
	return all
}

// Every alert of prometheus-alerts.yaml has a promtool unit test in
// prometheus-alerts.test.yaml that expects it to fire (.ci/run runs them
// with promtool test rules).
func TestEveryAlertHasAPromtoolUnitTest(t *testing.T) {
	bare, err := os.ReadFile("prometheus-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("prometheus-alerts.test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string           `yaml:"alertname"`
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &tests); err != nil {
		t.Fatal(err)
	}
	if len(tests.RuleFiles) != 1 || tests.RuleFiles[0] != "prometheus-alerts.yaml" {
		t.Errorf("prometheus-alerts.test.yaml tests %v, not prometheus-alerts.yaml", tests.RuleFiles)
	}
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			fires[a.Alertname] = fires[a.Alertname] || len(a.ExpAlerts) > 0
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^\s+- alert: (\w+)$`).FindAllStringSubmatch(string(bare), -1) {
		if !fires[m[1]] {
			t.Errorf("alert %s has no promtool unit test in prometheus-alerts.test.yaml that expects it to fire", m[1])
		}
	}
}
