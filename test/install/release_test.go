package install

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"lull.dev/lull/test/framework"
)

// A release built by hack/release.sh for this machine's platform: its
// checksums hold, its krew manifest installs kubectl-lull with real krew,
// and `kubectl lull` found by kubectl's plugin discovery prints the
// release's version. The install YAML and the chart carry the release's
// image tags.
func TestRelease(t *testing.T) {
	const version = "v9.8.7-test.1"
	const releaseURL = "https://releases.example/lull/v9.8.7-test.1"
	kubectl, helm, krew := bin(t, "kubectl"), bin(t, "helm"), bin(t, "krew")
	root := framework.RepoRoot()
	dist := t.TempDir()
	platform := runtime.GOOS + "/" + runtime.GOARCH
	archiveName := "kubectl-lull_" + version + "_" + runtime.GOOS + "_" + runtime.GOARCH + ".tar.gz"

	start := time.Now()
	out := run(t, []string{"VERSION=" + version, "DIST=" + dist, "PLATFORMS=" + platform, "SKIP_IMAGES=1", "RELEASE_URL=" + releaseURL + "/"},
		filepath.Join(root, "hack", "release.sh"))
	t.Logf("hack/release.sh (1 platform, no images) took %s:\n%s", time.Since(start).Round(time.Second), out)

	// The files, and checksums.txt covering each of them.
	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	wantFiles := []string{archiveName, "checksums.txt", "lull-9.8.7-test.1.tgz", "lull-install.yaml", "lull.yaml"}
	sort.Strings(wantFiles)
	if diff := cmp.Diff(wantFiles, files); diff != "" {
		t.Fatalf("files in DIST (-want +got):\n%s", diff)
	}
	sums := map[string]string{}
	f, err := os.Open(filepath.Join(dist, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("checksums.txt: bad line %q", sc.Text())
		}
		sums[name] = sum
	}
	f.Close()
	for _, name := range files {
		if name == "checksums.txt" {
			continue
		}
		if got := sha256File(t, filepath.Join(dist, name)); sums[name] != got {
			t.Errorf("checksums.txt has %q for %s, the file's sha256 is %s", sums[name], name, got)
		}
	}
	if len(sums) != len(files)-1 {
		t.Errorf("checksums.txt lists %d files, want %d: %v", len(sums), len(files)-1, sums)
	}

	// The archive: kubectl-lull and LICENSE, nothing else.
	license, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	content := untar(t, filepath.Join(dist, archiveName))
	if diff := cmp.Diff([]string{"LICENSE", "kubectl-lull"}, keys(content)); diff != "" {
		t.Errorf("archive members (-want +got):\n%s", diff)
	}
	if content["LICENSE"] != string(license) {
		t.Errorf("the archive's LICENSE is not the repository's")
	}

	// The krew manifest.
	var plugin struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct{ Name string }
		Spec       struct {
			Version   string
			Platforms []struct {
				Selector struct{ MatchLabels map[string]string } `json:"selector"`
				URI      string                                  `json:"uri"`
				Sha256   string                                  `json:"sha256"`
				Bin      string                                  `json:"bin"`
			}
		}
	}
	manifest := filepath.Join(dist, "lull.yaml")
	b, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &plugin); err != nil {
		t.Fatalf("lull.yaml: %v", err)
	}
	if plugin.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || plugin.Kind != "Plugin" || plugin.Metadata.Name != "lull" || plugin.Spec.Version != version || len(plugin.Spec.Platforms) != 1 {
		t.Fatalf("lull.yaml:\n%s", b)
	}
	p := plugin.Spec.Platforms[0]
	if diff := cmp.Diff(map[string]string{"os": runtime.GOOS, "arch": runtime.GOARCH}, p.Selector.MatchLabels); diff != "" {
		t.Errorf("platform selector (-want +got):\n%s", diff)
	}
	if p.URI != releaseURL+"/"+archiveName || p.Sha256 != sums[archiveName] || p.Bin != "kubectl-lull" {
		t.Errorf("platform uri %s sha256 %s bin %s; want %s, %s, kubectl-lull", p.URI, p.Sha256, p.Bin, releaseURL+"/"+archiveName, sums[archiveName])
	}

	// krew installs it from the archive (checking the manifest's sha256),
	// and kubectl finds the plugin on PATH.
	tmp := t.TempDir()
	krewRoot := filepath.Join(tmp, "krew")
	env := []string{"KREW_ROOT=" + krewRoot, "KREW_NO_UPGRADE_CHECK=1", "HOME=" + tmp, "PATH=" + filepath.Join(krewRoot, "bin")}
	out = run(t, env, krew, "install", "--manifest="+manifest, "--archive="+filepath.Join(dist, archiveName))
	t.Logf("krew install:\n%s", out)
	// A corrupted archive is refused, as a download with the wrong sha256 would be.
	bad := filepath.Join(tmp, archiveName)
	if err := os.WriteFile(bad, append(readFile(t, filepath.Join(dist, archiveName)), 0), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runErr([]string{"KREW_ROOT=" + filepath.Join(tmp, "krew2"), "KREW_NO_UPGRADE_CHECK=1", "HOME=" + tmp}, krew, "install", "--manifest="+manifest, "--archive="+bad); err == nil || !strings.Contains(err.Error(), "checksum does not match") {
		t.Errorf("krew installed from an archive whose sha256 differs (err %v):\n%s", err, out)
	}
	out = run(t, env, kubectl, "plugin", "list", "--name-only")
	if !strings.Contains(out, "kubectl-lull") {
		t.Errorf("kubectl plugin list does not show kubectl-lull:\n%s", out)
	}
	out = run(t, env, kubectl, "lull", "--version")
	if got, want := strings.TrimSpace(out), "kubectl-lull version "+version; got != want {
		t.Errorf("kubectl lull --version = %q, want %q", got, want)
	}

	// The install YAML: manifests/install with the release's image tags.
	inst := objects(t, "lull-install.yaml", string(readFile(t, filepath.Join(dist, "lull-install.yaml"))))
	want := renderKustomize(t)
	for _, c := range []string{"lull-scheduler", "lull-drainer", "lull-agent"} {
		k := "apps/v1/Deployment/lull-system/" + c
		if c == "lull-agent" {
			k = "apps/v1/DaemonSet/lull-system/" + c
		}
		if got := get(t, inst[k], "spec", "template", "spec", "containers", 0, "image"); got != "lull.dev/"+c+":"+version {
			t.Errorf("lull-install.yaml: %s image %v, want lull.dev/%s:%s", c, got, c, version)
		}
		get(t, want[k], "spec", "template", "spec", "containers", 0).(map[string]any)["image"] = "lull.dev/" + c + ":" + version
	}
	if diff := cmp.Diff(want, inst); diff != "" {
		t.Errorf("lull-install.yaml differs from manifests/install beyond the image tags (-kustomize +release):\n%s", diff)
	}
	// It installs in one command on an empty cluster, as docs/install.md
	// says (a bare API server: objects stored and validated).
	kubeconfig := apiServer(t)
	run(t, nil, kubectl, "--kubeconfig", kubeconfig, "apply", "--server-side", "-f", filepath.Join(dist, "lull-install.yaml"))
	installed(t, kubeconfig)

	// The chart: version and appVersion, and images at the release.
	chart := filepath.Join(dist, "lull-9.8.7-test.1.tgz")
	meta := run(t, nil, helm, "show", "chart", chart)
	for _, want := range []string{"version: 9.8.7-test.1", "appVersion: " + version} {
		if !strings.Contains(meta, want) {
			t.Errorf("packaged Chart.yaml lacks %q:\n%s", want, meta)
		}
	}
	rendered := objects(t, "helm template "+chart, run(t, nil, helm, "template", "lull", chart, "--include-crds", "--no-hooks"))
	if diff := cmp.Diff(inst, rendered); diff != "" {
		t.Errorf("the packaged chart renders other objects than lull-install.yaml (-install +chart):\n%s", diff)
	}
}

// A release refuses a version that is not vMAJOR.MINOR.PATCH.
func TestReleaseNeedsSemver(t *testing.T) {
	out, err := runErr([]string{"VERSION=abc1234-dirty", "DIST=" + t.TempDir()}, filepath.Join(framework.RepoRoot(), "hack", "release.sh"))
	if err == nil || !strings.Contains(err.Error(), "VERSION must be") {
		t.Errorf("hack/release.sh with VERSION=abc1234-dirty: err %v\n%s", err, out)
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sha256File(t *testing.T, p string) string {
	t.Helper()
	s := sha256.Sum256(readFile(t, p))
	return hex.EncodeToString(s[:])
}

// untar returns a .tar.gz's regular files by name.
func untar(t *testing.T, p string) map[string]string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = string(b)
	}
}
