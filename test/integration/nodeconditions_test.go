package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/app"
)

// lifecycle returns node's lifecycle conditions by type, as type=reason.
func (e *drainEnv) lifecycle(node string) map[corev1.NodeConditionType]string {
	out := map[corev1.NodeConditionType]string{}
	for _, c := range e.nodeObj(node).Status.Conditions {
		switch c.Type {
		case corev1.NodeMaintenancePlanned, corev1.NodeMaintenanceInProgress, corev1.NodeDrainInProgress, corev1.NodeDrained:
			out[c.Type] = c.Reason
		}
	}
	return out
}

func (e *drainEnv) waitLifecycle(node string, want map[corev1.NodeConditionType]string) {
	e.t.Helper()
	var got map[corev1.NodeConditionType]string
	require.NoError(e.t, wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		got = e.lifecycle(node)
		return len(got) == len(want) && func() bool {
			for k, v := range want {
				if got[k] != v {
					return false
				}
			}
			return true
		}(), nil
	}), "node %s lifecycle conditions: want %v, have %v", node, want, got)
}

// Issue 45: a request tells tools that do not read lull's CRDs what it
// does, on its node in Kubernetes' vocabulary: planned while it waits for
// its window (with the next start), in progress and drained once it has
// drained, nothing once it completed; another tool's condition stays.
func TestDrainerWritesNodeLifecycleConditions(t *testing.T) {
	e := newDrainEnv(t)
	e.noonWindow("c")
	e.node("c1", map[string]string{"pool": "c"})
	e.pods("c1", "web", 1)
	// Another tool's condition, which lull leaves alone.
	n := e.nodeObj("c1")
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeMaintenanceInProgress, Status: corev1.ConditionFalse,
		Reason: "FirmwareTool", Message: "theirs", LastTransitionTime: metav1.Now()})
	_, err := e.cs.CoreV1().Nodes().UpdateStatus(e.ctx, n, metav1.UpdateOptions{})
	require.NoError(t, err)
	e.start(func(o *app.Options) { o.Maintenance.NodeConditions = true })
	e.label("c1", ptr.To("kernel-update"))
	e.waitNM("c1", "WaitingForWindow", phaseIs(lullv1alpha1.PhaseWaitingForWindow))
	e.waitLifecycle("c1", map[corev1.NodeConditionType]string{corev1.NodeMaintenancePlanned: "LullWaitingForWindow", corev1.NodeMaintenanceInProgress: "FirmwareTool"})
	for _, c := range e.nodeObj("c1").Status.Conditions {
		if c.Type == corev1.NodeMaintenancePlanned {
			require.Contains(t, c.Message, "next start 2026-11-21T12:00:00Z", "the next start the forecast gives (13:00 in Berlin)")
		}
	}
	// The window opens.
	e.clock.SetTime(drainT0.Add(2*time.Hour + time.Minute))
	e.waitNM("c1", "Drained", phaseIs(lullv1alpha1.PhaseDrained))
	e.waitLifecycle("c1", map[corev1.NodeConditionType]string{corev1.NodeMaintenanceInProgress: "FirmwareTool", corev1.NodeDrained: "LullDrained"})
	e.label("c1", nil)
	e.waitNM("c1", "Completed", phaseIs(lullv1alpha1.PhaseCompleted))
	e.waitLifecycle("c1", map[corev1.NodeConditionType]string{corev1.NodeMaintenanceInProgress: "FirmwareTool"})
}
