package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
)

// renderedDir holds what the Helm chart (helm/outbox-relay) renders over
// its default values and over each of its examples/*.yaml, as helm template
// does: the release tool writes them with helm as a library (go run -C
// .ci/release . chart -update) and CI fails when they are not current, so
// these tests read the chart's output without helm in this module.
const renderedDir = "helm/rendered"

// renderings decodes each rendering strictly, by value set.
func renderings(t *testing.T) map[string][]any {
	t.Helper()
	examples, err := filepath.Glob(filepath.Join("helm", "outbox-relay", "examples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sets := []string{"default"}
	for _, e := range examples {
		sets = append(sets, strings.TrimSuffix(filepath.Base(e), ".yaml"))
	}
	kept, _ := filepath.Glob(filepath.Join(renderedDir, "*.yaml"))
	if len(kept) != len(sets) {
		t.Fatalf("%s holds %d renderings for %d value sets (default and %d examples): run go run -C .ci/release . chart -update", renderedDir, len(kept), len(sets), len(examples))
	}
	out := map[string][]any{}
	for _, s := range sets {
		p := filepath.Join(renderedDir, s+".yaml")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("%v: run go run -C .ci/release . chart -update", err)
		}
		objs, err := decodeStrict(b)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out[s] = objs
	}
	return out
}

// The chart, over its default values and each example, renders objects
// that decode strictly into their Kubernetes API types, whose probes name
// declared ports, whose pods are all scraped, whose images are the
// release the kustomizations pin, and whose autoscalers target its
// gateway.
func TestChartRenderingsDecodeStrictlyIntoTheKubernetesAPI(t *testing.T) {
	kinds := map[string]int{}
	pinned := kustomizedTag(t)
	for set, objs := range renderings(t) {
		file := filepath.Join(renderedDir, set+".yaml")
		deployments := map[string]*appsv1.Deployment{}
		for _, o := range objs {
			kinds[fmt.Sprintf("%T", o)]++
			d, ok := o.(*appsv1.Deployment)
			if !ok {
				continue
			}
			deployments[d.Name] = d
			checkPodSpec(t, file, d.Spec.Template.Spec)
			for _, c := range d.Spec.Template.Spec.Containers {
				if !strings.HasSuffix(c.Image, ":"+pinned) && !strings.Contains(c.Image, "@sha256:") {
					t.Errorf("%s: Deployment %s runs %s, neither the release the kustomizations pin (%s) nor a digest", file, d.Name, c.Image, pinned)
				}
			}
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.PersistentVolumeClaim != nil && (d.Spec.Replicas == nil || *d.Spec.Replicas != 1) {
					t.Errorf("%s: Deployment %s mounts claim %s (a file checkpoint) with %v replicas: a file checkpoint has one writer", file, d.Name, v.PersistentVolumeClaim.ClaimName, d.Spec.Replicas)
				}
			}
		}
		checkScraped(t, file, objs)
		for _, o := range objs {
			var target string
			switch a := o.(type) {
			case *autoscalingv2.HorizontalPodAutoscaler:
				target = a.Spec.ScaleTargetRef.Name
			case *scaledObject:
				target = a.Spec.ScaleTargetRef.Name
			default:
				continue
			}
			if d := deployments[target]; d == nil {
				t.Errorf("%s: an autoscaler targets %q, which is no Deployment of the chart", file, target)
			} else if d.Spec.Replicas != nil {
				t.Errorf("%s: Deployment %s sets replicas, which each upgrade would reset under its autoscaler", file, target)
			}
		}
	}
	for _, want := range []string{"*v1.Deployment", "*v1.ConfigMap", "*v1.Service", "*v1.PodDisruptionBudget", "*v1.NetworkPolicy",
		"*v1.PersistentVolumeClaim", "*v2.HorizontalPodAutoscaler", "*deploy_test.scaledObject",
		"*deploy_test.serviceMonitor", "*deploy_test.prometheusRuleObj"} {
		if kinds[want] == 0 {
			t.Errorf("no %s in the chart's renderings: %v", want, kinds)
		}
	}
}

// The chart's PrometheusRule carries the rules of prometheus-alerts.yaml
// (the chart reads that very file: files/ links to it).
func TestChartPrometheusRuleHoldsTheAlertRules(t *testing.T) {
	bare, err := os.ReadFile("prometheus-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Count(string(bare), "- alert: ")
	for set, objs := range renderings(t) {
		for _, o := range objs {
			r, ok := o.(*prometheusRuleObj)
			if !ok {
				continue
			}
			var alerts []string
			for _, g := range r.Spec.Groups {
				for _, rule := range g.Rules {
					alerts = append(alerts, rule.Alert)
					if !strings.Contains(string(bare), rule.Expr) && !strings.Contains(string(bare), strings.TrimSpace(rule.Expr)) && !strings.Contains(string(bare), indentLines(rule.Expr)) {
						t.Errorf("%s: alert %s's expr is not prometheus-alerts.yaml's: %q", set, rule.Alert, rule.Expr)
					}
				}
			}
			if len(alerts) != want || !slices.Contains(alerts, "OutboxRelayDown") {
				t.Errorf("%s: the PrometheusRule holds %d alerts, prometheus-alerts.yaml %d", set, len(alerts), want)
			}
		}
	}
}

// indentLines is a multi-line expr as the rules file writes it under "expr: |".
func indentLines(s string) string {
	return strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n          ")
}

// kustomizedTag is the image tag the kustomizations pin (the release the
// docs install).
func kustomizedTag(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("k8s", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeStrict(b)
	if err != nil || len(objs) != 1 || len(objs[0].(*kustomization).Images) == 0 {
		t.Fatalf("k8s/kustomization.yaml: %v", err)
	}
	return objs[0].(*kustomization).Images[0].NewTag
}

// jobOf is the job label Prometheus gives what sm scrapes through svc.
func jobOf(sm *serviceMonitor, svc *corev1.Service) string {
	if sm.Spec.JobLabel != "" {
		return svc.Labels[sm.Spec.JobLabel]
	}
	return svc.Name
}
