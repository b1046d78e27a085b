package install

import (
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"lull.dev/lull/test/framework"
)

// apiServer starts etcd and kube-apiserver with nothing of lull's installed
// and returns the path of a kubeconfig of a cluster admin. (No controllers
// run: objects are stored and validated, pods never start.)
func apiServer(t *testing.T) string {
	t.Helper()
	bin(t, "kube-apiserver")
	bin(t, "etcd")
	env := &envtest.Environment{BinaryAssetsDirectory: framework.BinDir()}
	if _, err := env.Start(); err != nil {
		_ = env.Stop()
		t.Fatalf("starting etcd and kube-apiserver: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	u, err := env.AddUser(envtest.User{Name: "lull-installer", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return writeKubeconfig(t, u.Config())
}

func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// installed checks that what an install creates is on the server.
func installed(t *testing.T, kubeconfig string) {
	t.Helper()
	out := run(t, nil, bin(t, "kubectl"), "--kubeconfig", kubeconfig, "get",
		"crd/nodemaintenances.lull.dev", "crd/maintenancewindows.lull.dev", "crd/disruptionpolicies.lull.dev",
		"namespace/lull-system",
		"-n", "lull-system", "deployment/lull-scheduler", "deployment/lull-drainer", "configmap/lull-scheduler-config",
		"serviceaccount/lull-scheduler", "serviceaccount/lull-drainer", "role/lull-scheduler", "role/lull-drainer",
		"-o", "name")
	if n := len(strings.Fields(out)); n != 11 {
		t.Errorf("installed objects:\n%s", out)
	}
}

// The documented kustomize install works on a real API server: the
// server accepts every object. The CRDs go first (their own apply, then
// wait until they are served), then the whole install.
func TestKustomizeInstallApplies(t *testing.T) {
	kubeconfig := apiServer(t)
	kubectl := bin(t, "kubectl")
	root := framework.RepoRoot()
	k := func(args ...string) string {
		t.Helper()
		return run(t, nil, kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	}
	k("apply", "--server-side", "-k", filepath.Join(root, "manifests", "crds"))
	waitEstablished(t, func(args ...string) (string, error) {
		return runErr(nil, kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	}, "crd/nodemaintenances.lull.dev", "crd/maintenancewindows.lull.dev", "crd/disruptionpolicies.lull.dev", "crd/nodeconfigs.lull.dev")
	k("apply", "--server-side", "-k", filepath.Join(root, "manifests", "install"))
	installed(t, kubeconfig)
	// Applying again (an upgrade to the same version) changes nothing and
	// does not fail.
	k("apply", "--server-side", "-k", filepath.Join(root, "manifests", "install"))
}

// One `kubectl apply -k manifests/install` on an empty cluster installs
// everything, the first time, as docs/install.md promises: the install
// holds no object of lull's own kinds (lull-drainer creates the default
// policy), which kubectl could not map before the CRDs it creates in the
// same run are served.
func TestKustomizeInstallInOneCommand(t *testing.T) {
	kubeconfig := apiServer(t)
	kubectl := bin(t, "kubectl")
	dir := filepath.Join(framework.RepoRoot(), "manifests", "install")
	out := run(t, nil, kubectl, "--kubeconfig", kubeconfig, "apply", "--server-side", "-k", dir)
	t.Logf("one apply:\n%s", out)
	installed(t, kubeconfig)
}

// The install creates no object of lull's own kinds: the shipped policy is
// lull-drainer's to create (internal/policy/default.yaml), so no install path
// needs the CRDs served first.
func TestInstallHasNoLullObjects(t *testing.T) {
	for key := range renderKustomize(t) {
		if strings.HasPrefix(key, "lull.dev/") {
			t.Errorf("manifests/install has %s: kubectl cannot create it in the run that creates its CRD", key)
		}
	}
}

// helm install of the chart works on a real API server: Helm creates the
// CRDs first, then the rest. Its notes name the scheduler to opt in with.
func TestHelmInstallApplies(t *testing.T) {
	kubeconfig := apiServer(t)
	out := run(t, nil, bin(t, "helm"), "--kubeconfig", kubeconfig, "install", "lull", filepath.Join(framework.RepoRoot(), "charts", "lull"),
		"--set", "scheduler.schedulerName=night-shift")
	installed(t, kubeconfig)
	_, notes, ok := strings.Cut(out, "\nNOTES:\n")
	if !ok || !strings.Contains(notes, "schedulerName: night-shift") || !strings.Contains(notes, "namespace lull-system;") {
		t.Errorf("the install notes do not name the scheduler night-shift and the namespace lull-system:\n%s", out)
	}
	cfg := run(t, nil, bin(t, "kubectl"), "--kubeconfig", kubeconfig, "-n", "lull-system", "get", "configmap/lull-scheduler-config", "-o", "jsonpath={.data.config\\.yaml}")
	if !strings.Contains(cfg, "- schedulerName: night-shift") {
		t.Errorf("the scheduler's configuration on the server has no profile night-shift:\n%s", cfg)
	}
}
