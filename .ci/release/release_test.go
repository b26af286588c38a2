package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

const testDockerfile = `# syntax=docker/dockerfile:1
FROM golang:1.26 AS build
RUN go build -o /out/app ./cmd/app
USER 0

FROM scratch
COPY --from=build /out/outbox-relay /bin/outbox-relay
COPY --from=build --chown=100:101 /out/state /data
USER 100:101
WORKDIR /data
EXPOSE 8080 9000/udp
ENV A=b
HEALTHCHECK --interval=5s --retries=2 \
  CMD ["/bin/outbox-relay", "healthcheck"]
ENTRYPOINT ["/bin/outbox-relay"]
CMD ["run"]
`

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The last stage, and only it, shapes the image: continuation lines,
// flags, ports without a protocol, the binary's and the owned directory's
// destinations.
func TestReadDockerfileReadsTheLastStage(t *testing.T) {
	st, err := readDockerfile(writeFile(t, testDockerfile))
	if err != nil {
		t.Fatal(err)
	}
	c := st.Config
	if c.User != "100:101" || c.WorkingDir != "/data" || len(c.ExposedPorts) != 2 || c.Env[0] != "A=b" ||
		strings.Join(c.Entrypoint, " ") != "/bin/outbox-relay" || strings.Join(c.Cmd, " ") != "run" {
		t.Errorf("config %+v", c)
	}
	if _, ok := c.ExposedPorts["8080/tcp"]; !ok {
		t.Errorf("EXPOSE 8080 is not 8080/tcp: %v", c.ExposedPorts)
	}
	if h := c.Healthcheck; h == nil || h.Interval != 5*time.Second || h.Retries != 2 || strings.Join(h.Test, " ") != "CMD /bin/outbox-relay healthcheck" {
		t.Errorf("healthcheck %+v", h)
	}
	if st.Binary != "/bin/outbox-relay" || len(st.Dirs) != 1 || st.Dirs[0] != (ownedDir{"/data", 100, 101}) {
		t.Errorf("binary %q dirs %+v", st.Binary, st.Dirs)
	}
}

// What an image without a shell cannot do is refused, naming the fix.
func TestReadDockerfileRefusesWhatTheImageCannotHold(t *testing.T) {
	for name, c := range map[string]struct{ text, want string }{
		"a RUN in the last stage": {strings.Replace(testDockerfile, "USER 100:101", "RUN mkdir /x\nUSER 100:101", 1), "knows only"},
		"a shell-form CMD":        {strings.Replace(testDockerfile, `CMD ["run"]`, "CMD run", 1), "exec form"},
		"no binary":               {strings.Replace(testDockerfile, "/out/outbox-relay /bin", "/out/other /bin", 1), "COPY the outbox-relay binary"},
		"a named chown":           {strings.Replace(testDockerfile, "--chown=100:101", "--chown=app:app", 1), "numeric"},
	} {
		if _, err := readDockerfile(writeFile(t, c.text)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
}

// An image built from the Dockerfile passes checkConfig; one whose config
// says something else does not. Its layer depends only on the binary.
func TestImageHoldsTheDockerfileAndIsReproducible(t *testing.T) {
	st, err := readDockerfile(writeFile(t, testDockerfile))
	if err != nil {
		t.Fatal(err)
	}
	bin := writeFile(t, "#!/bin/true\n")
	s := stamp{Version: "v0.0.1", Revision: "abc", Time: time.Unix(1700000000, 0).UTC()}
	digest := func(binary string) v1.Hash {
		img, err := platformImage(st, binary, "linux/arm64", s)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkConfig(img, st, "linux/arm64"); err != nil {
			t.Errorf("an image built from the Dockerfile: %v", err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if a, b := digest(bin), digest(bin); a != b {
		t.Errorf("two builds of one binary: %s and %s", a, b)
	}
	if a, b := digest(bin), digest(writeFile(t, "#!/bin/false\n")); a == b {
		t.Error("two binaries, one image digest")
	}
	img, _ := platformImage(st, bin, "linux/arm64", s)
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.Config.User = "0"
	bad, err := mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkConfig(bad, st, "linux/arm64"); err == nil || !strings.Contains(err.Error(), "USER") {
		t.Errorf("an image running as root passed: %v", err)
	}
	if err := checkConfig(img, st, "linux/amd64"); err == nil {
		t.Error("an arm64 image passed as amd64")
	}
	dir := t.TempDir()
	if err := unpack(img, dir, st); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"bin/outbox-relay", "etc/passwd", strings.TrimPrefix(caFile, "/")} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("the unpacked image lacks %s: %v", f, err)
		}
	}
}

// A release needs its CHANGELOG section; a pre-release does not.
func TestChangelogSection(t *testing.T) {
	cl := writeFile(t, "# Changelog\n\n## [Unreleased]\n\n- next\n\n## [0.1.0] - 2026-12-07\n\n### Added\n- all\n\n## [0.0.9]\n- old\n")
	if got, err := changelogSection(cl, "v0.1.0"); err != nil || got != "## [0.1.0] - 2026-12-07\n\n### Added\n- all\n" {
		t.Errorf("v0.1.0: %q, %v", got, err)
	}
	if _, err := changelogSection(cl, "v0.2.0"); err == nil || !strings.Contains(err.Error(), "rename [Unreleased]") {
		t.Errorf("v0.2.0 without a section: %v", err)
	}
	if got, err := changelogSection(cl, "v0.2.0-rc.1"); err != nil || got != "" {
		t.Errorf("a pre-release: %q, %v", got, err)
	}
}

// The chart refuses values it does not know, naming them (its
// values.schema.json), and a file checkpoint shared by two relays.
func TestChartRefusesBadValues(t *testing.T) {
	dir := filepath.Join("..", "..", chartDir)
	if _, err := renderChart(dir, map[string]any{}); err != nil {
		t.Fatalf("the default values: %v", err)
	}
	for name, c := range map[string]struct {
		vals map[string]any
		want string
	}{
		"a misspelt key":                  {map[string]any{"relay": map[string]any{"replica": 2}}, "replica"},
		"an unknown autoscaler":           {map[string]any{"gateway": map[string]any{"enabled": true, "autoscaling": map[string]any{"kind": "vpa"}}}, "kind"},
		"a file checkpoint on 2 replicas": {map[string]any{"relay": map[string]any{"checkpointVolume": map[string]any{"enabled": true}}}, "set relay.replicas to 1"},
	} {
		if _, err := renderChart(dir, c.vals); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, c.want)
		}
	}
}
