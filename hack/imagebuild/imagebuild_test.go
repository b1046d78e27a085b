package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var epoch = time.Unix(1767225600, 0).UTC() // 2026-01-01T00:00:00Z

// inputs writes the same two source files into a fresh folder with the
// given host mtime and permissions: neither may reach the image.
func inputs(t *testing.T, hostTime time.Time, perm os.FileMode) (bin, conf string) {
	t.Helper()
	dir := t.TempDir()
	bin = filepath.Join(dir, "app")
	conf = filepath.Join(dir, "app.conf")
	for p, data := range map[string]string{bin: "\x7fELF pretend binary\n" + strings.Repeat("x", 4096), conf: "key: value\n"} {
		if err := os.WriteFile(p, []byte(data), perm); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, hostTime, hostTime); err != nil {
			t.Fatal(err)
		}
	}
	return bin, conf
}

func spec(bin, conf string) Spec {
	return Spec{
		Files: []File{
			{Src: bin, Dest: "/usr/local/bin/app", Mode: 0o755},
			{Src: conf, Dest: "/etc/app/app.conf", Mode: 0o644},
			{Dest: "/tmp", Mode: 0o1777, Dir: true},
		},
		Entrypoint: []string{"/usr/local/bin/app"},
		Cmd:        []string{"--v=2"},
		User:       "65532:65532",
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		WorkingDir: "/",
		Labels: map[string]string{
			"org.opencontainers.image.title":    "app",
			"org.opencontainers.image.version":  "v0.0.1",
			"org.opencontainers.image.licenses": "Apache-2.0",
		},
		Created: epoch,
		OS:      "linux",
		Arch:    "amd64",
	}
}

