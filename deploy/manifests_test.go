package deploy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor
// (monitoring.coreos.com/v1) the manifests use: its CRD has no type in
// k8s.io/api, and no schema can be downloaded here.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		// JobLabel names the Service label whose value is the job label
		// (default: the Service's name).
		JobLabel  string               `json:"jobLabel,omitempty"`
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// prometheusRuleObj is the part of the Prometheus Operator's PrometheusRule
// (monitoring.coreos.com/v1) the manifests use.
type prometheusRuleObj struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// scaledObject is the part of KEDA's ScaledObject (keda.sh/v1alpha1) the
// chart renders for the gateway.
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			Name string `json:"name"`
		} `json:"scaleTargetRef"`
		MinReplicaCount int `json:"minReplicaCount"`
		MaxReplicaCount int `json:"maxReplicaCount"`
		CooldownPeriod  int `json:"cooldownPeriod,omitempty"`
		Triggers        []struct {
			Type     string            `json:"type"`
			Metadata map[string]string `json:"metadata"`
		} `json:"triggers"`
		Advanced *struct {
			HorizontalPodAutoscalerConfig struct {
				Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
			} `json:"horizontalPodAutoscalerConfig"`
		} `json:"advanced,omitempty"`
	} `json:"spec"`
}

// kustomization is what the manifests' kustomization.yaml files use.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name, NewTag, Digest string
	} `json:"images"`
}

// typeOf is the Go type each apiVersion/kind decodes into.
func typeOf(apiVersion, kind string) (any, bool) {
	switch apiVersion + " " + kind {
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, true
	case "v1 Secret":
		return &corev1.Secret{}, true
	case "v1 Service":
		return &corev1.Service{}, true
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, true
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}, true
	case "v1 PersistentVolumeClaim":
		return &corev1.PersistentVolumeClaim{}, true
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, true
	case "keda.sh/v1alpha1 ScaledObject":
		return &scaledObject{}, true
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, true
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, true
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return &serviceMonitor{}, true
	case "monitoring.coreos.com/v1 PrometheusRule":
		return &prometheusRuleObj{}, true
	case "kustomize.config.k8s.io/v1beta1 Kustomization":
		return &kustomization{}, true
	}
	return nil, false
}

// decodeStrict decodes each YAML document of b into the Kubernetes API type
// of its apiVersion and kind; a field the type does not have, a value of
// the wrong type or an unknown kind is an error.
func decodeStrict(b []byte) ([]any, error) {
	var out []any
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for i := 0; ; i++ {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if doc == nil {
			continue
		}
		api, _ := doc["apiVersion"].(string)
		kind, _ := doc["kind"].(string)
		obj, ok := typeOf(api, kind)
		if !ok {
			return nil, fmt.Errorf("document %d: apiVersion %q kind %q: not a type this test knows", i, api, kind)
		}
		j, err := json.Marshal(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", i, kind, err)
		}
		jd := json.NewDecoder(bytes.NewReader(j))
		jd.DisallowUnknownFields()
		if err := jd.Decode(obj); err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", i, kind, err)
		}
		out = append(out, obj)
	}
}

// TestManifestsDecodeStrictlyIntoTheKubernetesAPI: every object of the
// Kubernetes manifests (deploy/k8s, deploy/k8s/gateway, the Secret example),
// as their kustomizations list them, decodes into its k8s.io/api type with
// unknown fields refused.
func TestManifestsDecodeStrictlyIntoTheKubernetesAPI(t *testing.T) {
	kinds := map[string]int{}
	for _, dir := range []string{"k8s", "k8s/gateway"} {
		b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeStrict(b)
		if err != nil || len(objs) != 1 {
			t.Fatalf("%s/kustomization.yaml: %v", dir, err)
		}
		k := objs[0].(*kustomization)
		var all []any
		for _, img := range k.Images {
			if img.NewTag == "" && img.Digest == "" {
				t.Errorf("%s/kustomization.yaml: image %s pins neither a tag nor a digest", dir, img.Name)
			}
		}
		for _, r := range k.Resources {
			p := filepath.Join(dir, r)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := decodeStrict(b)
			if err != nil {
				t.Errorf("%s: %v", p, err)
				continue
			}
			for _, o := range objs {
				kinds[fmt.Sprintf("%T", o)]++
				if d, ok := o.(*appsv1.Deployment); ok {
					checkPodSpec(t, p, d.Spec.Template.Spec)
				}
			}
			all = append(all, objs...)
		}
		checkScraped(t, dir, all)
	}
	b, err := os.ReadFile("k8s-secret.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeStrict(b); err != nil {
		t.Errorf("k8s-secret.example.yaml: %v", err)
	}
	for _, want := range []string{"*v1.Deployment", "*v1.ConfigMap", "*v1.Service", "*v1.NetworkPolicy", "*v2.HorizontalPodAutoscaler", "*deploy_test.serviceMonitor"} {
		if kinds[want] == 0 {
			t.Errorf("no %s among the manifests: %v", want, kinds)
		}
	}
}

// checkScraped: every Deployment's pods are the endpoints of a Service with a
// "metrics" port, which a ServiceMonitor of the same directory selects: the
// alerts, the dashboard and the gateway's HorizontalPodAutoscaler read what
// Prometheus scrapes from them.
func checkScraped(t *testing.T, dir string, objs []any) {
	t.Helper()
	matches := func(sel map[string]string, labels map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	for _, o := range objs {
		d, ok := o.(*appsv1.Deployment)
		if !ok {
			continue
		}
		pods := d.Spec.Template.Labels
		scraped := false
		for _, o := range objs {
			svc, ok := o.(*corev1.Service)
			if !ok || !matches(svc.Spec.Selector, pods) {
				continue
			}
			hasPort := false
			for _, p := range svc.Spec.Ports {
				hasPort = hasPort || p.Name == "metrics"
			}
			for _, o := range objs {
				if sm, ok := o.(*serviceMonitor); ok && hasPort && matches(sm.Spec.Selector.MatchLabels, svc.Labels) {
					scraped = true
				}
			}
		}
		if !scraped {
			t.Errorf("%s: the pods of Deployment %s are not scraped: no Service with a metrics port selects them, or no ServiceMonitor selects that Service", dir, d.Name)
		}
	}
}

// checkPodSpec: each container's probes name a port it declares.
func checkPodSpec(t *testing.T, file string, spec corev1.PodSpec) {
	t.Helper()
	for _, c := range spec.Containers {
		ports := map[string]bool{}
		for _, p := range c.Ports {
			ports[p.Name] = true
		}
		for _, pr := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
			if pr != nil && pr.HTTPGet != nil && pr.HTTPGet.Port.StrVal != "" && !ports[pr.HTTPGet.Port.StrVal] {
				t.Errorf("%s: container %s probes port %q, which it does not declare", file, c.Name, pr.HTTPGet.Port.StrVal)
			}
		}
	}
}

// The strict decoding refuses what the API server would: a misspelt field,
// a value of the wrong type, an unknown kind.
func TestStrictDecodingRefusesWhatTheAPIRefuses(t *testing.T) {
	for name, doc := range map[string]string{
		"a misspelt field":  "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replica: 2}\n",
		"a nested misspelt": "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {ports: [{port: 80, targetPrt: 9108}]}\n",
		"a wrong type":      "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: two}\n",
		"an unknown kind":   "apiVersion: apps/v1\nkind: Deploymnt\nmetadata: {name: x}\n",
	} {
		if _, err := decodeStrict([]byte(doc)); err == nil {
			t.Errorf("%s: decoded without an error", name)
		} else if !strings.Contains(err.Error(), "document 0") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
