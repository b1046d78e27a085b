package cli

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/internal/plan"
)

// A maintenance label that is not a valid class never becomes a request
// (the API server refuses it, the drainer reports InvalidMaintenanceLabel):
// status says so instead of "Pending".
func TestStatusOfInvalidMaintenanceLabels(t *testing.T) {
	labelled := func(name, class string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{lullv1alpha1.MaintenanceLabel: class}}}
	}
	// n-relabelled was requested by its label as kernel-update; the label
	// now names an invalid class, which the drainer refuses to apply.
	relabelled := &lullv1alpha1.NodeMaintenance{
		ObjectMeta: metav1.ObjectMeta{Name: "n-relabelled", Annotations: map[string]string{lullv1alpha1.RequestedByAnnotation: lullv1alpha1.RequestedByLabel}},
		Spec:       lullv1alpha1.NodeMaintenanceSpec{NodeName: "n-relabelled", Classes: []string{"kernel-update"}},
		Status:     lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseWaitingForWindow, WaitingFor: "window(s) noon closed"},
	}
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(
		labelled("n-empty", ""), labelled("n-upper", "Kernel_Update"), labelled("n-valid", "kernel-update"),
		labelled("n-relabelled", "Firmware_2"), relabelled,
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n-none"}},
	).Build()
	po := plan.DefaultOptions()
	po.Clock = clocktesting.NewFakeClock(now)
	rows, at, err := loadStatus(t.Context(), c, po, nil)
	require.NoError(t, err)
	require.Equal(t, now, at)
	phases := map[string]lullv1alpha1.MaintenancePhase{}
	for _, r := range rows {
		phases[r.Node] = r.Phase
	}
	require.Equal(t, map[string]lullv1alpha1.MaintenancePhase{"n-empty": PhaseInvalidLabel, "n-upper": PhaseInvalidLabel,
		"n-valid": lullv1alpha1.PhasePending, "n-relabelled": lullv1alpha1.PhaseWaitingForWindow}, phases)
	var buf bytes.Buffer
	require.NoError(t, renderStatus(&buf, rows, at, humanOptions{}))
	golden(t, "status-invalid-label", buf.Bytes())
}

// A request waiting for budget stores a message that counts the holders;
// status names them as they are now, from the requests of the same windows.
func TestStatusNamesBudgetHolders(t *testing.T) {
	nm := func(node string, phase lullv1alpha1.MaintenancePhase, windows ...string) *lullv1alpha1.NodeMaintenance {
		return &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: node},
			Spec:   lullv1alpha1.NodeMaintenanceSpec{NodeName: node, Classes: []string{"kernel-update"}},
			Status: lullv1alpha1.NodeMaintenanceStatus{Phase: phase, Windows: windows, WaitingFor: "window pool-b allows 2 node(s) disrupted at once; 2 in use"}}
	}
	objs := []client.Object{
		nm("b1", lullv1alpha1.PhaseDraining, "pool-b"), nm("b2", lullv1alpha1.PhaseCordoning, "pool-b", "racks"),
		nm("b3", lullv1alpha1.PhaseWaitingForBudget, "pool-b"), nm("b4", lullv1alpha1.PhaseWaitingForBudget, "pool-b"),
		nm("c1", lullv1alpha1.PhaseDraining, "pool-c"), nm("d1", lullv1alpha1.PhaseDraining),
	}
	for _, o := range objs {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: o.GetName()}})
	}
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).Build()
	po := plan.DefaultOptions()
	po.Clock = clocktesting.NewFakeClock(now)
	rows, _, err := loadStatus(t.Context(), c, po, []string{"b3", "b1"})
	require.NoError(t, err)
	require.Equal(t, "window pool-b allows 2 node(s) disrupted at once; 2 in use; held by b1, b2", rows[0].WaitingFor)
	require.Equal(t, "window pool-b allows 2 node(s) disrupted at once; 2 in use", rows[1].WaitingFor, "only waiting requests name holders")
}
