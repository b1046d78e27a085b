package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"lull.dev/lull/test/framework"
)

// The real Cluster API core controllers (hack/build-binaries.sh
// capi-manager, CLUSTER_API_VERSION) against the local cluster, which is
// its own workload cluster. Its manager always serves webhooks on :9443 of
// every interface, so it runs in a network namespace of its own whose only
// way out is a forwarder to the API server through a Unix socket
// (forwardEnv): nothing it serves is reachable from the machine's network.
// For infrastructure, a provider of the test's own (kwokInfra): each
// KwokMachine becomes a kwok Node with the matching provider ID.

// forwardEnv, set to "<socket>,<port>,<ready file>", makes the test binary
// a forwarder (TestMain): it listens on 127.0.0.1:<port> in its network
// namespace, creates the ready file, and relays each connection to the
// Unix socket.
const forwardEnv = "LULL_E2E_FORWARD"

// forwardMain relays 127.0.0.1:port to the Unix socket sock until killed.
func forwardMain(spec string) int {
	// Die with the manager (the forwarder's parent, once sh exec'd it),
	// also when the death signal does not come (a parent already gone).
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func(parent int) {
		for range time.Tick(time.Second) {
			if os.Getppid() != parent {
				os.Exit(0)
			}
		}
	}(os.Getppid())
	parts := strings.Split(spec, ",")
	if len(parts) != 3 {
		fmt.Fprintf(os.Stderr, "%s=%q: want <socket>,<port>,<ready file>\n", forwardEnv, spec)
		return 2
	}
	sock, port, ready := parts[0], parts[1], parts[2]
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The manager starts once this exists: its first request must find
	// the forwarder listening.
	if err := os.WriteFile(ready, nil, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return 1
		}
		go func() {
			u, err := net.Dial("unix", sock)
			if err != nil {
				_ = c.Close()
				return
			}
			pipe(c, u)
		}()
	}
}

// pipe copies both ways until either side ends, then closes both.
func pipe(a, b net.Conn) {
	var once sync.Once
	done := func() { once.Do(func() { _ = a.Close(); _ = b.Close() }) }
	go func() { _, _ = io.Copy(a, b); done() }()
	_, _ = io.Copy(b, a)
	done()
}

var (
	capiGroup  = "cluster.x-k8s.io"
	infraGroup = "infrastructure.e2e.lull.dev"
	gvrMachine = schema.GroupVersionResource{Group: capiGroup, Version: "v1beta2", Resource: "machines"}
	gvrMD      = schema.GroupVersionResource{Group: capiGroup, Version: "v1beta2", Resource: "machinedeployments"}
	gvrCluster = schema.GroupVersionResource{Group: capiGroup, Version: "v1beta2", Resource: "clusters"}
	gvrMHC     = schema.GroupVersionResource{Group: capiGroup, Version: "v1beta2", Resource: "machinehealthchecks"}
	gvrKM      = schema.GroupVersionResource{Group: infraGroup, Version: "v1alpha1", Resource: "kwokmachines"}
	gvrKMT     = schema.GroupVersionResource{Group: infraGroup, Version: "v1alpha1", Resource: "kwokmachinetemplates"}
	gvrKC      = schema.GroupVersionResource{Group: infraGroup, Version: "v1alpha1", Resource: "kwokclusters"}
	gvrKCT     = schema.GroupVersionResource{Group: infraGroup, Version: "v1alpha1", Resource: "kwokclustertemplates"}
	cpGroup    = "controlplane.e2e.lull.dev"
	gvrKCP     = schema.GroupVersionResource{Group: cpGroup, Version: "v1alpha1", Resource: "kwokcontrolplanes"}
	gvrKCPT    = schema.GroupVersionResource{Group: cpGroup, Version: "v1alpha1", Resource: "kwokcontrolplanetemplates"}
	gvrCC      = schema.GroupVersionResource{Group: capiGroup, Version: "v1beta2", Resource: "clusterclasses"}
)

// capiEnv is Cluster API running against the local cluster, with one
// Cluster (capiCluster in capiNamespace) whose control plane is one kwok
// Machine.
type capiEnv struct {
	dyn dynamic.Interface
}

