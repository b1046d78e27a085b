package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/disruptors"
)

// taint puts Karpenter's disruption taint on node, or takes it away.
func (e *drainEnv) taint(node string, on bool) {
	e.t.Helper()
	n, err := e.cs.CoreV1().Nodes().Get(e.ctx, node, metav1.GetOptions{})
	require.NoError(e.t, err)
	n.Spec.Taints = nil
	if on {
		n.Spec.Taints = []corev1.Taint{{Key: disruptors.KarpenterDisruptedTaint, Effect: corev1.TaintEffectNoSchedule}}
	}
	_, err = e.cs.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{})
	require.NoError(e.t, err)
}

// Issue 45: a node Karpenter disrupts (its taint) is held by Karpenter as
// far as lull is concerned: it uses a slot of the window that selects it,
// so another node's request waits for the budget, and lull's request for
// it waits for the "lease", naming Karpenter, without cordoning it. The
// taint going lets lull go on.
func TestDrainerWaitsForKarpenter(t *testing.T) {
	e := newDrainEnv(t)
	e.window("pool-k", func(w *lullv1alpha1.MaintenanceWindow) {
		w.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "k"}}
		w.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(1))
	})
	for _, n := range []string{"k1", "k2"} {
		e.node(n, map[string]string{"pool": "k"})
		e.pods(n, "web-"+n, 1)
	}
	e.taint("k2", true)
	e.start(nil)
	e.label("k1", ptr.To("kernel-update"))
	nm := e.waitNM("k1", "WaitingForBudget", phaseIs(lullv1alpha1.PhaseWaitingForBudget))
	require.Equal(t, "window pool-k allows 1 node(s) disrupted at once; 1 in use", nm.Status.WaitingFor)
	e.label("k2", ptr.To("kernel-update"))
	nm = e.waitNM("k2", "WaitingForLease", phaseIs(lullv1alpha1.PhaseWaitingForLease))
	require.Equal(t, disruptors.Karpenter, nm.Status.LeaseHolder)
	require.Contains(t, nm.Status.WaitingFor, `leased by "karpenter" for disruption (disrupting it (taint karpenter.sh/disrupted))`)
	require.False(t, e.nodeObj("k2").Spec.Unschedulable, "lull does not cordon a node Karpenter disrupts")
	require.Empty(t, e.leaseHolder("k2"), "nor takes its lease")

	// Karpenter is done (here: its taint goes): one of the two starts,
	// the other waits for the budget.
	e.taint("k2", false)
	require.NoError(t, wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		started := 0
		for _, n := range []string{"k1", "k2"} {
			var nm lullv1alpha1.NodeMaintenance
			if e.c.Get(ctx, client.ObjectKey{Name: n}, &nm) == nil && nm.Status.Phase == lullv1alpha1.PhaseDrained {
				started++
			}
		}
		return started == 1, nil
	}), "no request went on once Karpenter's taint went")
}

// Issue 45: Karpenter marks a node between lull's look at it and lull's
// cordon. lull yields before it evicts anything: its lease and slot go,
// its cordon stays (still lull's to undo), the request waits naming
// Karpenter, and goes on once Karpenter is done.
func TestDrainerYieldsToKarpenterMarkingAtTheCordon(t *testing.T) {
	e := newDrainEnv(t)
	// Karpenter tainting race1 in the same write as lull's cordon, once
	// (racePolicy): the cordon's answer is the first lull hears of it.
	e.node("race1", map[string]string{"pool": "race"})
	e.pods("race1", "web", 1)
	e.installRace(racePolicy("e2e-karpenter-race", "race1",
		`object.spec.?unschedulable.orValue(false) && !oldObject.spec.?unschedulable.orValue(false)`),
		"race1", func(n *corev1.Node) { n.Spec.Unschedulable = true })

	e.start(nil)
	e.label("race1", ptr.To("kernel-update"))
	nm := e.waitNM("race1", "WaitingForLease", phaseIs(lullv1alpha1.PhaseWaitingForLease))
	require.Equal(t, disruptors.Karpenter, nm.Status.LeaseHolder)
	require.False(t, nm.Status.CordonedByLull, "lull gave its cordon back")
	require.Nil(t, nm.Status.StartedAt, "the request starts afresh")
	require.False(t, e.nodeObj("race1").Spec.Unschedulable, "lull's cordon undone (Karpenter's taint keeps pods off)")
	require.Empty(t, e.leaseHolder("race1"), "lull gave the lease up")
	require.Equal(t, 1, e.podsOn("race1"), "lull evicted nothing")

	e.taint("race1", false)
	nm = e.waitNM("race1", "Drained", phaseIs(lullv1alpha1.PhaseDrained))
	require.True(t, nm.Status.CordonedByLull)
	require.False(t, *nm.Status.WasUnschedulable, "lull knows the node was schedulable before it")
}
