package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	release "helm.sh/helm/v4/pkg/release/v1"
)

// The chart, its documented examples, and where their renderings are kept
// (relative to the repository): deploy's and metrics' tests decode each
// rendering strictly into the Kubernetes API types and hold every metric
// it names to what the relay and the gateway expose, without helm in the
// relay's go.mod.
const (
	chartDir    = "deploy/helm/outbox-relay"
	renderedDir = "deploy/helm/rendered"
	// The release name, namespace and Kubernetes version the renderings
	// are made with (fixed: not whatever helm's own dependencies say).
	renderName      = "outbox-relay"
	renderNamespace = "outbox-relay"
	renderKube      = "v1.33.0"
)

// chartCmd lints the chart and renders it, as helm lint and helm template
// do (helm.sh/helm/v4 as a library, client-only: no cluster), over the
// default values and each examples/*.yaml; each rendering must equal the
// one kept in deploy/helm/rendered, which -update writes.
func chartCmd(root string, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("chart", flag.ContinueOnError)
	update := fs.Bool("update", false, "write the renderings to "+renderedDir)
	if err := fs.Parse(args); err != nil {
		return err
	}
	dir := filepath.Join(root, chartDir)
	examples, err := filepath.Glob(filepath.Join(dir, "examples", "*.yaml"))
	if err != nil {
		return err
	}
	sets := map[string]string{"default": ""}
	for _, e := range examples {
		sets[strings.TrimSuffix(filepath.Base(e), ".yaml")] = e
	}
	if *update {
		if err := os.RemoveAll(filepath.Join(root, renderedDir)); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(root, renderedDir), 0o755); err != nil {
			return err
		}
	}
	var stale []string
	for name, file := range sets {
		vals := map[string]any{}
		if file != "" {
			v, err := common.ReadValuesFile(file)
			if err != nil {
				return err
			}
			vals = v
		}
		if err := lintChart(dir, vals); err != nil {
			return fmt.Errorf("helm lint %s (%s values): %w", chartDir, name, err)
		}
		manifest, err := renderChart(dir, vals)
		if err != nil {
			return fmt.Errorf("helm template %s (%s values): %w", chartDir, name, err)
		}
		out := filepath.Join(root, renderedDir, name+".yaml")
		if *update {
			if err := os.WriteFile(out, manifest, 0o644); err != nil {
				return err
			}
		} else if kept, err := os.ReadFile(out); err != nil || !bytes.Equal(kept, manifest) {
			stale = append(stale, name)
		}
		fmt.Fprintf(stdout, "== chart, %s values: lint clean, rendered\n", name)
	}
	if kept, _ := filepath.Glob(filepath.Join(root, renderedDir, "*.yaml")); len(kept) != len(sets) {
		stale = append(stale, fmt.Sprintf("%d renderings kept for %d value sets", len(kept), len(sets)))
	}
	if len(stale) > 0 {
		return fmt.Errorf("%s is not what the chart renders (%s): run go run -C .ci/release . chart -update, and commit it", renderedDir, strings.Join(stale, ", "))
	}
	return nil
}

// lintChart is helm lint --strict: a warning fails too.
func lintChart(dir string, vals map[string]any) error {
	l := action.NewLint()
	l.Strict = true
	l.Namespace = renderNamespace
	kv, err := common.ParseKubeVersion(renderKube)
	if err != nil {
		return err
	}
	l.KubeVersion = kv
	res := l.Run([]string{dir}, vals)
	var msgs []string
	for _, m := range res.Messages {
		if m.Severity > support.InfoSev {
			msgs = append(msgs, m.Error())
		}
	}
	for _, e := range res.Errors {
		msgs = append(msgs, e.Error())
	}
	if len(msgs) > 0 {
		return fmt.Errorf("%s", strings.Join(msgs, "\n"))
	}
	return nil
}

// renderChart is helm template: the manifests of a client-only dry-run install.
func renderChart(dir string, vals map[string]any) ([]byte, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, err
	}
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(slog.DiscardHandler))
	in := action.NewInstall(cfg)
	in.DryRunStrategy = action.DryRunClient
	in.ReleaseName = renderName
	in.Namespace = renderNamespace
	in.Replace = true
	if in.KubeVersion, err = common.ParseKubeVersion(renderKube); err != nil {
		return nil, err
	}
	r, err := in.RunWithContext(context.Background(), ch, vals)
	if err != nil {
		return nil, err
	}
	rel, ok := r.(*release.Release)
	if !ok {
		return nil, fmt.Errorf("helm returned a %T, not a v1 release", r)
	}
	return []byte(strings.TrimSpace(rel.Manifest) + "\n"), nil
}

// packageChart is helm package of the chart as the release's: its version
// and appVersion (the image tag it installs) are the release's, and every
// file's time is the commit's, so two builds write the same bytes.
func packageChart(root, out string, st stamp) (string, error) {
	p := action.NewPackage()
	p.Destination = out
	p.Version = strings.TrimPrefix(st.Version, "v")
	p.AppVersion = st.Version
	p.SourceDateEpoch = &st.Time
	return p.Run(filepath.Join(root, chartDir), nil)
}

// checkPackagedChart lints the packaged chart and renders it over its
// default values: it must install the release's image.
func checkPackagedChart(tgz, version string) error {
	if err := lintChart(tgz, map[string]any{}); err != nil {
		return fmt.Errorf("helm lint %s: %w", tgz, err)
	}
	m, err := renderChart(tgz, map[string]any{})
	if err != nil {
		return fmt.Errorf("helm template %s: %w", tgz, err)
	}
	if !bytes.Contains(m, []byte("image: ghcr.io/outbox-relay/outbox-relay:"+version+"\n")) {
		return fmt.Errorf("%s does not install the image of %s", tgz, version)
	}
	return nil
}
