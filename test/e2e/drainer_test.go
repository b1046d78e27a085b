package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/lease"
)

// TestDrainerMaintenanceByLabel: with the real lull-drainer, lull-scheduler,
// kube-controller-manager (ReplicaSets recreate evicted pods, the disruption
// controller keeps the PDB's status) and kwok nodes: labelling a node
// drains it through the eviction API; its pods come back on other nodes,
// never on the labelled one; removing the label uncordons the node and
// releases the lease.
func TestDrainerMaintenanceByLabel(t *testing.T) {
	ctx := t.Context()
	cs := cluster.Clientset
	c, err := client.New(cluster.Config, client.Options{Scheme: lullscheme.New()})
	require.NoError(t, err)

	cluster.GuardedApp(t, "drainme", 10, policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))}, nil)
	byNode := waitAppRunning(ctx, t, "drainme", 10)
	victim, most := "", 0
	for n, k := range byNode {
		if k > most {
			victim, most = n, k
		}
	}
	t.Logf("pods per node: %v; maintaining %s", byNode, victim)

	// Record every binding of the app's pods from now on.
	w, err := cs.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{LabelSelector: "app=drainme"})
	require.NoError(t, err)
	defer w.Stop()
	var mu sync.Mutex
	var boundToVictim []string
	seen := map[string]bool{}
	for _, p := range listApp(ctx, t, "drainme") {
		seen[p.Name] = true
	}
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted || seen[p.Name] || p.Spec.NodeName == "" {
				continue
			}
			mu.Lock()
			if p.Spec.NodeName == victim {
				boundToVictim = append(boundToVictim, p.Name)
			}
			mu.Unlock()
		}
	}()

	blocked := watchBlockedDrains(t, victim)
	start := time.Now()
	labelNode(ctx, t, victim, ptr.To("kernel-update"))
	t.Cleanup(func() { labelNode(context.Background(), t, victim, nil) })
	var nm lullv1alpha1.NodeMaintenance
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Name: victim}, &nm); err != nil {
			return false, nil
		}
		return nm.Status.Phase == lullv1alpha1.PhaseDrained, nil
	}), "request never Drained; last status %+v; blocked drains not asked again: %v; %s", nm.Status, blocked.violations(t), cluster.LogsHint())
	require.Empty(t, blocked.violations(t), "a drain blocked by a budget with room is asked again")
	t.Logf("label -> Drained in %v: %d pod(s) evicted", time.Since(start).Round(time.Millisecond), nm.Status.Pods.Evicted)

	after := waitAppRunning(ctx, t, "drainme", 10, victim)
	t.Logf("pods per node after the drain: %v", after)
	node, err := cs.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
	require.NoError(t, err)
	require.True(t, node.Spec.Unschedulable, "cordoned while drained")
	l, err := cs.CoordinationV1().Leases(lease.DefaultNamespace).Get(ctx, lease.Name(victim), metav1.GetOptions{})
	require.NoError(t, err)
	holder := ptr.Deref(l.Spec.HolderIdentity, "")
	require.True(t, strings.HasPrefix(holder, "lull-drainer/"), "held by a drainer replica under its own identity, not %q", holder)

	labelNode(ctx, t, victim, nil)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Name: victim}, &nm); err != nil {
			return false, nil
		}
		return nm.Status.Phase == lullv1alpha1.PhaseCompleted, nil
	}), "request never Completed; last status %+v", nm.Status)
	node, err = cs.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
	require.NoError(t, err)
	require.False(t, node.Spec.Unschedulable, "uncordoned after completion")
	_, err = cs.CoordinationV1().Leases(lease.DefaultNamespace).Get(ctx, lease.Name(victim), metav1.GetOptions{})
	require.Error(t, err, "lease released")

	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, boundToVictim, "pods bound to the node under maintenance")
}

func listApp(ctx context.Context, t *testing.T, app string) []corev1.Pod {
	t.Helper()
	pods, err := cluster.Clientset.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	require.NoError(t, err)
	return pods.Items
}
