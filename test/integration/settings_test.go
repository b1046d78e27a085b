package integration

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/app"
	"lull.dev/lull/internal/plan"
)

// customLabel is a maintenance label key other than the default.
const customLabel = "example.com/maintenance"

// setLabel sets (or, with value "", removes) a label on a node.
func (e *drainEnv) setLabel(node, key, value string) {
	e.t.Helper()
	v := "null"
	if value != "" {
		v = fmt.Sprintf("%q", value)
	}
	_, err := e.cs.CoreV1().Nodes().Patch(e.ctx, node, types.MergePatchType,
		[]byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, key, v)), metav1.PatchOptions{})
	require.NoError(e.t, err)
}

// A drainer configured with another maintenance label acts on that label
// only: it makes requests from it (not from the default label on the same
// node or on another), completes them when it goes, and removes it (and
// only it) when a request completes by itself. A preview with the same
// settings predicts what it does.
func TestDrainerHonoursConfiguredMaintenanceLabel(t *testing.T) {
	e := newDrainEnv(t)
	e.installDefaultPolicy()
	e.node("custom", nil)
	e.node("keys", nil)
	e.node("default", nil)
	for _, n := range []string{"custom", "keys", "default"} {
		e.pods(n, "web", 2)
	}
	// The default label, before the drainer starts: its first list sees it.
	e.setLabel("default", lullv1alpha1.MaintenanceLabel, "kernel-update")
	e.setLabel("custom", lullv1alpha1.MaintenanceLabel, "hardware")
	e.setLabel("keys", lullv1alpha1.MaintenanceLabel, "hardware")
	e.start(func(o *app.Options) { o.Settings.MaintenanceLabel = customLabel })

	po := plan.DefaultOptions()
	po.MaintenanceLabel, po.Clock = customLabel, e.clock
	res, err := plan.Preview(e.ctx, e.c, e.cs, po, plan.Request{Nodes: []string{"custom"}, Classes: []string{"kernel-update"}})
	require.NoError(t, err)
	p := res.Nodes[0]
	require.Equal(t, plan.StartNow, p.Start)

	e.setLabel("custom", customLabel, "kernel-update")
	e.verify(p)
	nm := e.waitNM("custom", "Drained", phaseIs(lullv1alpha1.PhaseDrained))
	require.Equal(t, []string{"kernel-update"}, nm.Spec.Classes, "the class comes from the configured label, not the default one (hardware)")
	require.Equal(t, "requested by the node label "+customLabel+"=kernel-update", nm.Spec.Reason)
	require.True(t, e.nodeObj("custom").Spec.Unschedulable)
	require.Zero(t, e.podsOn("custom"))

	// Removing the configured label completes the request; the default
	// label stays, and means nothing to this drainer.
	e.setLabel("custom", customLabel, "")
	e.waitNM("custom", "Completed", phaseIs(lullv1alpha1.PhaseCompleted))
	require.False(t, e.nodeObj("custom").Spec.Unschedulable, "lull's cordon undone")
	require.Empty(t, e.leaseHolder("custom"), "lease released")
	require.Equal(t, "hardware", e.nodeObj("custom").Labels[lullv1alpha1.MaintenanceLabel])

	// A class the policy lets complete at once (None): the drainer removes
	// the configured label, not the default one.
	e.setLabel("keys", customLabel, "ssh-keys")
	e.waitNM("keys", "Completed", phaseIs(lullv1alpha1.PhaseCompleted))
	labels := e.nodeObj("keys").Labels
	require.NotContains(t, labels, customLabel, "the configured label goes with the completed request")
	require.Equal(t, "hardware", labels[lullv1alpha1.MaintenanceLabel], "the default label is not the drainer's to remove")

	// By now the drainer has handled many events after its first list,
	// which held the node with only the default label: no request for it.
	err = e.c.Get(e.ctx, client.ObjectKey{Name: "default"}, &lullv1alpha1.NodeMaintenance{})
	require.True(t, apierrors.IsNotFound(err), "a request made from the default label: %v", err)
	require.False(t, e.nodeObj("default").Spec.Unschedulable)
	require.Equal(t, 2, e.podsOn("default"))
}
