// Package framework starts the real control plane tests run against: etcd
// and kube-apiserver built by hack/build-binaries.sh (through
// controller-runtime's envtest), with lull's CRDs installed.
package framework

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	apiruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"lull.dev/lull/internal/lullscheme"
)

// RepoRoot returns the repository's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// BinDir is where hack/build-binaries.sh puts the pinned binaries.
func BinDir() string {
	if d := os.Getenv("LULL_BIN_DIR"); d != "" {
		return d
	}
	return filepath.Join(RepoRoot(), "_output", "bin")
}

// Scheme knows the built-in types and lull's.
func Scheme() *apiruntime.Scheme { return lullscheme.New() }

// ControlPlane is a running etcd + kube-apiserver with lull's CRDs.
type ControlPlane struct {
	Config    *rest.Config
	Client    client.Client
	Clientset kubernetes.Interface
	env       *envtest.Environment
}

// Start starts etcd and kube-apiserver and installs the CRDs in
// manifests/crds. Callers Stop it when done (usually from TestMain).
func Start() (*ControlPlane, error) {
	return StartWith(filepath.Join(RepoRoot(), "manifests", "crds"))
}

// StartWith starts etcd and kube-apiserver and installs the CRDs in
// crdDirs (another cluster than lull's: a Cluster API management cluster).
func StartWith(crdDirs ...string) (*ControlPlane, error) {
	bin := BinDir()
	for _, b := range []string{"etcd", "kube-apiserver", "kubectl"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return nil, fmt.Errorf("%s not found in %s: run 'make binaries' (hack/build-binaries.sh) first", b, bin)
		}
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths:     crdDirs,
		ErrorIfCRDPathMissing: true,
		Scheme:                Scheme(),
	}
	cfg, err := env.Start()
	if err != nil {
		// Start may fail after launching the processes (e.g. a CRD the
		// server rejects): stop them so nothing is left running.
		_ = env.Stop()
		return nil, fmt.Errorf("starting etcd and kube-apiserver from %s: %w", bin, err)
	}
	// Tests create many objects quickly; the default client limits would
	// make them wait on the client, not the server.
	cfg.QPS, cfg.Burst = 500, 1000
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("creating client: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("creating clientset: %w", err)
	}
	return &ControlPlane{Config: cfg, Client: c, Clientset: cs, env: env}, nil
}

// Stop stops kube-apiserver and etcd and removes their data.
func (c *ControlPlane) Stop() error {
	if c == nil || c.env == nil {
		return nil
	}
	return c.env.Stop()
}

// RunMain is a TestMain body: it starts a control plane, runs the tests with
// it in *cp, stops it and exits with the tests' code.
func RunMain(m interface{ Run() int }, cp **ControlPlane) {
	c, err := Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: %v\n", err)
		os.Exit(1)
	}
	*cp = c
	code := m.Run()
	if err := c.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "integration: stopping control plane: %v\n", err)
	}
	os.Exit(code)
}

// PinnedVersion is the value of key in hack/versions.env, the one place
// pinned versions live; empty if the key is missing.
func PinnedVersion(key string) string {
	b, err := os.ReadFile(filepath.Join(RepoRoot(), "hack", "versions.env"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+"="); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// ClusterAPICRDs is the directory of Cluster API's CRDs (CLUSTER_API_VERSION)
// in the Go module cache: the module hack/build-binaries.sh builds
// capi-manager from, downloaded if need be.
func ClusterAPICRDs() (string, error) {
	dir, err := toolModule("cluster-api", "sigs.k8s.io/cluster-api", "CLUSTER_API_VERSION")
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "core", "config", "crd", "bases"), nil
}

// KarpenterCRDs are the directories of Karpenter's CRDs (NodePool,
// NodeClaim, …) and of its kwok provider's (KWOKNodeClass) at
// KARPENTER_VERSION, from the module hack/build-binaries.sh builds
// karpenter-kwok from.
func KarpenterCRDs() ([]string, error) {
	dir, err := toolModule("karpenter", "sigs.k8s.io/karpenter", "KARPENTER_VERSION")
	if err != nil {
		return nil, err
	}
	return []string{filepath.Join(dir, "pkg", "apis", "crds"), filepath.Join(dir, "kwok", "apis", "crds")}, nil
}

// toolModule is the Go module cache directory of module at the version
// hack/versions.env pins under key, downloaded if need be from the module
// of its own in hack/tools/<tool> (whose go.sum vouches for it).
func toolModule(tool, module, key string) (string, error) {
	version := PinnedVersion(key)
	cmd := exec.Command("go", "mod", "download", "-json", module+"@"+version)
	cmd.Dir = filepath.Join(RepoRoot(), "hack", "tools", tool)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %w", module, version, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return "", fmt.Errorf("go mod download %s@%s: no Dir in %s", module, version, out)
	}
	return mod.Dir, nil
}
