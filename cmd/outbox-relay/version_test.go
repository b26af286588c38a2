package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionLine(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-11-30T12:00:00Z"}}
	for _, tc := range []struct {
		name             string
		stamped, rev, at string
		bi               *debug.BuildInfo
		want             string
	}{
		{"a plain build of a checkout says dev", "dev", "", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			"outbox-relay dev (go1.26.8)"},
		{"go install …@v1.2.3 gives the module version", "dev", "", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}},
			"outbox-relay v1.2.3 (go1.26.8)"},
		{"a build of a git checkout gives its revision and time", "dev", "", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: vcs},
			"outbox-relay dev (revision 0123abcd, built 2026-11-30T12:00:00Z, go1.26.8)"},
		{"uncommitted changes mark the revision dirty", "dev", "", "", &debug.BuildInfo{GoVersion: "go1.26.8", Settings: append(vcs, debug.BuildSetting{Key: "vcs.modified", Value: "true"})},
			"outbox-relay dev (revision 0123abcd-dirty, built 2026-11-30T12:00:00Z, go1.26.8)"},
		{"stamped values win over the build info", "v2.0.0", "feedbeef", "2026-12-01T00:00:00Z", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: vcs},
			"outbox-relay v2.0.0 (revision feedbeef, built 2026-12-01T00:00:00Z, go1.26.8)"},
		{"no build info", "dev", "", "", nil, "outbox-relay dev"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func(v, r, a string) { version, revision, buildTime = v, r, a }(version, revision, buildTime)
			version, revision, buildTime = tc.stamped, tc.rev, tc.at
			if got := versionLine(tc.bi); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// The binary built with the Dockerfile's -ldflags prints what was stamped.
func TestVersionPrintsWhatWasStamped(t *testing.T) {
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`-ldflags "([^"]+)"`).FindSubmatch(df)
	if m == nil {
		t.Fatal(`the Dockerfile has no -ldflags "…"`)
	}
	bin := filepath.Join(t.TempDir(), "outbox-relay")
	const v, rev, at = "v9.8.7-test.1", "0123456789abcdef0123456789abcdef01234567", "2026-12-02T10:00:00Z"
	ldflags := strings.NewReplacer("${VERSION}", v, "${REVISION}", rev, "${BUILD_TIME}", at).Replace(string(m[1]))
	if strings.Contains(ldflags, "${") {
		t.Fatalf("the Dockerfile's -ldflags use a build argument this test does not set: %s", ldflags)
	}
	if out, err := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", bin, err, out)
	}
	want := "outbox-relay " + v + " (revision " + rev + ", built " + at + ", go"
	if !strings.HasPrefix(string(out), want) {
		t.Fatalf("version printed %q, want it to start %q", out, want)
	}
}
