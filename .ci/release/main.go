// Command release builds outbox-relay's release into dist/ and checks it,
// on one machine, with no Docker daemon and no registry:
//
//	go run -C .ci/release . build -version v0.1.0   # every artifact into dist/
//	go run -C .ci/release . check -version v0.1.0   # checksums, image config, run the image's binary
//	go run -C .ci/release . chart [-update]         # helm lint + template of deploy/helm/outbox-relay
//
// build writes, for linux and darwin on amd64 and arm64 (-platforms picks
// fewer): a static binary built with -trimpath, its version, revision and
// build time stamped with -X, the build time being the commit's (so two
// builds of a commit give the same bytes); a CycloneDX SBOM per binary; an
// OCI image per linux platform, the binary on an empty base shaped by the
// Dockerfile's last stage, under one multi-arch index in an OCI layout
// (dist/oci) and its tar; the Helm chart packaged as the release's; the
// CHANGELOG section of the version; SHA256SUMS.
// Publishing is then one step with credentials (docs/install.md).
//
// It is its own module so that helm, go-containerregistry and
// cyclonedx-gomod never enter the relay's go.mod.
package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: release build|check|chart [flags]")
	}
	// helm logs each symbolic link it follows (the chart's files/ link to
	// deploy/prometheus-alerts.yaml and the dashboard): not news here.
	slog.SetDefault(slog.New(slog.DiscardHandler))
	root, err := repoRoot()
	if err != nil {
		return err
	}
	switch args[0] {
	case "build":
		return buildCmd(root, args[1:], stdout)
	case "check":
		return checkCmd(root, args[1:], stdout)
	case "chart":
		return chartCmd(root, args[1:], stdout)
	}
	return fmt.Errorf("unknown command %q: want build, check or chart", args[0])
}

// repoRoot is the top of the relay's repository (this module lives in .ci/release).
func repoRoot() (string, error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse --show-toplevel: %w (run this inside the repository)", err)
	}
	root := strings.TrimSpace(string(out))
	if _, err := os.Stat(filepath.Join(root, "cmd", "outbox-relay")); err != nil {
		return "", fmt.Errorf("%s is not the outbox-relay repository: %w", root, err)
	}
	return root, nil
}

func git(root string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
