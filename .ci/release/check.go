package main

import (
	"archive/tar"
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// checkCmd holds dist/ to what build promises: every file matches
// SHA256SUMS, each SBOM describes its binary, each image's config holds
// what the Dockerfile's last stage sets, and the image of this machine's
// platform, unpacked, runs: `version` prints the stamped version and
// revision, and the quickstart runs with it (deploy/quickstart.sh with
// OUTBOX_RELAY_BIN; it needs mariadbd).
func checkCmd(root string, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	version := fs.String("version", "", "the version dist/ was built as (required)")
	dist := fs.String("dist", filepath.Join(root, "dist"), "the directory build wrote")
	quickstart := fs.Bool("quickstart", true, "run deploy/quickstart.sh with the image's binary")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !semver.MatchString(*version) {
		return fmt.Errorf("-version %q: give the version dist/ was built as, vX.Y.Z", *version)
	}
	if err := checkSums(*dist); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "== SHA256SUMS: every file matches")
	sboms, _ := filepath.Glob(filepath.Join(*dist, "*.cdx.json"))
	for _, s := range sboms {
		if err := checkSBOM(s, strings.TrimSuffix(s, ".cdx.json"), *version); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "== %d SBOMs: each names its binary's SHA-256 and the version\n", len(sboms))
	chart := filepath.Join(*dist, "outbox-relay-"+strings.TrimPrefix(*version, "v")+".tgz")
	if err := checkPackagedChart(chart, *version); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "== %s: lint clean, installs the image %s\n", filepath.Base(chart), *version)
	df, err := readDockerfile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		return err
	}
	images, err := indexImages(filepath.Join(*dist, "oci"), *version)
	if err != nil {
		return err
	}
	host := runtime.GOOS + "/" + runtime.GOARCH
	var run v1.Image
	for p, img := range images {
		if err := checkConfig(img, df, p); err != nil {
			return fmt.Errorf("image %s: %w", p, err)
		}
		fmt.Fprintf(stdout, "== image %s: its config holds the Dockerfile's user, ports, healthcheck, workdir, entrypoint and cmd\n", p)
		if p == host {
			run = img
		}
	}
	if run == nil {
		return fmt.Errorf("the index has no %s image to run here: build with -platforms including %s", host, host)
	}
	dir, err := os.MkdirTemp("", "outbox-relay-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := unpack(run, dir, df); err != nil {
		return err
	}
	exe := filepath.Join(dir, df.Binary)
	want, err := fileSHA256(filepath.Join(*dist, stamp{Version: *version}.name(host)))
	if err != nil {
		return err
	}
	if got, _ := fileSHA256(exe); got != want {
		return fmt.Errorf("the image's %s is not dist's %s binary", df.Binary, host)
	}
	out, err := exec.Command(exe, "version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s version: %w\n%s", exe, err, out)
	}
	if !strings.HasPrefix(string(out), "outbox-relay "+*version+" (revision ") {
		return fmt.Errorf("the image's binary says %q, not the stamped version %s", strings.TrimSpace(string(out)), *version)
	}
	fmt.Fprintf(stdout, "== unpacked %s image: %s", host, out)
	if *quickstart {
		if err := runQuickstart(root, exe, stdout); err != nil {
			return err
		}
	}
	return nil
}

// checkSums verifies every line of dir/SHA256SUMS, and that it lists every file.
func checkSums(dir string) error {
	f, err := os.Open(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		return err
	}
	defer f.Close()
	listed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			return fmt.Errorf("SHA256SUMS: %q is not \"<sha256>  <file>\"", sc.Text())
		}
		got, err := fileSHA256(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if got != sum {
			return fmt.Errorf("%s: sha256 %s, SHA256SUMS says %s", name, got, sum)
		}
		listed[name] = true
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Type().IsRegular() && e.Name() != "SHA256SUMS" && !listed[e.Name()] {
			return fmt.Errorf("SHA256SUMS does not list %s", e.Name())
		}
	}
	return nil
}

// checkSBOM: the SBOM names the binary's SHA-256 and the version.
func checkSBOM(file, binary, version string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var bom struct {
		Metadata struct {
			Component  struct{ Name, Version string }
			Properties []struct{ Name, Value string }
		}
		Components []struct{ Name string }
	}
	if err := json.Unmarshal(b, &bom); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	sum, err := fileSHA256(binary)
	if err != nil {
		return err
	}
	hashed := false
	for _, p := range bom.Metadata.Properties {
		hashed = hashed || (p.Name == "cdx:gomod:binary:hash:SHA-256" && p.Value == sum)
	}
	if !hashed || bom.Metadata.Component.Version != version || len(bom.Components) == 0 {
		return fmt.Errorf("%s does not describe %s %s (its SHA-256 %s, its modules)", file, filepath.Base(binary), version, sum)
	}
	return nil
}