const (
	capiNamespace = "capi-e2e"
	capiCluster   = "e2e"
)

var (
	capiOnce sync.Once
	capiErr  error
	capiUp   *capiEnv
)

// startClusterAPI brings Cluster API up once for the test binary: its
// CRDs, the infrastructure provider's, the manager in its network
// namespace, the provider, the Cluster and its control-plane Machine.
func startClusterAPI(t *testing.T) *capiEnv {
	t.Helper()
	capiOnce.Do(func() { capiUp, capiErr = bringUpClusterAPI() })
	require.NoError(t, capiErr)
	return capiUp
}

func bringUpClusterAPI() (*capiEnv, error) {
	ctx := context.Background()
	manager := filepath.Join(framework.BinDir(), "capi-manager")
	if _, err := os.Stat(manager); err != nil {
		return nil, fmt.Errorf("%s: %w (hack/build-binaries.sh capi-manager builds it)", manager, err)
	}
	crds, err := framework.ClusterAPICRDs()
	if err != nil {
		return nil, err
	}
	for _, dir := range []string{crds, filepath.Join(framework.RepoRoot(), "test", "e2e", "testdata", "capi")} {
		if out, err := cluster.Kubectl(ctx, 2*time.Minute, "apply", "--server-side", "-f", dir); err != nil {
			return nil, fmt.Errorf("kubectl apply %s: %w\n%s", dir, err, out)
		}
	}
	if out, err := cluster.Kubectl(ctx, time.Minute, "wait", "--for=condition=Established", "crd", "--all", "--timeout=50s"); err != nil {
		return nil, fmt.Errorf("CRDs not established: %w\n%s", err, out)
	}
	dyn, err := dynamic.NewForConfig(cluster.Config)
	if err != nil {
		return nil, err
	}
	e := &capiEnv{dyn: dyn}
	if err := e.runManager(); err != nil {
		return nil, err
	}
	go kwokInfra(dyn)
	if err := e.createCluster(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// runManager starts the Cluster API manager in a network namespace of its
// own with the forwarder beside it; it is stopped when the test binary
// ends (its parent dies: Pdeathsig).
func (e *capiEnv) runManager() error {
	dir, err := os.MkdirTemp(cluster.Dir, "capi-")
	if err != nil {
		return err
	}
	if err := selfSignedCert(dir); err != nil {
		return err
	}
	return runIsolated(dir, "capi-manager", nil, filepath.Join(framework.BinDir(), "capi-manager"),
		"--kubeconfig="+cluster.Kubeconfig,
		"--leader-elect=false",
		"--webhook-cert-dir="+dir,
		"--health-addr=127.0.0.1:9440",
		"--diagnostics-address=127.0.0.1:8443", "--insecure-diagnostics",
		// RuntimeSDK: the topology controller reads before-upgrade
		// hooks only with it (docs/cluster-api.md).
		"--feature-gates=ClusterTopology=true,RuntimeSDK=true",
		"--v=2",
	)
}

// runIsolated starts argv (a controller of another project) in a network
// namespace of its own whose only way out is a forwarder to the local
// cluster's API server through a Unix socket in dir: whatever it serves,
// on whatever address, is reachable from nowhere else. Its output goes to
// logs/<name>.log; it is stopped when the test binary ends (Pdeathsig).
func runIsolated(dir, name string, env []string, argv ...string) error {
	sock := filepath.Join(dir, "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	apiHost := strings.TrimPrefix(cluster.Config.Host, "https://")
	_, port, err := net.SplitHostPort(apiHost)
	if err != nil {
		return err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				a, err := net.Dial("tcp", apiHost)
				if err != nil {
					_ = c.Close()
					return
				}
				pipe(c, a)
			}()
		}
	}()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(cluster.Dir, "logs", name+".log"))
	if err != nil {
		return err
	}
	script := `ip link set lo up && { "$FWD" & } && while [ ! -e "$READY" ]; do sleep 0.05; done && exec "$@"`
	args := append([]string{"--net", "--", "sh", "-c", script, "sh"}, argv...)
	cmd := exec.Command("unshare", args...)
	ready := filepath.Join(dir, "forwarding")
	cmd.Env = append(append(os.Environ(), env...), "FWD="+self, "READY="+ready, forwardEnv+"="+sock+","+port+","+ready)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	go func() { _ = cmd.Wait(); _ = logf.Close() }()
	return nil
}

