package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// semver is a release version as the tags are written: v1.2.3, or a
// pre-release v1.2.3-rc.1.
var semver = regexp.MustCompile(`^v(\d+)\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?$`)

var allPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}

// stamp is what -X writes into main.version, main.revision and main.buildTime.
type stamp struct {
	Version, Revision string
	Time              time.Time
}

// name is the artifacts' base name for a platform: outbox-relay_v0.1.0_linux_amd64.
func (s stamp) name(platform string) string {
	return "outbox-relay_" + s.Version + "_" + strings.ReplaceAll(platform, "/", "_")
}

func buildCmd(root string, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	version := fs.String("version", "", "the version to stamp, vX.Y.Z (required); a release version needs its CHANGELOG.md section")
	platforms := fs.String("platforms", strings.Join(allPlatforms, ","), "os/arch list of the binaries; the image holds the linux ones")
	out := fs.String("out", filepath.Join(root, "dist"), "output directory (emptied first)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	st, err := stampOf(root, *version)
	if err != nil {
		return err
	}
	plats := strings.Split(*platforms, ",")
	for _, p := range plats {
		if !slices.Contains(allPlatforms, p) {
			return fmt.Errorf("-platforms: %q is not one of %s", p, strings.Join(allPlatforms, ","))
		}
	}
	notes, err := changelogSection(filepath.Join(root, "CHANGELOG.md"), st.Version)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(*out); err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	if notes != "" {
		if err := os.WriteFile(filepath.Join(*out, "RELEASE_NOTES.md"), []byte(notes), 0o644); err != nil {
			return err
		}
	}
	bins := map[string]string{}
	for _, p := range plats {
		bin := filepath.Join(*out, st.name(p))
		fmt.Fprintf(stdout, "== %s\n", filepath.Base(bin))
		if err := goBuild(root, p, bin, st); err != nil {
			return err
		}
		if err := writeSBOM(bin, bin+".cdx.json", st); err != nil {
			return err
		}
		bins[p] = bin
	}
	df, err := readDockerfile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		return err
	}
	var linux []string
	for _, p := range plats {
		if strings.HasPrefix(p, "linux/") {
			linux = append(linux, p)
		}
	}
	if len(linux) > 0 {
		fmt.Fprintf(stdout, "== image %s\n", strings.Join(linux, ", "))
		if err := writeImage(*out, df, bins, linux, st); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout, "== chart")
	if _, err := packageChart(root, *out, st); err != nil {
		return fmt.Errorf("helm package %s: %w", chartDir, err)
	}
	if err := writeSums(*out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "== %s: %s built at %s (%s)\n", *out, st.Version, st.Time.Format(time.RFC3339), st.Revision)
	return nil
}

// stampOf is the version given, the commit checked out and its commit time.
// A release from a tree with uncommitted changes is refused: its binary
// would not be the commit's, and could not be built again.
func stampOf(root, version string) (stamp, error) {
	if !semver.MatchString(version) {
		return stamp{}, fmt.Errorf("-version %q: give the version to build as vX.Y.Z (e.g. -version v0.1.0)", version)
	}
	rev, err := git(root, "rev-parse", "HEAD")
	if err != nil {
		return stamp{}, err
	}
	if dirty, err := git(root, "status", "--porcelain", "--untracked-files=no"); err != nil {
		return stamp{}, err
	} else if dirty != "" && semver.FindStringSubmatch(version)[4] == "" {
		return stamp{}, fmt.Errorf("the work tree has uncommitted changes:\n%s\ncommit or stash them: a release is built from a commit (a pre-release such as %s-rc.1 may be built from a changed tree)", dirty, version)
	}
	ct, err := git(root, "show", "-s", "--format=%ct", "HEAD")
	if err != nil {
		return stamp{}, err
	}
	sec, err := strconv.ParseInt(ct, 10, 64)
	if err != nil {
		return stamp{}, fmt.Errorf("commit time %q: %w", ct, err)
	}
	// SOURCE_DATE_EPOCH, when set, wins (reproducible-builds.org).
	if e := os.Getenv("SOURCE_DATE_EPOCH"); e != "" {
		if sec, err = strconv.ParseInt(e, 10, 64); err != nil {
			return stamp{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want seconds since 1970", e)
		}
	}
	return stamp{Version: version, Revision: rev, Time: time.Unix(sec, 0).UTC()}, nil
}

// goBuild builds cmd/outbox-relay for platform into bin: static, -trimpath,
// without VCS stamping (the -X values say it), with every setting that
// changes the bytes fixed here rather than taken from the environment.
func goBuild(root, platform, bin string, st stamp) error {
	goos, goarch, _ := strings.Cut(platform, "/")
	ldflags := fmt.Sprintf("-s -w -X main.version=%s -X main.revision=%s -X main.buildTime=%s",
		st.Version, st.Revision, st.Time.Format(time.RFC3339))
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", bin, "./cmd/outbox-relay")
	cmd.Dir = root
	env := slices.DeleteFunc(os.Environ(), func(e string) bool {
		k, _, _ := strings.Cut(e, "=")
		return slices.Contains([]string{"GOFLAGS", "GOAMD64", "GOARM64", "GOEXPERIMENT", "CGO_ENABLED", "GOOS", "GOARCH"}, k)
	})
	cmd.Env = append(env, "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch, "GOAMD64=v1", "GOARM64=v8.0", "GOFLAGS=-mod=readonly")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", platform, err, stderr.String())
	}
	return nil
}

// changelogSection is the text of CHANGELOG.md's section for version
// ("## [0.1.0] - 2026-12-07" up to the next "## "). A release version needs
// one; a pre-release (v0.1.0-rc.1, as CI builds) is built without.
func changelogSection(file, version string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	head := "## [" + strings.TrimPrefix(version, "v") + "]"
	var sec []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "## ") {
			if len(sec) > 0 {
				break
			}
			if strings.HasPrefix(l, head) {
				sec = append(sec, l)
			}
			continue
		}
		if len(sec) > 0 {
			sec = append(sec, l)
		}
	}
	if len(sec) == 0 {
		if semver.FindStringSubmatch(version)[4] != "" {
			return "", nil
		}
		return "", fmt.Errorf("CHANGELOG.md has no %q section: rename [Unreleased] to \"%s - YYYY-MM-DD\" (Keep a Changelog) before building %s, or build a pre-release (%s-rc.1)", head, head, version, version)
	}
	return strings.TrimSpace(strings.Join(sec, "\n")) + "\n", nil
}

// writeSums writes SHA256SUMS over every regular file of dir's top level
// (sha256sum -c reads it).
func writeSums(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var b strings.Builder
	for _, e := range ents {
		if !e.Type().IsRegular() || e.Name() == "SHA256SUMS" {
			continue
		}
		sum, err := fileSHA256(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, e.Name())
	}
	return os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(b.String()), 0o644)
}

func fileSHA256(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
