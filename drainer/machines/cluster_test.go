package machines

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/capi"
)

func testCluster(governed bool, annotations map[string]string) *unstructured.Unstructured {
	c := newCluster()
	c.SetNamespace("ns")
	c.SetName("c1")
	if governed {
		c.SetLabels(map[string]string{capi.GovernedLabel: "true"})
	}
	c.SetAnnotations(annotations)
	return c
}

func inCluster(m *unstructured.Unstructured) {
	l := m.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[capi.ClusterNameLabel] = "c1"
	m.SetLabels(l)
}

func reconcileCluster(t *testing.T, r *ClusterReconciler) *unstructured.Unstructured {
	t.Helper()
	_, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "c1"}})
	require.NoError(t, err)
	c := newCluster()
	require.NoError(t, r.Client.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "c1"}, c))
	return c
}

func TestUpgradeHeldWhileRequestsAreInProgress(t *testing.T) {
	other := capi.BeforeUpgradeHookPrefix + "/other-tool"
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec:   lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"hardware"}},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseWaitingForWindow}}
	_, c := newFixture(t, testCluster(true, map[string]string{other: "x"}), newTestMachine("m", inCluster, onNode("n1")),
		newTestMachine("elsewhere", onNode("n2")), nm)
	r := &ClusterReconciler{Client: c}
	require.NotContains(t, reconcileCluster(t, r).GetAnnotations(), capi.BeforeUpgradeHook, "a waiting request holds nothing")

	for _, p := range []lullv1alpha1.MaintenancePhase{lullv1alpha1.PhaseDraining, lullv1alpha1.PhasePoweredOff} {
		nm.Status.Phase = p
		require.NoError(t, c.Status().Update(context.Background(), nm))
		got := reconcileCluster(t, r).GetAnnotations()
		require.Equal(t, "lull has 1 request(s) in progress: node n1 (hardware, "+string(p)+")", got[capi.BeforeUpgradeHook])
		require.Equal(t, "x", got[other], "another tool's hook is left alone")
	}
	nm.Status.Phase = lullv1alpha1.PhaseCompleted
	require.NoError(t, c.Status().Update(context.Background(), nm))
	got := reconcileCluster(t, r).GetAnnotations()
	require.NotContains(t, got, capi.BeforeUpgradeHook, "done: the upgrade may start")
	require.Equal(t, "x", got[other])
}

func TestClusterAPIsOwnDeletionsHoldNoUpgrade(t *testing.T) {
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1",
		Annotations: map[string]string{lullv1alpha1.RequestedByAnnotation: capi.RequestedBy}},
		Spec:   lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{string(capi.CauseRollout)}},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDraining}}
	_, c := newFixture(t, testCluster(true, nil), newTestMachine("m", inCluster, onNode("n1")), nm)
	require.NotContains(t, reconcileCluster(t, &ClusterReconciler{Client: c}).GetAnnotations(), capi.BeforeUpgradeHook,
		"a rollout's drains are the upgrade's own work")
}

func TestUngovernedClusterLosesLullsHold(t *testing.T) {
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1"}, Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDraining}}
	_, c := newFixture(t, testCluster(false, map[string]string{capi.BeforeUpgradeHook: "old"}), newTestMachine("m", inCluster, onNode("n1")), nm)
	require.NotContains(t, reconcileCluster(t, &ClusterReconciler{Client: c}).GetAnnotations(), capi.BeforeUpgradeHook)
}

func TestRequestWakesItsNodesCluster(t *testing.T) {
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1"}}
	_, c := newFixture(t, newTestMachine("m", inCluster, onNode("n1")), newTestMachine("x", onNode("n2")))
	r := &ClusterReconciler{Client: c}
	require.Equal(t, []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "c1"}}}, r.clustersOf(context.Background(), nm))
}

// The guard keeps lull-drainer's writes to Cluster API's objects to lull's
// own annotations (policy lull-cluster-api-writes, evaluated from the
// manifest): RBAC's patch would let it rewrite a Cluster's topology.
func TestGuardKeepsTheDrainerToItsAnnotations(t *testing.T) {
	drainer := "system:serviceaccount:lull-system:lull-drainer"
	groups := []string{"system:serviceaccounts", "system:authenticated"}
	base := func() map[string]any {
		return map[string]any{"metadata": map[string]any{"name": "c1", "labels": map[string]any{"a": "b"},
			"annotations": map[string]any{"other": "x"}}, "spec": map[string]any{"topology": map[string]any{"version": "v1.37.0"}}}
	}
	for _, tc := range []struct {
		name   string
		mutate func(map[string]any)
		as     string
		ok     bool
	}{
		{"its before-upgrade hook", func(o map[string]any) {
			o["metadata"].(map[string]any)["annotations"].(map[string]any)[capi.BeforeUpgradeHook] = "lull has 1 request(s)"
		}, drainer, true},
		{"its pre-drain hook and skip", func(o map[string]any) {
			a := o["metadata"].(map[string]any)["annotations"].(map[string]any)
			a[capi.PreDrainHook], a[capi.SkipRemediationAnnotation], a[capi.SkipRemediationByLull] = capi.HookOwner, "", "n1"
		}, drainer, true},
		{"a topology upgrade", func(o map[string]any) {
			o["spec"].(map[string]any)["topology"].(map[string]any)["version"] = "v1.38.0"
		}, drainer, false},
		{"another tool's annotation", func(o map[string]any) {
			delete(o["metadata"].(map[string]any)["annotations"].(map[string]any), "other")
		}, drainer, false},
		{"a label", func(o map[string]any) { o["metadata"].(map[string]any)["labels"].(map[string]any)["a"] = "c" }, drainer, false},
		{"a finalizer", func(o map[string]any) { o["metadata"].(map[string]any)["finalizers"] = []any{"x"} }, drainer, false},
		{"anyone else is not this policy's business", func(o map[string]any) {
			o["spec"].(map[string]any)["topology"].(map[string]any)["version"] = "v1.38.0"
		}, "alice", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := base()
			tc.mutate(obj)
			refused := guardVerdict(t, "UPDATE", "clusters", "Cluster", obj, base(), tc.as, groups)
			if tc.ok {
				require.Empty(t, refused)
			} else {
				require.NotEmpty(t, refused)
			}
		})
	}
}
