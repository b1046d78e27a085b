package machines

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/capi"
	"lull.dev/lull/internal/lullscheme"
)

var deletedAt = time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)

type machineOpt func(*unstructured.Unstructured)

func governed(m *unstructured.Unstructured) {
	l := m.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[capi.GovernedLabel] = "true"
	l[capi.MachineDeploymentNameLabel] = "md-0"
	m.SetLabels(l)
}

func hooked(m *unstructured.Unstructured) { annotate(m, capi.PreDrainHook, capi.HookOwner) }

func annotate(m *unstructured.Unstructured, k, v string) {
	a := m.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[k] = v
	m.SetAnnotations(a)
}

func deleting(m *unstructured.Unstructured) {
	m.SetDeletionTimestamp(&metav1.Time{Time: deletedAt})
	m.SetFinalizers([]string{"machine.cluster.x-k8s.io"})
}

func onNode(node string) machineOpt {
	return func(m *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(m.Object, node, "status", "nodeRef", "name")
	}
}

func newTestMachine(name string, opts ...machineOpt) *unstructured.Unstructured {
	m := newMachine()
	m.SetNamespace("ns")
	m.SetName(name)
	m.SetUID(types.UID("uid-" + name))
	m.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: capi.Group + "/v1beta2", Kind: "MachineSet", Name: "md-0-old", UID: "ms", Controller: ptr.To(true)}})
	for _, o := range opts {
		o(m)
	}
	return m
}

func capiObject(gvk string, name, revision string, replicas int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"replicas": replicas}}}
	switch gvk {
	case "set":
		u.SetGroupVersionKind(capi.MachineSetKind)
	default:
		u.SetGroupVersionKind(capi.MachineDeploymentKind)
	}
	u.SetNamespace("ns")
	u.SetName(name)
	u.SetAnnotations(map[string]string{capi.RevisionAnnotation: revision})
	return u
}

func newFixture(t *testing.T, objs ...client.Object) (*Reconciler, client.Client) {
	t.Helper()
	s := lullscheme.New()
	for _, k := range []string{"Machine", "MachineSet", "MachineDeployment", "Cluster"} {
		s.AddKnownTypeWithName(capi.MachineKind.GroupVersion().WithKind(k), &unstructured.Unstructured{})
		s.AddKnownTypeWithName(capi.MachineKind.GroupVersion().WithKind(k+"List"), &unstructured.UnstructuredList{})
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(&lullv1alpha1.NodeMaintenance{}).
		WithIndex(newMachine(), capi.NodeIndex, NodeOf).Build()
	return &Reconciler{Client: c, Finalizer: lullv1alpha1.DrainerFinalizer, RemediationDeadline: 0}, c
}

func reconcileMachine(t *testing.T, r *Reconciler, name string) {
	t.Helper()
	_, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}})
	require.NoError(t, err)
}

func get(t *testing.T, c client.Client, name string) *unstructured.Unstructured {
	t.Helper()
	m := newMachine()
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, m))
	return m
}

func node(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }

func TestGovernedMachineGetsTheHook(t *testing.T) {
	other := capi.PreDrainHookPrefix + "/other-tool"
	r, c := newFixture(t, newTestMachine("m", governed, func(m *unstructured.Unstructured) { annotate(m, other, "x") }))
	reconcileMachine(t, r, "m")
	m := get(t, c, "m")
	require.Equal(t, capi.HookOwner, m.GetAnnotations()[capi.PreDrainHook])
	require.Equal(t, "x", m.GetAnnotations()[other], "another tool's hook is left alone")
}

func TestUngovernedMachineLosesOnlyLullsHook(t *testing.T) {
	other := capi.PreDrainHookPrefix + "/other-tool"
	r, c := newFixture(t, newTestMachine("m", hooked, func(m *unstructured.Unstructured) { annotate(m, other, "x") }))
	reconcileMachine(t, r, "m")
	m := get(t, c, "m")
	require.False(t, capi.HasHook(m), "the label removed: lull's hook goes")
	require.Equal(t, "x", m.GetAnnotations()[other])
}

