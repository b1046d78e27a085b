package install

import (
	"archive/tar"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lull.dev/lull/test/framework"
)

// The one cross build make test runs (make release builds every image for
// linux/amd64 and linux/arm64): hack/images.sh with IMAGE_PLATFORMS builds
// the small e2e-graceful image for both, as one OCI image index whose
// arm64 image holds an aarch64 binary, reproducibly (images.sh assembles
// it twice and compares the bytes).
func TestCrossPlatformImage(t *testing.T) {
	const version = "v9.8.7-cross.1"
	dir := t.TempDir()
	start := time.Now()
	out := run(t, []string{"VERSION=" + version, "LULL_IMAGES_DIR=" + dir, "IMAGE_PLATFORMS=linux/amd64 linux/arm64"},
		filepath.Join(framework.RepoRoot(), "hack", "images.sh"), "e2e-graceful")
	t.Logf("cross build in %v:\n%s", time.Since(start).Round(time.Second), out)
	archive := filepath.Join(dir, "e2e-graceful-"+version+".tar")
	verify := run(t, nil, filepath.Join(framework.BinDir(), "imagebuild"), "verify", archive)
	if !strings.Contains(verify, "platforms=linux/amd64,linux/arm64") {
		t.Fatalf("imagebuild verify: %s", verify)
	}

	// Walk the layout: index.json -> the image index -> each platform's
	// manifest -> its layer -> the binary's ELF machine.
	blobs := readTar(t, archive)
	var top struct{ Manifests []struct{ Digest string } }
	mustJSON(t, blobs["index.json"], &top)
	var idx struct {
		Manifests []struct {
			Digest   string
			Platform struct{ Architecture string }
		}
	}
	mustJSON(t, blobs[blobPath(top.Manifests[0].Digest)], &idx)
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for _, m := range idx.Manifests {
		var man struct{ Layers []struct{ Digest string } }
		mustJSON(t, blobs[blobPath(m.Digest)], &man)
		bin := fileInLayer(t, blobs[blobPath(man.Layers[0].Digest)], "e2e-graceful")
		f, err := elf.NewFile(strings.NewReader(bin))
		if err != nil {
			t.Fatalf("%s: the binary is not ELF: %v", m.Platform.Architecture, err)
		}
		if f.Machine != want[m.Platform.Architecture] {
			t.Errorf("%s image: binary for %v", m.Platform.Architecture, f.Machine)
		}
		delete(want, m.Platform.Architecture)
	}
	if len(want) != 0 {
		t.Errorf("platforms missing from the index: %v", want)
	}
}

func blobPath(digest string) string { return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:") }

func mustJSON(t *testing.T, b string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(b), v); err != nil {
		t.Fatalf("%v: %q", err, b)
	}
}

// readTar returns every regular file of the tar at path by name.
func readTar(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return tarFiles(t, f)
}

func tarFiles(t *testing.T, r io.Reader) map[string]string {
	t.Helper()
	out := map[string]string{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimPrefix(h.Name, "./")] = string(b)
	}
}

// fileInLayer is the file named base in a gzip-compressed layer.
func fileInLayer(t *testing.T, layer, base string) string {
	t.Helper()
	zr, err := gzip.NewReader(strings.NewReader(layer))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range tarFiles(t, zr) {
		if filepath.Base(name) == base {
			return data
		}
	}
	t.Fatalf("no %s in the layer", base)
	return ""
}
