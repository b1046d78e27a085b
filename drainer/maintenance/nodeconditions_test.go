package maintenance

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
)

func conditionTypes(m map[corev1.NodeConditionType]corev1.NodeCondition) []string {
	var out []string
	for _, t := range lifecycleConditions {
		if c, ok := m[t]; ok {
			out = append(out, string(t)+"="+c.Reason)
		}
	}
	return out
}

// What a request says on its node, phase by phase.
func TestNodeConditions(t *testing.T) {
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"kernel-update"}}}
	next := metav1.NewTime(t0().Add(3 * 3600e9))
	started := metav1.NewTime(t0())
	for _, tc := range []struct {
		phase   lullv1alpha1.MaintenancePhase
		started bool
		drains  bool
		want    []string
	}{
		{phase: "", want: nil},
		{phase: lullv1alpha1.PhaseWaitingForWindow, want: []string{"MaintenancePlanned=LullWaitingForWindow"}},
		{phase: lullv1alpha1.PhaseWaitingForBudget, want: []string{"MaintenancePlanned=LullWaitingForBudget"}},
		{phase: lullv1alpha1.PhaseCordoning, started: true, drains: true, want: []string{"MaintenanceInProgress=LullCordoning"}},
		{phase: lullv1alpha1.PhaseDraining, started: true, drains: true, want: []string{"MaintenanceInProgress=LullDraining", "DrainInProgress=LullDraining"}},
		{phase: lullv1alpha1.PhaseDrained, started: true, drains: true, want: []string{"MaintenanceInProgress=LullDrained", "Drained=LullDrained"}},
		{phase: lullv1alpha1.PhaseActing, started: true, want: []string{"MaintenanceInProgress=LullActing"}},
		{phase: lullv1alpha1.PhaseActing, started: true, drains: true, want: []string{"MaintenanceInProgress=LullActing", "Drained=LullActing"}},
		// Lost its lease, its cordon still on: still in progress.
		{phase: lullv1alpha1.PhaseWaitingForLease, started: true, want: []string{"MaintenanceInProgress=LullWaitingForLease"}},
		{phase: lullv1alpha1.PhaseCompleted, started: true, want: nil},
		{phase: lullv1alpha1.PhaseFailed, want: nil},
	} {
		st := &lullv1alpha1.NodeMaintenanceStatus{Phase: tc.phase, NextWindowStart: &next, WaitingFor: "window w is closed"}
		if tc.started {
			st.StartedAt = &started
		}
		got := NodeConditions(nm, st, tc.drains)
		require.Equal(t, tc.want, conditionTypes(got), "phase %s", tc.phase)
		if c, ok := got[corev1.NodeMaintenancePlanned]; ok {
			require.Equal(t, "lull: NodeMaintenance n1 (kernel-update); next start 2026-11-21T13:00:00Z", c.Message)
		}
	}
}

// The conditions go on the node in one status patch, follow the request,
// and leave another tool's condition of the same type alone.
func TestSyncNodeConditions(t *testing.T) {
	foreign := corev1.NodeCondition{Type: corev1.NodeDrained, Status: corev1.ConditionTrue, Reason: "FirmwareTool", Message: "theirs"}
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{ready, foreign}}}
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(n).WithStatusSubresource(n).Build()
	r := &Reconciler{Client: c, Options: Options{NodeConditions: true}}
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"k"}}}
	ctx := context.Background()
	get := func() *corev1.Node {
		var got corev1.Node
		require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "n1"}, &got))
		return &got
	}
	types := func(n *corev1.Node) map[corev1.NodeConditionType]string {
		out := map[corev1.NodeConditionType]string{}
		for _, c := range n.Status.Conditions {
			out[c.Type] = c.Reason
		}
		return out
	}

	st := &lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseWaitingForWindow}
	require.NoError(t, r.syncNodeConditions(ctx, get(), NodeConditions(nm, st, true), t0()))
	require.Equal(t, map[corev1.NodeConditionType]string{"Ready": "KubeletReady", "Drained": "FirmwareTool", "MaintenancePlanned": "LullWaitingForWindow"}, types(get()))

	st = &lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDrained, StartedAt: ptr.To(metav1.NewTime(t0()))}
	require.NoError(t, r.syncNodeConditions(ctx, get(), NodeConditions(nm, st, true), t0()))
	require.Equal(t, map[corev1.NodeConditionType]string{"Ready": "KubeletReady", "Drained": "FirmwareTool", "MaintenanceInProgress": "LullDrained"}, types(get()),
		"planned gives way to in progress; another tool's Drained is not lull's to overwrite")
	n1 := get()
	require.NoError(t, r.syncNodeConditions(ctx, n1, NodeConditions(nm, st, true), t0()))
	require.Equal(t, n1.ResourceVersion, get().ResourceVersion, "nothing to change: no write")

	st.Phase = lullv1alpha1.PhaseCompleted
	require.NoError(t, r.syncNodeConditions(ctx, get(), NodeConditions(nm, st, true), t0()))
	require.Equal(t, map[corev1.NodeConditionType]string{"Ready": "KubeletReady", "Drained": "FirmwareTool"}, types(get()), "lull's go, the others stay")

	r.Options.NodeConditions = false
	st.Phase = lullv1alpha1.PhaseDraining
	require.NoError(t, r.syncNodeConditions(ctx, get(), NodeConditions(nm, st, true), t0()))
	require.Len(t, get().Status.Conditions, 2, "--node-conditions=false writes none")
}
