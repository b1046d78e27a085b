package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/maintenance"
)

// Side doors: what others do to a node lull works on, in the middle of the
// work, changes none of lull's promises (issue 27).
//
//   - a node relabelled out of its window's pool while it drains keeps its
//     slot: a second node of that window waits for the budget, and the
//     request records both windows;
//   - someone uncordons the draining node: lull cordons it again, says so
//     (event, condition UncordonedByOthers, metric) and removes that
//     cordon when the request ends;
//   - a node held by lull carries the autoscalers' keep-off annotations,
//     which go when the request ends;
//   - a node an admin cordoned before it was labelled stays cordoned after
//     its request completes;
//   - a node waiting for a window that never opens, relabelled into an
//     always-open pool, still waits: the closed window keeps deciding.
//
// The invariant watchers run throughout.
func TestSystemSideDoors(t *testing.T) {
	e := newSysEnv(t)
	ctx := t.Context()
	cs := cluster.Clientset
	pair := e.pickNodes("e2e-sd", 2)
	a, b := pair[0], pair[1]
	c := e.pickNodes("e2e-sd-closed", 1)[0]
	e.oneAtATimeWindow("e2e-sd")
	e.window(&lullv1alpha1.MaintenanceWindow{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-sd-open"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{
			NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "e2e-sd-open"}},
			Strategy:       lullv1alpha1.StrategyPermissive,
			MaxUnavailable: ptr.To(intstr.FromInt32(10)),
		},
	})
	e.window(&lullv1alpha1.MaintenanceWindow{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-sd-closed"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "e2e-sd-closed"}},
			Strategy:     lullv1alpha1.StrategyRestrictive,
		},
	})
	// Pods on a guarded so that its drain waits (minAvailable = replicas)
	// until the test lets it go on; a pod on c that must stay.
	cluster.GuardedApp(t, "e2e-sd", 2, policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(2))},
		func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"kubernetes.io/hostname": a} })
	waitAppRunning(ctx, t, "e2e-sd", 2)
	cluster.GuardedApp(t, "e2e-sd-closed", 1, policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))},
		func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"kubernetes.io/hostname": c} })
	waitAppRunning(ctx, t, "e2e-sd-closed", 1)

	iv := e.watchInvariants(a, b, c)
	iv.budget("e2e-sd", 1, a, b)
	iv.restrict(c) // its window never opens
	uncordonsBefore := foreignUncordons(t)

	// An admin's cordon on b, before lull is asked for anything.
	e.patchNode(b, `{"spec":{"unschedulable":true}}`)
	t.Cleanup(func() { e.patchNodeBg(b, `{"spec":{"unschedulable":null}}`) })

	// c waits for its closed window; relabelled into the open pool, it
	// still does.
	e.patchNode(c, `{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`)
	e.waitNM(c, "WaitingForWindow", time.Minute, inPhase(lullv1alpha1.PhaseWaitingForWindow))
	e.patchNode(c, `{"metadata":{"labels":{"pool":"e2e-sd-open"}}}`)
	nm := e.waitNM(c, "recording both windows", time.Minute, recorded("e2e-sd-closed", "e2e-sd-open"))
	require.Equal(t, lullv1alpha1.PhaseWaitingForWindow, nm.Status.Phase, "relabelled into an open pool, %s still waits for its closed window: %s", c, nm.Status.WaitingFor)

	// a starts and drains until its budget stops it.
	e.patchNode(a, `{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`)
	nm = e.waitNM(a, "blocked by its PodDisruptionBudget", time.Minute, func(nm *lullv1alpha1.NodeMaintenance) bool {
		return nm.Status.Phase == lullv1alpha1.PhaseDraining && len(nm.Status.Blockers) > 0
	})
	require.True(t, nm.Status.CordonedByLull)
	requireHoldAnnotations(t, a, true)

	// Mid-drain, a is relabelled out of e2e-sd, and b is asked for: b
	// waits for e2e-sd's budget, which a's start still holds.
	e.patchNode(a, `{"metadata":{"labels":{"pool":"e2e-sd-open"}}}`)
	e.waitNM(a, "recording both windows", time.Minute, recorded("e2e-sd", "e2e-sd-open"))
	e.patchNode(b, `{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`)
	nm = e.waitNM(b, "WaitingForBudget", time.Minute, inPhase(lullv1alpha1.PhaseWaitingForBudget))
	t.Logf("%s waits: %s", b, nm.Status.WaitingFor)

	// Mid-drain, someone uncordons a: lull cordons it again and says so.
	uncordoned := time.Now()
	e.patchNode(a, `{"spec":{"unschedulable":false}}`)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, a, metav1.GetOptions{})
		return err == nil && n.Spec.Unschedulable, nil
	}), "%s was not cordoned again; %s", a, cluster.LogsHint())
	t.Logf("foreign uncordon of %s undone in %v", a, time.Since(uncordoned).Round(time.Millisecond))
	nm = e.waitNM(a, "condition UncordonedByOthers", time.Minute, func(nm *lullv1alpha1.NodeMaintenance) bool {
		return meta.IsStatusConditionTrue(nm.Status.Conditions, maintenance.ConditionUncordonedByOthers)
	})
	require.Equal(t, maintenance.ReasonCordonRestored, meta.FindStatusCondition(nm.Status.Conditions, maintenance.ConditionUncordonedByOthers).Reason)
	require.True(t, nm.Status.CordonedByLull)
	require.Eventually(t, func() bool { return foreignUncordons(t) > uncordonsBefore }, time.Minute, 200*time.Millisecond,
		"lull_maintenance_foreign_uncordons_total did not count the uncordon")
	events, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + maintenance.ReasonUncordonedByOthers})
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(events.Items, func(ev corev1.Event) bool { return ev.InvolvedObject.Name == a }),
		"a Warning event says %s was uncordoned by someone else", a)

	// Let a's drain go on: its pods may go anywhere, the budget allows one.
	_, err = cs.AppsV1().Deployments("default").Patch(ctx, "e2e-sd", types.JSONPatchType,
		[]byte(`[{"op":"remove","path":"/spec/template/spec/nodeSelector"}]`), metav1.PatchOptions{})
	require.NoError(t, err)
	_, err = cs.PolicyV1().PodDisruptionBudgets("default").Patch(ctx, "e2e-sd", types.MergePatchType,
		[]byte(`{"spec":{"minAvailable":1}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	e.waitNM(a, "Drained", 2*time.Minute, inPhase(lullv1alpha1.PhaseDrained))
	nm = e.waitNM(b, "still waiting", time.Minute, inPhase(lullv1alpha1.PhaseWaitingForBudget))
	require.Empty(t, nm.Status.StartedAt, "%s must not start while %s holds e2e-sd's only slot", b, a)

	// Completing a gives back what lull put there (its cordon, since the
	// foreign uncordon, and the annotations); then b goes.
	e.complete(a)
	requireSchedulable(t, a, true)
	requireHoldAnnotations(t, a, false)
	nm = e.waitNM(b, "Drained", 2*time.Minute, inPhase(lullv1alpha1.PhaseDrained))
	require.True(t, ptr.Deref(nm.Status.WasUnschedulable, false), "lull saw the admin's cordon on %s", b)
	require.False(t, nm.Status.CordonedByLull)
	requireHoldAnnotations(t, b, true)
	e.complete(b)
	requireSchedulable(t, b, false) // the admin's cordon stays
	requireHoldAnnotations(t, b, false)

	// c never started: no eviction, and it ends when its label goes.
	e.complete(c)
	require.Zero(t, iv.evictions(c))
	iv.check()
	require.Equal(t, 1, iv.maxDisrupting("e2e-sd"), "one node of e2e-sd at a time, and at least one")
}

// recorded is true once a request records every window named.
func recorded(windows ...string) func(*lullv1alpha1.NodeMaintenance) bool {
	return func(nm *lullv1alpha1.NodeMaintenance) bool {
		for _, w := range windows {
			if !slices.Contains(nm.Status.Windows, w) {
				return false
			}
		}
		return true
	}
}

// requireHoldAnnotations checks that node carries (or no longer carries)
// the annotations lull sets while it holds a node.
func requireHoldAnnotations(t *testing.T, node string, want bool) {
	t.Helper()
	n, err := cluster.Clientset.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	require.NoError(t, err)
	for _, k := range []string{maintenance.AnnotationScaleDownDisabled, maintenance.AnnotationDoNotDisrupt} {
		v, ok := n.Annotations[k]
		if want {
			require.Equal(t, "true", v, "node %s annotation %s while lull holds it", node, k)
		} else {
			require.False(t, ok, "node %s annotation %s after lull let it go", node, k)
		}
	}
}

func requireSchedulable(t *testing.T, node string, want bool) {
	t.Helper()
	n, err := cluster.Clientset.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, want, !n.Spec.Unschedulable, "node %s schedulable", node)
}

// foreignUncordons sums lull_maintenance_foreign_uncordons_total over the
// drainer replicas (each counts what it saw while leading).
func foreignUncordons(t *testing.T) float64 {
	var sum float64
	for _, p := range drainerProcs() {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", p.metrics))
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, "lull_maintenance_foreign_uncordons_total "); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				require.NoError(t, err, line)
				sum += f
			}
		}
	}
	return sum
}

// A plan that reboots the node drains every pod, whatever the request's
// podSelector says: a selector that matches nothing once let the drain end
// at once and the reboot kill every pod past its budget (issue 27,
// finding 5). The podSelector itself needs lull:emergency, which the
// cluster's admin has.
func TestSystemRebootDrainsWholeNode(t *testing.T) {
	e := newSysEnv(t)
	ctx := t.Context()
	node := e.pickNodes("e2e-sd-reboot", 1)[0]
	p := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "e2e-sd-reboot"}, Spec: lullv1alpha1.DisruptionPolicySpec{
		Priority: 100,
		Rules: []lullv1alpha1.DisruptionRule{{Name: "reboot", Class: "e2e-sd-reboot",
			Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepReboot}}}},
	}}
	require.NoError(t, e.c.Create(ctx, p))
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), p) })
	// An earlier scenario's finished request for the node may still be
	// there (a label makes a new one; an object must be created anew).
	e.deleteNM(node)
	t.Cleanup(func() { e.deleteNM(node) })
	deployOn(t, "e2e-sd-reboot", node, 2)
	iv := e.watchInvariants(node)
	startSimAgent(t, node)
	var boot string
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		boot = e.bootID(node)
		return boot != "", nil
	}), "the simulated agent of %s gave it no boot ID", node)

	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: lullv1alpha1.NodeMaintenanceSpec{
		NodeName: node, Classes: []string{"e2e-sd-reboot"}, Reason: "e2e: a selector that matches nothing",
		Drain: &lullv1alpha1.DrainOptions{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "matches-nothing"}}}}}
	require.NoError(t, e.c.Create(ctx, nm))
	got := e.waitNM(node, "Completed", 3*time.Minute, inPhase(lullv1alpha1.PhaseCompleted))
	require.Len(t, got.Status.Actions, 1, "%+v", got.Status.Actions)
	require.Equal(t, lullv1alpha1.ActionSucceeded, got.Status.Actions[0].State)
	require.NotEqual(t, boot, e.bootID(node), "rebooted")
	require.Equal(t, 2, iv.evictions(node), "both pods were evicted before the reboot, though the podSelector matches neither")
	iv.check()
}