// selfSignedCert writes tls.crt and tls.key for the manager's webhook
// server, which nothing calls (no webhook configuration is installed) but
// which must start.
func selfSignedCert(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "capi-webhook"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
}

// createCluster makes the namespace, the Cluster (no infrastructure or
// control-plane object: Cluster API takes its infrastructure as ready),
// the kubeconfig Secret Cluster API reaches the workload cluster with (the
// local cluster's admin kubeconfig), and the control-plane Machine, whose
// Node initializes the control plane for Cluster API.
func (e *capiEnv) createCluster(ctx context.Context) error {
	cs := cluster.Clientset
	_, portStr, err := net.SplitHostPort(strings.TrimPrefix(cluster.Config.Host, "https://"))
	if err != nil {
		return err
	}
	apiPort, err := strconv.Atoi(portStr)
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: capiNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	kc, err := os.ReadFile(cluster.Kubeconfig)
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Secrets(capiNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: capiCluster + "-kubeconfig", Labels: map[string]string{"cluster.x-k8s.io/cluster-name": capiCluster}},
		Type:       "cluster.x-k8s.io/secret", Data: map[string][]byte{"value": kc},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	objs := []struct {
		gvr schema.GroupVersionResource
		obj map[string]any
	}{
		{gvrKC, map[string]any{"apiVersion": infraGroup + "/v1alpha1", "kind": "KwokCluster",
			"metadata": map[string]any{"name": capiCluster, "namespace": capiNamespace}, "spec": map[string]any{}}},
		{gvrCluster, map[string]any{"apiVersion": capiGroup + "/v1beta2", "kind": "Cluster",
			"metadata": map[string]any{"name": capiCluster, "namespace": capiNamespace},
			// Where the workload cluster's API server is.
			"spec": map[string]any{"controlPlaneEndpoint": map[string]any{"host": "127.0.0.1", "port": int64(apiPort)},
				"infrastructureRef": map[string]any{"apiGroup": infraGroup, "kind": "KwokCluster", "name": capiCluster}}}},
		{gvrKMT, kwokTemplate("pool-v1", "e2e-capi", "v1")},
		{gvrKMT, kwokTemplate("pool-v2", "e2e-capi", "v2")},
		{gvrKM, map[string]any{"apiVersion": infraGroup + "/v1alpha1", "kind": "KwokMachine",
			"metadata": map[string]any{"name": "capi-cp-0", "namespace": capiNamespace},
			"spec":     map[string]any{"pool": "e2e-capi-cp"}}},
		{gvrMachine, map[string]any{"apiVersion": capiGroup + "/v1beta2", "kind": "Machine",
			"metadata": map[string]any{"name": "capi-cp-0", "namespace": capiNamespace,
				"labels": map[string]any{"cluster.x-k8s.io/cluster-name": capiCluster, "cluster.x-k8s.io/control-plane": ""}},
			"spec": machineSpec("capi-cp-0", "KwokMachine")}},
	}
	for _, o := range objs {
		u := &unstructured.Unstructured{Object: o.obj}
		if _, err := e.dyn.Resource(o.gvr).Namespace(capiNamespace).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s: %w", o.gvr.Resource, u.GetName(), err)
		}
	}
	// The control plane is initialized once its Machine has its Node.
	return wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		c, err := e.dyn.Resource(gvrCluster).Namespace(capiNamespace).Get(ctx, capiCluster, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		// Without a control-plane object, Cluster API says so in the
		// condition only (status.initialization is the provider's).
		conds, _, _ := unstructured.NestedSlice(c.Object, "status", "conditions")
		for _, cd := range conds {
			if m, ok := cd.(map[string]any); ok && m["type"] == "ControlPlaneInitialized" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
}

func machineSpec(infra, kind string) map[string]any {
	return map[string]any{
		"clusterName":       capiCluster,
		"version":           framework.PinnedVersion("KUBE_VERSION"),
		"bootstrap":         map[string]any{"dataSecretName": "kwok-bootstrap"},
		"infrastructureRef": map[string]any{"apiGroup": infraGroup, "kind": kind, "name": infra},
	}
}

func kwokTemplate(name, pool, image string) map[string]any {
	return map[string]any{"apiVersion": infraGroup + "/v1alpha1", "kind": "KwokMachineTemplate",
		"metadata": map[string]any{"name": name, "namespace": capiNamespace},
		"spec":     map[string]any{"template": map[string]any{"spec": map[string]any{"pool": pool, "image": image}}}}
}

// kwokInfra is the test's infrastructure provider: each KwokMachine gets a
// provider ID, a kwok Node of its name with that provider ID and the
// label pool=<spec.pool>, and is then provisioned. Deleting a KwokMachine
// deletes nothing: Cluster API deletes the Node itself, as it does on a
// real provider. It polls until the test binary ends.
func kwokInfra(dyn dynamic.Interface) {
	ctx := context.Background()
	for range time.Tick(300 * time.Millisecond) {
		kwokClusters(ctx, dyn)
		kwokControlPlanes(ctx, dyn)
		list, err := dyn.Resource(gvrKM).Namespace(capiNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for i := range list.Items {
			km := &list.Items[i]
			if done, _, _ := unstructured.NestedBool(km.Object, "status", "initialization", "provisioned"); done || km.GetDeletionTimestamp() != nil {
				continue
			}
			name := km.GetName()
			pool, _, _ := unstructured.NestedString(km.Object, "spec", "pool")
			id := "kwok://" + name
			node := kwokNode(name, map[string]string{"pool": pool, "type": "capi"})
			node.Spec.ProviderID = id
			node.Spec.Taints = []corev1.Taint{capiTaint}
			if _, err := cluster.Clientset.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				continue
			}
			if _, err := dyn.Resource(gvrKM).Namespace(capiNamespace).Patch(ctx, name, types.MergePatchType,
				[]byte(fmt.Sprintf(`{"spec":{"providerID":%q}}`, id)), metav1.PatchOptions{}); err != nil {
				continue
			}
			_, _ = dyn.Resource(gvrKM).Namespace(capiNamespace).Patch(ctx, name, types.MergePatchType,
				[]byte(`{"status":{"ready":true,"initialization":{"provisioned":true}}}`), metav1.PatchOptions{}, "status")
		}
	}
}

// kwokClusters provisions every KwokCluster (the local cluster is there).
func kwokClusters(ctx context.Context, dyn dynamic.Interface) {
	list, err := dyn.Resource(gvrKC).Namespace(capiNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for i := range list.Items {
		if done, _, _ := unstructured.NestedBool(list.Items[i].Object, "status", "initialization", "provisioned"); done {
			continue
		}
		_, _ = dyn.Resource(gvrKC).Namespace(capiNamespace).Patch(ctx, list.Items[i].GetName(), types.MergePatchType,
			[]byte(`{"status":{"ready":true,"initialization":{"provisioned":true}}}`), metav1.PatchOptions{}, "status")
	}
}

// kwokControlPlanes plays each KwokControlPlane: initialized, its replicas
// all up to date, and running the version its spec asks for, at once.
func kwokControlPlanes(ctx context.Context, dyn dynamic.Interface) {
	list, err := dyn.Resource(gvrKCP).Namespace(capiNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for i := range list.Items {
		cp := &list.Items[i]
		want, _, _ := unstructured.NestedString(cp.Object, "spec", "version")
		have, _, _ := unstructured.NestedString(cp.Object, "status", "version")
		replicas, found, _ := unstructured.NestedInt64(cp.Object, "spec", "replicas")
		if !found {
			replicas = 1
		}
		if want == have && want != "" {
			continue
		}
		status := map[string]any{"status": map[string]any{"version": want, "initialization": map[string]any{"controlPlaneInitialized": true},
			"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas, "upToDateReplicas": replicas,
			"selector": "cluster.x-k8s.io/control-plane-name=" + cp.GetName()}}
		b, _ := json.Marshal(status)
		_, _ = dyn.Resource(gvrKCP).Namespace(capiNamespace).Patch(ctx, cp.GetName(), types.MergePatchType, b, metav1.PatchOptions{}, "status")
	}
}
