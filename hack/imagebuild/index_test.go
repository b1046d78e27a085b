package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
)

// A multi-platform image from per-platform archives: one index.json entry,
// an OCI image index naming each platform, every blob present, the first
// platform in manifest.json, and the same bytes when built again.
func TestIndexArchive(t *testing.T) {
	bin, conf := inputs(t, time.Now(), 0o644)
	dir := t.TempDir()
	tag, err := name.NewTag("lull.dev/app:v1", name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	var singles []string
	for _, arch := range []string{"amd64", "arm64"} {
		s := spec(bin, conf)
		s.Arch = arch
		p := filepath.Join(dir, arch+".tar")
		if err := WriteArchiveFile(p, mustBuild(t, s), tag, s.Created); err != nil {
			t.Fatal(err)
		}
		singles = append(singles, p)
	}
	var out bytes.Buffer
	for _, n := range []string{"a", "b"} {
		args := []string{"--ref", "lull.dev/app:v1", "--output", filepath.Join(dir, n+".tar"),
			"--digest-file", filepath.Join(dir, n+".digest"), "--created", "1767225600"}
		if err := indexMain(append(args, singles...), &out); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := os.ReadFile(filepath.Join(dir, "a.tar"))
	b, _ := os.ReadFile(filepath.Join(dir, "b.tar"))
	if !bytes.Equal(a, b) {
		t.Error("the index archive is not reproducible")
	}
	v, err := VerifyArchive(filepath.Join(dir, "a.tar"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"linux/amd64", "linux/arm64"}; !reflect.DeepEqual(v.Platforms, want) {
		t.Errorf("platforms %v, want %v", v.Platforms, want)
	}
	digest, _ := os.ReadFile(filepath.Join(dir, "a.digest"))
	if v.Digest.String() != strings.TrimSpace(string(digest)) {
		t.Errorf("index.json names %s, digest file %s", v.Digest, digest)
	}
	amd, err := VerifyArchive(singles[0])
	if err != nil {
		t.Fatal(err)
	}
	if v.Config != amd.Config {
		t.Errorf("manifest.json's image is not the first platform's: config %s, amd64's %s", v.Config, amd.Config)
	}
	out.Reset()
	if err := verifyMain([]string{filepath.Join(dir, "a.tar")}, &out); err != nil || !strings.Contains(out.String(), "platforms=linux/amd64,linux/arm64") {
		t.Errorf("verify: %v %q", err, out.String())
	}

	// The same platform twice, or a multi-platform archive as an input, is refused.
	if err := indexMain([]string{"--ref", "lull.dev/app:v1", "--output", filepath.Join(dir, "c.tar"), "--created", "1", singles[0], singles[0]}, &out); err == nil {
		t.Error("two amd64 images accepted")
	}
	if err := indexMain([]string{"--ref", "lull.dev/app:v1", "--output", filepath.Join(dir, "c.tar"), "--created", "1", filepath.Join(dir, "a.tar")}, &out); err == nil {
		t.Error("an index archive accepted as a single-platform input")
	}
}