// indexImages reads the layout's index tagged version and returns its
// images by os/arch.
func indexImages(dir, version string) (map[string]v1.Image, error) {
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	top, err := lp.ImageIndex()
	if err != nil {
		return nil, err
	}
	im, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range im.Manifests {
		if d.Annotations[refName] != version {
			continue
		}
		idx, err := top.ImageIndex(d.Digest)
		if err != nil {
			return nil, err
		}
		m, err := idx.IndexManifest()
		if err != nil {
			return nil, err
		}
		images := map[string]v1.Image{}
		for _, d := range m.Manifests {
			if d.Platform == nil {
				return nil, fmt.Errorf("%s: manifest %s has no platform", dir, d.Digest)
			}
			img, err := idx.Image(d.Digest)
			if err != nil {
				return nil, err
			}
			images[d.Platform.OS+"/"+d.Platform.Architecture] = img
		}
		return images, nil
	}
	return nil, fmt.Errorf("%s has no index tagged %s", dir, version)
}

// checkConfig: the image's config holds what the Dockerfile sets, for its platform.
func checkConfig(img v1.Image, df finalStage, platform string) error {
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	if got := cf.OS + "/" + cf.Architecture; got != platform {
		return fmt.Errorf("config says %s", got)
	}
	got, want := cf.Config, df.Config
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"USER", got.User, want.User},
		{"WORKDIR", got.WorkingDir, want.WorkingDir},
		{"EXPOSE", got.ExposedPorts, want.ExposedPorts},
		{"ENV", got.Env, want.Env},
		{"HEALTHCHECK", got.Healthcheck, want.Healthcheck},
		{"ENTRYPOINT", got.Entrypoint, want.Entrypoint},
		{"CMD", got.Cmd, want.Cmd},
	} {
		if !reflect.DeepEqual(f.got, f.want) {
			return fmt.Errorf("%s is %v in the image, %v in the Dockerfile", f.name, f.got, f.want)
		}
	}
	return nil
}

// unpack writes the image's files under dir, and checks on the way that
// the binary is executable and each directory the Dockerfile copies with
// --chown is owned so.
func unpack(img v1.Image, dir string, df finalStage) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	owners := map[string][2]int{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return err
		}
		name := "/" + strings.TrimSuffix(h.Name, "/")
		p := filepath.Join(dir, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			owners[name] = [2]int{h.Uid, h.Gid}
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if name == df.Binary && h.Mode&0o111 == 0 {
				return fmt.Errorf("the image's %s is not executable (mode %o)", name, h.Mode)
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode&0o777))
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("the image holds %s of type %c: only files and directories were written", name, h.Typeflag)
		}
	}
	for _, d := range df.Dirs {
		if got, ok := owners[d.Path]; !ok || got != [2]int{d.UID, d.GID} {
			return fmt.Errorf("the image's %s is owned by %v, the Dockerfile's COPY --chown says %d:%d", d.Path, got, d.UID, d.GID)
		}
	}
	return nil
}

// runQuickstart runs a copy of deploy/quickstart.sh (so its .quickstart
// is a temporary directory's) with the binary, on free ports, and wants
// its three events delivered and its checkpoint saved.
func runQuickstart(root, exe string, stdout io.Writer) error {
	b, err := os.ReadFile(filepath.Join(root, "deploy", "quickstart.sh"))
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "outbox-relay-quickstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "deploy", "quickstart.sh")
	if err := os.MkdirAll(filepath.Dir(script), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(script, b, 0o755); err != nil {
		return err
	}
	db, err := freePort()
	if err != nil {
		return err
	}
	metrics, err := freePort()
	if err != nil {
		return err
	}
	cmd := exec.Command("bash", script)
	cmd.Env = append(os.Environ(), "OUTBOX_RELAY_BIN="+exe, "PORT="+db, "METRICS_PORT="+metrics)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("deploy/quickstart.sh with the image's binary: %w\n%s", err, out)
	}
	s := string(out)
	if n := strings.Count(s, `"type":"order.created"`); n != 3 || !strings.Contains(s, "== done: checkpoint saved") {
		return fmt.Errorf("deploy/quickstart.sh with the image's binary printed %d of its 3 events, or saved no checkpoint:\n%s", n, s)
	}
	fmt.Fprintln(stdout, "== deploy/quickstart.sh with the image's binary: 3 events delivered to stdout, checkpoint saved")
	return nil
}

// freePort is a loopback port nothing listened on a moment ago.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}