func TestDeletedMachineBecomesARequest(t *testing.T) {
	r, c := newFixture(t, newTestMachine("m", governed, hooked, deleting, onNode("n1")), node("n1"),
		capiObject("set", "md-0-old", "1", 0), capiObject("md", "md-0", "2", 3))
	reconcileMachine(t, r, "m")
	var nm lullv1alpha1.NodeMaintenance
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "n1"}, &nm))
	require.Equal(t, []string{string(capi.CauseRollout)}, nm.Spec.Classes)
	require.Equal(t, "n1", nm.Spec.NodeName)
	require.Contains(t, nm.Spec.Reason, "Cluster API deletes Machine ns/m: MachineDeployment md-0 rolls out revision 2")
	require.Equal(t, capi.RequestedBy, nm.Annotations[lullv1alpha1.RequestedByAnnotation])
	require.Equal(t, "ns/m", nm.Annotations[capi.MachineAnnotation])
	require.Equal(t, "uid-m", nm.Annotations[capi.MachineUIDAnnotation])
	require.Equal(t, []string{lullv1alpha1.DrainerFinalizer}, nm.Finalizers)
	require.Nil(t, nm.Spec.Deadline, "a rollout waits for its windows")
	require.Equal(t, "delete", nm.LeaseOperation())
	require.True(t, capi.HasHook(get(t, c, "m")), "the hook stays until lull has drained")

	// Waiting, cordoning, draining: the hook stays.
	for _, p := range []lullv1alpha1.MaintenancePhase{lullv1alpha1.PhaseWaitingForWindow, lullv1alpha1.PhaseWaitingForBudget, lullv1alpha1.PhaseDraining, lullv1alpha1.PhaseFailed} {
		nm.Status.Phase = p
		require.NoError(t, c.Status().Update(context.Background(), &nm))
		reconcileMachine(t, r, "m")
		require.True(t, capi.HasHook(get(t, c, "m")), "phase %s: the hook stays", p)
	}
	nm.Status.Phase = lullv1alpha1.PhaseDrained
	require.NoError(t, c.Status().Update(context.Background(), &nm))
	reconcileMachine(t, r, "m")
	require.False(t, capi.HasHook(get(t, c, "m")), "drained by lull: Cluster API may go on")
}

func TestRemediationIsNotHeldByWindows(t *testing.T) {
	r, c := newFixture(t, newTestMachine("m", governed, hooked, deleting, onNode("n1"), func(m *unstructured.Unstructured) {
		annotate(m, capi.RemediateMachineAnnotation, "")
	}), node("n1"))
	r.RemediationDeadline = 10 * time.Minute
	reconcileMachine(t, r, "m")
	var nm lullv1alpha1.NodeMaintenance
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "n1"}, &nm))
	require.Equal(t, []string{string(capi.CauseRemediation)}, nm.Spec.Classes)
	require.NotNil(t, nm.Spec.Deadline)
	require.Equal(t, deletedAt.Add(10*time.Minute), nm.Spec.Deadline.UTC())
}

func TestAnotherRequestHoldsTheMachine(t *testing.T) {
	admin := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "admins"},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"hardware"}}}
	r, c := newFixture(t, newTestMachine("m", governed, hooked, deleting, onNode("n1")), node("n1"), admin)
	reconcileMachine(t, r, "m")
	require.True(t, capi.HasHook(get(t, c, "m")), "an admin's request holds the node: the Machine waits")
	var nm lullv1alpha1.NodeMaintenance
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "n1"}, &nm))
	require.Equal(t, []string{"hardware"}, nm.Spec.Classes, "the admin's request is not replaced")
}

func TestNothingToDrainReleasesTheHook(t *testing.T) {
	r, c := newFixture(t, newTestMachine("no-node", governed, hooked, deleting), newTestMachine("gone-node", governed, hooked, deleting, onNode("n9")))
	reconcileMachine(t, r, "no-node")
	reconcileMachine(t, r, "gone-node")
	require.False(t, capi.HasHook(get(t, c, "no-node")), "never had a node")
	require.False(t, capi.HasHook(get(t, c, "gone-node")), "its node is gone")
	var list lullv1alpha1.NodeMaintenanceList
	require.NoError(t, c.List(context.Background(), &list))
	require.Empty(t, list.Items)
}

func TestLabelRemovedWhileDeletingStillDrains(t *testing.T) {
	r, c := newFixture(t, newTestMachine("m", hooked, deleting, onNode("n1")), node("n1"))
	reconcileMachine(t, r, "m")
	require.True(t, capi.HasHook(get(t, c, "m")), "being deleted with lull's hook: lull drains first")
	var nm lullv1alpha1.NodeMaintenance
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "n1"}, &nm))
}

func TestMachineGoneEndsItsRequest(t *testing.T) {
	finished := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1", Finalizers: []string{"x"},
		Annotations: map[string]string{capi.MachineAnnotation: "ns/m"}},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1"}, Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseNodeNotFound}}
	holding := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n2", Annotations: map[string]string{capi.MachineAnnotation: "ns/m2"}},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n2"}, Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDrained}}
	someoneElses := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n3"},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n3"}, Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseNodeNotFound}}
	r, c := newFixture(t, finished, holding, someoneElses)
	reconcileMachine(t, r, "m")
	reconcileMachine(t, r, "m2")
	var nm lullv1alpha1.NodeMaintenance
	err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, &nm)
	if err == nil {
		require.NotNil(t, nm.DeletionTimestamp, "the finished request of a deleted Machine is deleted")
	} else {
		require.True(t, apierrors.IsNotFound(err))
	}
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "n2"}, &nm))
	require.True(t, nm.Spec.Complete, "its node outlived the Machine: lull lets it go")
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "n3"}, &nm))
	require.Nil(t, nm.DeletionTimestamp, "a request lull did not make for a Machine is not touched")
}