func mustBuild(t *testing.T, s Spec) v1.Image {
	t.Helper()
	img, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func mustDigest(t *testing.T, s Spec) v1.Hash {
	t.Helper()
	d, err := mustBuild(t, s).Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func archiveSum(t *testing.T, s Spec, ref string) (string, string) {
	t.Helper()
	img, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "img.tar")
	if err := WriteArchiveFile(p, img, tag, s.Created); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return p, hex.EncodeToString(sum[:])
}

// Same inputs, built twice — from files in other folders, with other host
// mtimes and permissions, listed in another order — give the same image
// digest and the same archive bytes.
func TestBuildIsReproducible(t *testing.T) {
	bin1, conf1 := inputs(t, time.Now(), 0o600)
	bin2, conf2 := inputs(t, time.Now().Add(-48*time.Hour), 0o755)

	s1 := spec(bin1, conf1)
	s2 := spec(bin2, conf2)
	s2.Files = []File{s2.Files[2], s2.Files[1], s2.Files[0]}

	d1, d2 := mustDigest(t, s1), mustDigest(t, s2)
	if d1 != d2 {
		t.Fatalf("same inputs, different digests: %s vs %s", d1, d2)
	}
	if d3 := mustDigest(t, s1); d3 != d1 {
		t.Fatalf("second build of the same spec: %s vs %s", d3, d1)
	}
	_, a1 := archiveSum(t, s1, "lull.dev/app:v0.0.1")
	_, a2 := archiveSum(t, s2, "lull.dev/app:v0.0.1")
	if a1 != a2 {
		t.Fatalf("same inputs, different archive bytes: %s vs %s", a1, a2)
	}
}

// Every input that matters changes the digest.
func TestBuildDigestFollowsInputs(t *testing.T) {
	bin, conf := inputs(t, time.Now(), 0o644)
	base := mustDigest(t, spec(bin, conf))
	changes := map[string]func(s *Spec){
		"created":    func(s *Spec) { s.Created = s.Created.Add(time.Second) },
		"mode":       func(s *Spec) { s.Files[0].Mode = 0o700 },
		"dest":       func(s *Spec) { s.Files[0].Dest = "/app" },
		"user":       func(s *Spec) { s.User = "0:0" },
		"env":        func(s *Spec) { s.Env = append(s.Env, "A=b") },
		"label":      func(s *Spec) { s.Labels["org.opencontainers.image.version"] = "v0.0.2" },
		"entrypoint": func(s *Spec) { s.Entrypoint = []string{"/app"} },
		"arch":       func(s *Spec) { s.Arch = "arm64" },
		"content": func(s *Spec) {
			p := filepath.Join(t.TempDir(), "other")
			if err := os.WriteFile(p, []byte("other"), 0o644); err != nil {
				t.Fatal(err)
			}
			s.Files[0].Src = p
		},
	}
	for what, change := range changes {
		s := spec(bin, conf)
		change(&s)
		if d := mustDigest(t, s); d == base {
			t.Errorf("changing %s kept digest %s", what, d)
		}
	}
}

func TestImageContents(t *testing.T) {
	bin, conf := inputs(t, time.Now(), 0o600)
	s := spec(bin, conf)
	img, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s", mt)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.Config.MediaType != types.OCIConfigJSON || len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer {
		t.Errorf("manifest: config %s, layers %+v", m.Config.MediaType, m.Layers)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !cf.Created.Time.Equal(epoch) || len(cf.History) != 1 || !cf.History[0].Created.Time.Equal(epoch) {
		t.Errorf("created %v, history %+v", cf.Created, cf.History)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || cf.RootFS.Type != "layers" || len(cf.RootFS.DiffIDs) != 1 {
		t.Errorf("config: %+v", cf)
	}
	want := v1.Config{
		Entrypoint: s.Entrypoint, Cmd: s.Cmd, User: s.User, Env: s.Env, WorkingDir: "/", Labels: s.Labels,
	}
	if !reflect.DeepEqual(cf.Config, want) {
		t.Errorf("config.config = %+v, want %+v", cf.Config, want)
	}

	layers, _ := img.Layers()
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	type got struct {
		mode int64
		typ  byte
	}
	var names []string
	entries := map[string]got{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Uid != 0 || hdr.Gid != 0 || hdr.Uname != "" || hdr.Gname != "" || !hdr.ModTime.Equal(epoch) {
			t.Errorf("%s: owner %d:%d (%q:%q), mtime %v", hdr.Name, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname, hdr.ModTime)
		}
		names = append(names, hdr.Name)
		entries[hdr.Name] = got{hdr.Mode, hdr.Typeflag}
	}
	wantNames := []string{"etc/", "etc/app/", "etc/app/app.conf", "tmp/", "usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/app"}
	if !reflect.DeepEqual(names, wantNames) {
		t.Errorf("entries %q, want %q", names, wantNames)
	}
	for n, w := range map[string]got{
		"etc/":              {0o755, tar.TypeDir},
		"tmp/":              {0o1777, tar.TypeDir},
		"usr/local/bin/app": {0o755, tar.TypeReg},
		"etc/app/app.conf":  {0o644, tar.TypeReg},
	} {
		if entries[n] != w {
			t.Errorf("%s: mode %o type %c, want %o %c", n, entries[n].mode, entries[n].typ, w.mode, w.typ)
		}
	}
}

func TestBuildRejects(t *testing.T) {
	bin, conf := inputs(t, time.Now(), 0o644)
	for what, change := range map[string]func(s *Spec){
		"no created":    func(s *Spec) { s.Created = time.Time{} },
		"relative dest": func(s *Spec) { s.Files[0].Dest = "app" },
		"duplicate":     func(s *Spec) { s.Files = append(s.Files, s.Files[0]) },
		"file as dir":   func(s *Spec) { s.Files = append(s.Files, File{Src: conf, Dest: "/usr/local/bin/app/x"}) },
		"missing src":   func(s *Spec) { s.Files[0].Src = filepath.Join(t.TempDir(), "nope") },
		"no platform":   func(s *Spec) { s.Arch = "" },
	} {
		s := spec(bin, conf)
		change(&s)
		if _, err := Build(s); err == nil {
			t.Errorf("%s: built anyway", what)
		}
	}
}

// The archive is a valid docker-archive and a valid OCI layout, both views
// holding the same image, named for containerd, in Docker 25's layout.
func TestArchiveHasBothViews(t *testing.T) {
	bin, conf := inputs(t, time.Now(), 0o644)
	s := spec(bin, conf)
	const ref = "lull.dev/app:v0.0.1-3-gabcdef0"
	p, _ := archiveSum(t, s, ref)
	want := mustDigest(t, s)

	v, err := VerifyArchive(p)
	if err != nil {
		t.Fatal(err)
	}
	if v.Digest != want || v.Ref.String() != ref {
		t.Errorf("verified %s %s, want %s %s", v.Ref, v.Digest, ref, want)
	}

	// The raw files, as `ctr images import` and `docker load` see them.
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	files := map[string][]byte{}
	var order []string
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Uid != 0 || !hdr.ModTime.Equal(epoch) {
			t.Errorf("%s: uid %d mtime %v", hdr.Name, hdr.Uid, hdr.ModTime)
		}
		order = append(order, hdr.Name)
		b, _ := io.ReadAll(tr)
		files[hdr.Name] = b
	}
	if len(order) != 8 || order[0] != "blobs/" || order[1] != "blobs/sha256/" ||
		!reflect.DeepEqual(order[5:], []string{"index.json", "manifest.json", "oci-layout"}) {
		t.Errorf("archive entries %q", order)
	}
	if got := string(files["oci-layout"]); got != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout %s", got)
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		t.Fatal(err)
	}
	if idx.MediaType != types.OCIImageIndex || len(idx.Manifests) != 1 {
		t.Fatalf("index.json %s", files["index.json"])
	}
	d := idx.Manifests[0]
	if d.Digest != want || d.MediaType != types.OCIManifestSchema1 ||
		d.Annotations["io.containerd.image.name"] != ref ||
		d.Annotations["org.opencontainers.image.ref.name"] != "v0.0.1-3-gabcdef0" {
		t.Errorf("index.json manifest %+v", d)
	}
	if !bytes.Equal(files["blobs/sha256/"+want.Hex], mustRawManifest(t, s)) {
		t.Errorf("manifest blob differs")
	}
	var dm []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &dm); err != nil {
		t.Fatal(err)
	}
	if len(dm) != 1 || !reflect.DeepEqual(dm[0].RepoTags, []string{ref}) || len(dm[0].Layers) != 1 {
		t.Fatalf("manifest.json %s", files["manifest.json"])
	}
	for _, p := range append([]string{dm[0].Config}, dm[0].Layers...) {
		b, ok := files[p]
		if !ok || !strings.HasPrefix(p, "blobs/sha256/") {
			t.Errorf("manifest.json names %q, not a blob in the archive", p)
			continue
		}
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) != strings.TrimPrefix(p, "blobs/sha256/") {
			t.Errorf("%s: content does not match its name", p)
		}
	}
}

