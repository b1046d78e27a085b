package cli

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/pkg/plan"
	"lull.dev/lull/pkg/scheme"
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
		Spec:       lullv1alpha1.NodeMaintenanceSpec{NodeName: "n-relabelled", Class: "kernel-update"},
		Status:     lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseWaitingForWindow, WaitingFor: "window(s) noon closed"},
	}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(
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
