package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/app"
	"lull.dev/lull/lease"
)

// Two drainer replicas with leader election off, both acting on the same
// requests at the same moments: the budget is fenced in the API server, so
// a window with maxUnavailable 1 never has two nodes disrupted, however the
// replicas interleave. Every trial labels ten nodes at once (twenty
// reconciles race for the first slot) and then completes the drained node
// one at a time (each completion frees the slot for the nine waiting, on
// both replicas at once).
func TestBudgetFencedAcrossReplicas(t *testing.T) {
	trials := 20
	if v, err := strconv.Atoi(os.Getenv("LULL_FENCING_TRIALS")); err == nil && v > 0 {
		trials = v
	}
	e := newDrainEnv(t)
	e.window("fenced", func(w *lullv1alpha1.MaintenanceWindow) {
		w.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "fenced"}}
		w.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(1))
	})
	var nodes []string
	for i := range 10 {
		n := fmt.Sprintf("f%d", i)
		nodes = append(nodes, n)
		e.node(n, map[string]string{"pool": "fenced"})
	}
	maxRequests := e.maxDisrupting()
	maxCordoned := e.maxCordoned()
	for _, id := range []string{"lull-drainer/replica-a", "lull-drainer/replica-b"} {
		e.start(func(o *app.Options) {
			o.LeaderElect = false
			o.Maintenance.Identity = id
		})
	}
	start := time.Now()
	for trial := range trials {
		for _, n := range nodes {
			e.label(n, ptr.To("kernel-update"))
		}
		done := map[string]bool{}
		for len(done) < len(nodes) {
			drained := e.waitDrainedAmong(nodes, done)
			e.label(drained, nil)
			e.waitNM(drained, "Completed", phaseIs(lullv1alpha1.PhaseCompleted))
			done[drained] = true
		}
		require.LessOrEqual(t, maxRequests(), 1, "trial %d: two requests disrupting at once in a maxUnavailable 1 window", trial)
		require.LessOrEqual(t, maxCordoned(), 1, "trial %d: two nodes cordoned at once in a maxUnavailable 1 window", trial)
	}
	t.Logf("fencing: %d trials x %d requests, two active replicas, in %s; most disrupting at once: %d requests, %d cordoned nodes",
		trials, len(nodes), time.Since(start).Round(time.Second), maxRequests(), maxCordoned())
}

// waitDrainedAmong waits for one of nodes (not done) to be Drained.
func (e *drainEnv) waitDrainedAmong(nodes []string, done map[string]bool) string {
	e.t.Helper()
	var drained string
	require.NoError(e.t, wait.PollUntilContextTimeout(e.ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, n := range nodes {
			nm := &lullv1alpha1.NodeMaintenance{}
			if done[n] || e.c.Get(ctx, client.ObjectKey{Name: n}, nm) != nil {
				continue
			}
			if nm.Status.Phase == lullv1alpha1.PhaseDrained {
				drained = n
				return true, nil
			}
		}
		return false, nil
	}), "no request reached Drained")
	return drained
}

// A replica killed between taking a node's lease and recording the start
// leaves the lease behind under its own identity. The leader that carries
// the request on, finding it must wait for its window, releases that
// lease too; nobody else would.
func TestLeaderReleasesDeadReplicasLease(t *testing.T) {
	e := newDrainEnv(t)
	e.noonWindow("a")
	e.node("n1", map[string]string{"pool": "a"})
	_, err := lease.New(e.cs, lease.Options{Clock: e.clock}).Acquire(e.ctx, "n1", "lull-drainer/killed-replica", "drain", "", time.Minute)
	require.NoError(t, err)
	e.start(func(o *app.Options) {
		o.LeaderElect = true // the manager here has none; the drainer acts as the elected leader
		o.Maintenance.Identity = "lull-drainer/leader"
	})
	e.label("n1", ptr.To("kernel-update"))
	e.waitNM("n1", "WaitingForWindow", phaseIs(lullv1alpha1.PhaseWaitingForWindow))
	require.NoError(t, wait.PollUntilContextTimeout(e.ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return e.leaseHolder("n1") == "", nil
	}), "the dead replica's lease is still held by %q", e.leaseHolder("n1"))
}