func mustRawManifest(t *testing.T, s Spec) []byte {
	t.Helper()
	b, err := mustBuild(t, s).RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The command line end to end: two runs with the same flags write the same
// digest file and archive; verify accepts the archive; latest is refused.
func TestCommandLine(t *testing.T) {
	bin, conf := inputs(t, time.Now(), 0o644)
	dir := t.TempDir()
	args := func(out string) []string {
		return []string{
			"--ref", "lull.dev/app:v1", "--output", filepath.Join(dir, out+".tar"),
			"--digest-file", filepath.Join(dir, out+".digest"),
			"--platform", "linux/amd64", "--created", "1767225600",
			"--file", bin + ":/usr/local/bin/app:0755", "--file", conf + ":/etc/app.conf",
			"--dir", "/tmp:1777", "--user", "65532:65532",
			"--entrypoint", "/usr/local/bin/app", "--cmd", "serve",
			"--env", "PATH=/usr/local/bin", "--label", "org.opencontainers.image.title=app",
		}
	}
	var out bytes.Buffer
	for _, n := range []string{"a", "b"} {
		if err := run(args(n), &out); err != nil {
			t.Fatal(err)
		}
	}
	read := func(n string) string {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if read("a.digest") != read("b.digest") || !strings.HasPrefix(read("a.digest"), "sha256:") {
		t.Errorf("digests %q %q", read("a.digest"), read("b.digest"))
	}
	if read("a.tar") != read("b.tar") {
		t.Errorf("archives differ")
	}
	if !strings.Contains(out.String(), "ref=lull.dev/app:v1 digest="+strings.TrimSpace(read("a.digest"))) {
		t.Errorf("output %q", out.String())
	}
	out.Reset()
	if err := verifyMain([]string{filepath.Join(dir, "a.tar")}, &out); err != nil || !strings.Contains(out.String(), ": ok ref=lull.dev/app:v1") {
		t.Errorf("verify: %v %q", err, out.String())
	}

	bad := map[string][]string{
		"latest":      {"--ref", "lull.dev/app:latest"},
		"no tag":      {"--ref", "lull.dev/app"},
		"no created":  {"--created", ""},
		"bad file":    {"--file", "onlysrc"},
		"no platform": {"--platform", "linux"},
	}
	for what, override := range bad {
		a := append(args("bad"), override...)
		if err := run(a, io.Discard); err == nil {
			t.Errorf("%s: accepted", what)
		}
	}
}
