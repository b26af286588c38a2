package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// refName is the OCI layout annotation naming the index by its tag
// (skopeo's oci:dist/oci:v0.1.0).
const refName = "org.opencontainers.image.ref.name"

// caFile is where Go's crypto/x509 looks first for roots on Linux.
const caFile = "/etc/ssl/certs/ca-certificates.crt"

// writeImage writes the OCI image of each linux platform, under one index
// tagged st.Version, into out/oci, and that layout as one tar,
// out/outbox-relay_<version>_oci.tar.
func writeImage(out string, df finalStage, bins map[string]string, platforms []string, st stamp) error {
	var adds []mutate.IndexAddendum
	for _, p := range platforms {
		img, err := platformImage(df, bins[p], p, st)
		if err != nil {
			return fmt.Errorf("image %s: %w", p, err)
		}
		goos, goarch, _ := strings.Cut(p, "/")
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: goos, Architecture: goarch}}})
	}
	idx := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, adds...), types.OCIImageIndex)
	idx = mutate.Annotations(idx, labels(st)).(v1.ImageIndex)
	dir := filepath.Join(out, "oci")
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{refName: st.Version})); err != nil {
		return err
	}
	return tarDir(dir, filepath.Join(out, "outbox-relay_"+st.Version+"_oci.tar"), st)
}

// labels are the OCI annotations of the image, its config's labels too.
func labels(st stamp) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    "outbox-relay",
		"org.opencontainers.image.version":  st.Version,
		"org.opencontainers.image.revision": st.Revision,
		"org.opencontainers.image.created":  st.Time.Format("2006-01-02T15:04:05Z"),
		"org.opencontainers.image.source":   "https://github.com/outbox-relay/outbox-relay",
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
}

// platformImage is one platform's image: an empty base, one layer holding
// the binary where the Dockerfile copies it, its owned directories, the
// passwd and group entries of its user and the CA roots; the config is
// the Dockerfile's last stage.
func platformImage(df finalStage, binary, platform string, st stamp) (v1.Image, error) {
	layer, err := rootLayer(df, binary, st)
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, MediaType: types.OCILayer, History: v1.History{
		Created: v1.Time{Time: st.Time}, CreatedBy: "outbox-relay release " + st.Version, Comment: "the static binary on an empty base",
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, _ = strings.Cut(platform, "/")
	cf.Created = v1.Time{Time: st.Time}
	cf.Config = *df.Config.DeepCopy()
	cf.Config.Labels = labels(st)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels(st)).(v1.Image), nil
}

// rootLayer is the image's one layer as a gzipped tar whose every header
// is fixed (owner, mode, time), so that its digest depends only on the
// binary.
func rootLayer(df finalStage, binary string, st stamp) (v1.Layer, error) {
	exe, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	user, group, _ := strings.Cut(df.Config.User, ":")
	uid, err := strconv.Atoi(user)
	if err != nil {
		return nil, fmt.Errorf("Dockerfile USER %q: give a numeric uid[:gid] (the image has a passwd entry for it, no name lookup)", df.Config.User)
	}
	gid := uid
	if group != "" {
		if gid, err = strconv.Atoi(group); err != nil {
			return nil, fmt.Errorf("Dockerfile USER %q: give a numeric gid", df.Config.User)
		}
	}
	var roots bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue // a distrust-after date a PEM file cannot say
		}
		if _, err := x509.ParseCertificate(r.Certificate); err != nil {
			return nil, err
		}
		pem.Encode(&roots, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
	}
	type entry struct {
		name     string
		dir      bool
		mode     int64
		uid, gid int
		body     []byte
	}
	entries := []entry{
		{name: "etc/passwd", mode: 0o644, body: fmt.Appendf(nil, "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", uid, gid)},
		{name: "etc/group", mode: 0o644, body: fmt.Appendf(nil, "root:x:0:\nnonroot:x:%d:\n", gid)},
		{name: strings.TrimPrefix(caFile, "/"), mode: 0o644, body: roots.Bytes()},
		{name: strings.TrimPrefix(df.Binary, "/"), mode: 0o755, body: exe},
		{name: "tmp", dir: true, mode: 0o1777},
		{name: "home/nonroot", dir: true, mode: 0o700, uid: uid, gid: gid},
	}
	for _, d := range df.Dirs {
		entries = append(entries, entry{name: strings.TrimPrefix(d.Path, "/"), dir: true, mode: 0o755, uid: d.UID, gid: d.GID})
	}
	// Parent directories first, each once, root-owned.
	seen := map[string]bool{}
	var all []entry
	for _, e := range entries {
		for p := path.Dir(e.name); p != "."; p = path.Dir(p) {
			if !seen[p] && !slices.ContainsFunc(entries, func(x entry) bool { return x.name == p }) {
				seen[p] = true
				all = append(all, entry{name: p, dir: true, mode: 0o755})
			}
		}
		all = append(all, e)
	}
	slices.SortStableFunc(all, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range all {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: st.Time, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(e.body))}
		if e.dir {
			h.Name += "/"
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// tarDir writes the files under dir into one tar (an oci-archive), in
// name order with fixed headers.
func tarDir(dir, file string, st stamp) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			names = append(names, p)
		}
		return err
	})
	if err != nil {
		return err
	}
	slices.Sort(names)
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			f.Close()
			return err
		}
		rel, _ := filepath.Rel(dir, n)
		if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(b)), ModTime: st.Time, Format: tar.FormatPAX, Typeflag: tar.TypeReg}); err != nil {
			f.Close()
			return err
		}
		if _, err := tw.Write(b); err != nil {
			f.Close()
			return err
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
