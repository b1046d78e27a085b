package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/app"
	"lull.dev/lull/internal/capi"
	"lull.dev/lull/test/framework"
)

// The Cluster API management cluster is another API server than the one
// whose nodes lull drains (lull-drainer --cluster-api-kubeconfig): the
// Machines' hooks are written there, the requests here. Two real API
// servers: this package's, and one with Cluster API's CRDs.
func TestClusterAPIManagementCluster(t *testing.T) {
	crds, err := framework.ClusterAPICRDs()
	require.NoError(t, err)
	mgmt, err := framework.StartWith(crds)
	require.NoError(t, err)
	t.Cleanup(func() { _ = mgmt.Stop() })
	kubeconfig := filepath.Join(t.TempDir(), "management.kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"m": {Server: mgmt.Config.Host, CertificateAuthorityData: mgmt.Config.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"m": {ClientCertificateData: mgmt.Config.CertData, ClientKeyData: mgmt.Config.KeyData}},
		Contexts:       map[string]*clientcmdapi.Context{"m": {Cluster: "m", AuthInfo: "m"}},
		CurrentContext: "m",
	}, kubeconfig))

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{Scheme: framework.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}}})
	require.NoError(t, err)
	o := *app.NewOptions()
	o.ClusterAPIKubeconfig, o.ClusterAPICluster = kubeconfig, "capi/c1"
	require.Empty(t, o.Validate())
	require.NoError(t, app.SetupClusterAPI(mgr, o, clock.RealClock{}))
	go func() { _ = mgr.Start(ctx) }()

	// Here: the node. There: its Machine, governed, being deleted (a
	// finalizer keeps it as Cluster API's would).
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "mgmt-n1"}}
	require.NoError(t, cp.Client.Create(ctx, node))
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), node) })
	require.NoError(t, mgmt.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "capi"}}))
	// The guard's hook at create, as docs/cluster-api.md says to install
	// it in the management cluster.
	hookPolicy, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "manifests", "admission", "cluster-api.yaml"))
	require.NoError(t, err)
	for _, doc := range strings.Split(string(hookPolicy), "\n---") {
		if !strings.Contains(doc, "name: lull-cluster-api-hook") {
			continue
		}
		obj := &unstructured.Unstructured{}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &obj.Object))
		require.NoError(t, mgmt.Client.Create(ctx, obj))
	}
	m := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": capi.Group + "/" + capi.Version, "kind": "Machine",
		"metadata": map[string]any{"name": "m1", "namespace": "capi", "finalizers": []any{"machine.cluster.x-k8s.io"},
			"labels": map[string]any{capi.GovernedLabel: "true", capi.ClusterNameLabel: "c1"}},
		"spec": map[string]any{"clusterName": "c1", "bootstrap": map[string]any{"dataSecretName": "x"},
			"infrastructureRef": map[string]any{"apiGroup": "infrastructure.example", "kind": "M", "name": "m1"}},
	}}
	// The hook's policy reaches a kind some moments after its CRD: until
	// the API server's type converter has the CRD's schema, a create the
	// policy matches is refused 503 ("Resource kind ... not found. There
	// can be a delay ..."), as it would be for Cluster API, which tries
	// again. Before that, until the API server has loaded the policy and
	// its binding, a create is not mutated at all (CI, under load: the
	// Machine "other" below had no hook). The test waits until a dry-run
	// create comes back with the hook, then creates.
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		probe := m.DeepCopy()
		err := mgmt.Client.Create(ctx, probe, client.DryRunAll)
		if apierrors.IsServiceUnavailable(err) {
			return false, nil
		}
		return err == nil && capi.HasHook(probe), err
	}))
	require.NoError(t, mgmt.Client.Create(ctx, m))
	require.NoError(t, unstructured.SetNestedField(m.Object, "mgmt-n1", "status", "nodeRef", "name"))
	require.NoError(t, mgmt.Client.Status().Update(ctx, m))

	machine := func() *unstructured.Unstructured {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(capi.MachineKind)
		require.NoError(t, mgmt.Client.Get(ctx, client.ObjectKey{Namespace: "capi", Name: "m1"}, got))
		return got
	}
	poll := func(what string, cond func() bool) {
		t.Helper()
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return cond(), nil
		}), what)
	}
	// Another workload cluster's governed Machine, which another lull
	// governs: the admission policy gives it the hook at create (this lull
	// never touches it), and this lull leaves it alone, also when it is
	// deleted with a node of the same name here.
	other := m.DeepCopy()
	other.SetName("other")
	other.SetResourceVersion("")
	other.SetLabels(map[string]string{capi.GovernedLabel: "true", capi.ClusterNameLabel: "c2"})
	_ = unstructured.SetNestedField(other.Object, "c2", "spec", "clusterName")
	unstructured.RemoveNestedField(other.Object, "status")
	require.NoError(t, mgmt.Client.Create(ctx, other))
	require.True(t, capi.HasHook(other), "the hook from the first second: the admission policy, at create")
	_ = unstructured.SetNestedField(other.Object, "mgmt-n1", "status", "nodeRef", "name")
	require.NoError(t, mgmt.Client.Status().Update(ctx, other))
	poll("lull's hook on the management cluster's Machine", func() bool { return capi.HasHook(machine()) })
	require.NoError(t, mgmt.Client.Delete(ctx, other))
	time.Sleep(2 * time.Second)
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(capi.MachineKind)
	require.NoError(t, mgmt.Client.Get(ctx, client.ObjectKey{Namespace: "capi", Name: "other"}, got))
	require.True(t, capi.HasHook(got), "another workload cluster's deleting Machine is another lull's: its hook stays")
	require.Error(t, cp.Client.Get(ctx, client.ObjectKey{Name: "mgmt-n1"}, &lullv1alpha1.NodeMaintenance{}), "and it is no request here")
	got.SetFinalizers(nil)
	require.NoError(t, mgmt.Client.Update(ctx, got))

	require.NoError(t, mgmt.Client.Delete(ctx, machine()))
	var nm lullv1alpha1.NodeMaintenance
	poll("the request for the Machine's node, here", func() bool {
		return cp.Client.Get(ctx, client.ObjectKey{Name: "mgmt-n1"}, &nm) == nil
	})
	require.Equal(t, []string{string(capi.CauseDelete)}, nm.Spec.Classes)
	require.Equal(t, "capi/m1", nm.Annotations[capi.MachineAnnotation])
	t.Cleanup(func() {
		nm.Finalizers = nil
		_ = cp.Client.Update(context.Background(), &nm)
		_ = cp.Client.Delete(context.Background(), &nm)
	})
	time.Sleep(time.Second)
	require.True(t, capi.HasHook(machine()), "the hook stays until lull has drained")

	nm.Status.Phase = lullv1alpha1.PhaseDrained
	require.NoError(t, cp.Client.Status().Update(ctx, &nm))
	poll("lull's hook removed there once drained here", func() bool { return !capi.HasHook(machine()) })
	_ = os.Remove(kubeconfig)
}