func TestFinishedRequestMakesWay(t *testing.T) {
	done := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "old"},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"kernel-update"}}, Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseCompleted}}
	r, c := newFixture(t, newTestMachine("m", governed, hooked, deleting, onNode("n1")), node("n1"), done)
	reconcileMachine(t, r, "m") // deletes the record
	reconcileMachine(t, r, "m") // requests
	var nm lullv1alpha1.NodeMaintenance
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "n1"}, &nm))
	require.Equal(t, "uid-m", nm.Annotations[capi.MachineUIDAnnotation], "a finished request is a record: the Machine's request replaces it")
	require.True(t, capi.HasHook(get(t, c, "m")))
}

func TestSkipRemediationWhileHeldDown(t *testing.T) {
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"hardware"}},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDraining,
			Decision: &lullv1alpha1.Decision{Steps: []lullv1alpha1.PlannedStep{{Type: lullv1alpha1.ActionCordon}, {Type: lullv1alpha1.ActionDrain}, {Type: lullv1alpha1.StepPowerOff}}}}}
	r, c := newFixture(t, newTestMachine("m", governed, hooked, onNode("n1")), node("n1"), nm)
	phase := func(p lullv1alpha1.MaintenancePhase) {
		t.Helper()
		nm.Status.Phase = p
		require.NoError(t, c.Status().Update(context.Background(), nm))
		reconcileMachine(t, r, "m")
	}
	skipped := func() bool { _, ok := get(t, c, "m").GetAnnotations()[capi.SkipRemediationAnnotation]; return ok }
	phase(lullv1alpha1.PhaseDraining)
	require.False(t, skipped(), "draining: the node is up")
	phase(lullv1alpha1.PhaseActing)
	require.True(t, skipped(), "powering off: health checks stand down")
	require.Equal(t, "n1", get(t, c, "m").GetAnnotations()[capi.SkipRemediationByLull], "lull records that it set it")
	phase(lullv1alpha1.PhasePoweredOff)
	require.True(t, skipped(), "held off")
	phase(lullv1alpha1.PhaseCompleted)
	require.False(t, skipped(), "let go: health checks are back")
	require.NotContains(t, get(t, c, "m").GetAnnotations(), capi.SkipRemediationByLull)

	// An admin's skip stays whatever lull does.
	m := get(t, c, "m")
	annotate(m, capi.SkipRemediationAnnotation, "")
	require.NoError(t, c.Update(context.Background(), m))
	phase(lullv1alpha1.PhasePoweredOff)
	phase(lullv1alpha1.PhaseCompleted)
	require.True(t, skipped(), "lull removes only the skip it set")

	// Restarts only: not held down.
	nm.Status.Decision.Steps = []lullv1alpha1.PlannedStep{{Type: lullv1alpha1.StepRestartService, Unit: "chronyd"}}
	require.NoError(t, c.Status().Update(context.Background(), nm))
	require.False(t, heldDown(&lullv1alpha1.NodeMaintenance{Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseActing, Decision: nm.Status.Decision}}))
}

func TestRequestWakesTheMachinesOnItsNode(t *testing.T) {
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{capi.MachineAnnotation: "ns/old"}},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1"}}
	r, _ := newFixture(t, newTestMachine("m", governed, onNode("n1")), newTestMachine("other", governed, onNode("n2")))
	got := r.machinesOf(context.Background(), nm)
	require.ElementsMatch(t, []reconcile.Request{
		{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "old"}},
		{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "m"}},
	}, got)
}

func TestOfCluster(t *testing.T) {
	only := &types.NamespacedName{Namespace: "ns", Name: "c1"}
	require.True(t, ofCluster(nil, newTestMachine("m")), "self-managed: every Machine")
	require.True(t, ofCluster(only, newTestMachine("m", inCluster)))
	require.False(t, ofCluster(only, newTestMachine("m")), "no cluster label")
	other := newTestMachine("m", inCluster)
	other.SetNamespace("elsewhere")
	require.False(t, ofCluster(only, other), "another namespace's c1")
	require.True(t, ofCluster(only, testCluster(true, nil)))
	c2 := testCluster(true, nil)
	c2.SetName("c2")
	require.False(t, ofCluster(only, c2))
}

func TestOtherClustersMachineIsLeftAlone(t *testing.T) {
	r, c := newFixture(t, newTestMachine("m", governed))
	r.Cluster = &types.NamespacedName{Namespace: "ns", Name: "c1"}
	reconcileMachine(t, r, "m")
	require.False(t, capi.HasHook(get(t, c, "m")), "a management cluster's Machine of another workload cluster is another lull's")
}
