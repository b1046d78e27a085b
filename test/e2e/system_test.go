package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/internal/plan"
	"lull.dev/lull/lease"
)

// sysEnv is a scenario against the whole local cluster.
type sysEnv struct {
	t *testing.T
	c client.WithWatch
}

func newSysEnv(t *testing.T) *sysEnv {
	t.Helper()
	c, err := client.NewWithWatch(cluster.Config, client.Options{Scheme: lullscheme.New()})
	require.NoError(t, err)
	return &sysEnv{t: t, c: c}
}

// pickNodes returns n kwok nodes no other scenario is using, labelled
// pool=<pool> for the test's lifetime.
func (e *sysEnv) pickNodes(pool string, n int) []string {
	e.t.Helper()
	ctx := e.t.Context()
	nodes, err := cluster.Clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok,!pool"})
	require.NoError(e.t, err)
	var names []string
	for _, nd := range nodes.Items {
		if !nd.Spec.Unschedulable {
			names = append(names, nd.Name)
		}
	}
	sort.Strings(names)
	require.GreaterOrEqual(e.t, len(names), n, "free kwok nodes")
	names = names[:n]
	for _, name := range names {
		e.patchNode(name, fmt.Sprintf(`{"metadata":{"labels":{"pool":%q}}}`, pool))
	}
	e.t.Cleanup(func() {
		for _, name := range names {
			e.patchNodeBg(name, `{"metadata":{"labels":{"pool":null,"lull.dev/maintenance":null}}}`)
		}
	})
	return names
}

func (e *sysEnv) patchNode(name, patch string) {
	e.t.Helper()
	_, err := cluster.Clientset.CoreV1().Nodes().Patch(e.t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(e.t, err)
}

func (e *sysEnv) patchNodeBg(name, patch string) {
	_, _ = cluster.Clientset.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
}

func (e *sysEnv) window(w *lullv1alpha1.MaintenanceWindow) {
	e.t.Helper()
	require.NoError(e.t, e.c.Create(e.t.Context(), w))
	e.t.Cleanup(func() { _ = e.c.Delete(context.Background(), w) })
}

// editWindow changes the window's spec the way a person would, reading it
// again when the drainer's status write got in between.
func (e *sysEnv) editWindow(name string, edit func(*lullv1alpha1.MaintenanceWindow)) {
	e.t.Helper()
	require.NoError(e.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var w lullv1alpha1.MaintenanceWindow
		if err := e.c.Get(e.t.Context(), client.ObjectKey{Name: name}, &w); err != nil {
			return err
		}
		edit(&w)
		return e.c.Update(e.t.Context(), &w)
	}))
}

// oneAtATimeWindow creates the always-open window pool for the nodes
// labelled pool=<pool> (pickNodes), with maxUnavailable 1.
func (e *sysEnv) oneAtATimeWindow(pool string) { e.gatedWindow(pool, nil) }

// gatedWindow is oneAtATimeWindow with health gates.
func (e *sysEnv) gatedWindow(pool string, gates *lullv1alpha1.Gates) {
	e.t.Helper()
	e.window(&lullv1alpha1.MaintenanceWindow{
		ObjectMeta: metav1.ObjectMeta{Name: pool},
		Spec: lullv1alpha1.MaintenanceWindowSpec{
			NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{"pool": pool}},
			Strategy:       lullv1alpha1.StrategyPermissive,
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Gates:          gates,
		},
	})
}

func (e *sysEnv) waitNM(node, what string, timeout time.Duration, cond func(*lullv1alpha1.NodeMaintenance) bool) *lullv1alpha1.NodeMaintenance {
	e.t.Helper()
	var last lullv1alpha1.NodeMaintenance
	err := wait.PollUntilContextTimeout(e.t.Context(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := e.c.Get(ctx, client.ObjectKey{Name: node}, &last); err != nil {
			return false, nil
		}
		return cond(&last), nil
	})
	require.NoError(e.t, err, "NodeMaintenance %s never %s; last status %+v; %s", node, what, last.Status, cluster.LogsHint())
	return &last
}

func inPhase(p lullv1alpha1.MaintenancePhase) func(*lullv1alpha1.NodeMaintenance) bool {
	return func(nm *lullv1alpha1.NodeMaintenance) bool { return nm.Status.Phase == p }
}

// complete removes the label and waits for the request to complete.
func (e *sysEnv) complete(node string) {
	e.t.Helper()
	e.patchNode(node, `{"metadata":{"labels":{"lull.dev/maintenance":null}}}`)
	e.waitNM(node, "Completed", time.Minute, inPhase(lullv1alpha1.PhaseCompleted))
}

// A closed window: the request waits, says until when, and nothing is
// evicted; an emergency override opens the window and the drain proceeds.
func TestSystemClosedWindowThenOverride(t *testing.T) {
	e := newSysEnv(t)
	nodes := e.pickNodes("e2e-closed", 1)
	node := nodes[0]
	start := time.Now().UTC().Add(12 * time.Hour).Format("15:04")
	e.window(&lullv1alpha1.MaintenanceWindow{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-closed"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "e2e-closed"}},
			Strategy:     lullv1alpha1.StrategySchedule,
			Schedule: &lullv1alpha1.Schedule{TimeZone: "UTC", StartTime: start, Duration: lullv1alpha1.Duration{Duration: time.Hour},
				Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}},
		},
	})
	iv := e.watchInvariants(node)
	iv.restrict(node) // permitted only from the override on
	predicted := planOf(t, "kernel-update", node)
	require.Equal(t, plan.StartWindow, predicted.Start)
	e.patchNode(node, `{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`)
	nm := e.waitNM(node, "WaitingForWindow", time.Minute, inPhase(lullv1alpha1.PhaseWaitingForWindow))
	t.Logf("waiting: %s", nm.Status.WaitingFor)
	require.Contains(t, nm.Status.WaitingFor, "next opens at")
	require.Equal(t, predicted.WaitingFor, nm.Status.WaitingFor, "the preview said what the request waits for")
	require.Equal(t, predicted.StartAt.UTC(), nm.Status.NextWindowStart.UTC(), "the preview said when it starts")
	n, err := cluster.Clientset.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	require.NoError(t, err)
	require.False(t, n.Spec.Unschedulable)

	iv.permit(node, time.Now())
	e.editWindow("e2e-closed", func(w *lullv1alpha1.MaintenanceWindow) {
		w.Spec.Override = &lullv1alpha1.Override{Strategy: lullv1alpha1.OverridePermissive,
			Until: metav1.Time{Time: time.Now().Add(time.Hour)}, Reason: "emergency: CVE fix"}
	})
	opened := time.Now()
	e.waitNM(node, "Drained", 2*time.Minute, inPhase(lullv1alpha1.PhaseDrained))
	t.Logf("override -> Drained in %v", time.Since(opened).Round(time.Millisecond))
	e.complete(node)
	iv.check()
}

// Two actors: a third-party tool holds the lease; lull waits, naming it,
// and proceeds once it is released.
func TestSystemTwoActors(t *testing.T) {
	e := newSysEnv(t)
	node := e.pickNodes("e2e-actors", 1)[0]
	out, code := lullctl(t, "lease", "acquire", node, "--holder", "fw-updater", "--operation", "reboot", "--reason", "firmware 2.1", "--duration", "10m")
	require.Equal(t, 0, code, out)
	t.Cleanup(func() {
		_ = lease.New(cluster.Clientset, lease.Options{}).Release(context.Background(), node, "fw-updater")
	})
	e.patchNode(node, `{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`)
	nm := e.waitNM(node, "WaitingForLease", time.Minute, inPhase(lullv1alpha1.PhaseWaitingForLease))
	t.Logf("waiting: %s", nm.Status.WaitingFor)
	require.Contains(t, nm.Status.WaitingFor, `"fw-updater" for reboot`)
	out, code = lullctl(t, "lease", "release", node, "--holder", "fw-updater")
	require.Equal(t, 0, code, out)
	e.waitNM(node, "Drained", 2*time.Minute, inPhase(lullv1alpha1.PhaseDrained))
	e.complete(node)
}

// A PodDisruptionBudget that allows nothing blocks the drain: status shows
// the budget and its pods; raising the budget unblocks it.
func TestSystemPDBBlocksThenUnblocks(t *testing.T) {
	e := newSysEnv(t)
	ctx := t.Context()
	cs := cluster.Clientset
	node := e.pickNodes("e2e-pdb", 1)[0]
	dep := OptedInDeployment("guarded", 3)
	dep.Spec.Template.Spec.NodeSelector = map[string]string{"pool": "e2e-pdb"}
	_, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { cluster.RemoveApp(t, "guarded") })
	waitAppRunning(ctx, t, "guarded", 3)
	_, err = cs.PolicyV1().PodDisruptionBudgets("default").Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(3)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.PolicyV1().PodDisruptionBudgets("default").Delete(context.Background(), "guarded", metav1.DeleteOptions{})
	})
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "guarded", metav1.GetOptions{})
		return err == nil && p.Status.ObservedGeneration == p.Generation && p.Status.CurrentHealthy == 3, nil
	}))
	predicted := planOf(t, "kernel-update", node)
	require.Equal(t, plan.StartNow, predicted.Start)
	blocked := watchBlockedDrains(t, node)
	e.patchNode(node, `{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`)
	labelled := time.Now()
	nm := e.waitNM(node, "blocked", time.Minute, func(nm *lullv1alpha1.NodeMaintenance) bool { return len(nm.Status.Blockers) > 0 })
	t.Logf("blocked after %v: %+v", time.Since(labelled).Round(time.Millisecond), nm.Status.Blockers)
	require.Equal(t, "default/guarded", nm.Status.Blockers[0].PodDisruptionBudget)
	require.Len(t, nm.Status.Blockers[0].Pods, 3)
	require.Len(t, predicted.Blockers, 1)
	require.Equal(t, predicted.Blockers[0].PodDisruptionBudget, nm.Status.Blockers[0].PodDisruptionBudget, "the preview named the blocking budget")
	require.ElementsMatch(t, predicted.Blockers[0].Pods, nm.Status.Blockers[0].Pods, "the preview named the blocked pods")

	// Let the pods move (the replacements need somewhere to go), and
	// raise the budget.
	_, err = cs.AppsV1().Deployments("default").Patch(ctx, "guarded", types.JSONPatchType,
		[]byte(`[{"op":"remove","path":"/spec/template/spec/nodeSelector"}]`), metav1.PatchOptions{})
	require.NoError(t, err)
	_, err = cs.PolicyV1().PodDisruptionBudgets("default").Patch(ctx, "guarded", types.MergePatchType,
		[]byte(`{"spec":{"minAvailable":2}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	raised := time.Now()
	e.waitNM(node, "Drained", 2*time.Minute, inPhase(lullv1alpha1.PhaseDrained))
	t.Logf("budget raised -> Drained in %v", time.Since(raised).Round(time.Millisecond))
	require.Empty(t, blocked.violations(t), "a drain blocked by a budget with room is asked again (issue 48)")
	e.complete(node)
}

// Budget 1 with three labelled nodes: strictly one at a time.
func TestSystemBudgetOneAtATime(t *testing.T) {
	e := newSysEnv(t)
	nodes := e.pickNodes("e2e-budget", 3)
	e.oneAtATimeWindow("e2e-budget")
	iv := e.watchInvariants(nodes...)
	iv.budget("e2e-budget", 1, nodes...)
	for _, n := range nodes {
		e.patchNode(n, `{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`)
	}
	for done := 0; done < len(nodes); done++ {
		var drained string
		require.NoError(t, wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			for _, n := range nodes {
				var nm lullv1alpha1.NodeMaintenance
				if e.c.Get(ctx, client.ObjectKey{Name: n}, &nm) == nil && nm.Status.Phase == lullv1alpha1.PhaseDrained {
					drained = n
					return true, nil
				}
			}
			return false, nil
		}))
		t.Logf("drained %s; completing it", drained)
		e.complete(drained)
	}
	iv.check()
	require.Equal(t, 1, iv.maxDisrupting("e2e-budget"), "one node at a time, and at least one")
}

// drainerProc is one lull-drainer replica of the local cluster.
type drainerProc struct {
	name    string
	metrics int
}

func drainerProcs() []drainerProc {
	return []drainerProc{{"lull-drainer", cluster.DrainerMetricsPort}, {"lull-drainer-2", cluster.DrainerMetricsPort + 2}}
}

// leading reports whether the replica's metrics say it leads.
func (p drainerProc) leading() bool {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", p.metrics))
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return strings.Contains(string(body), `leader_election_master_status{name="lull-drainer"} 1`)
}

func allCompleted(e *sysEnv, nodes []string) bool {
	for _, n := range nodes {
		var nm lullv1alpha1.NodeMaintenance
		if e.c.Get(e.t.Context(), client.ObjectKey{Name: n}, &nm) != nil || nm.Status.Phase != lullv1alpha1.PhaseCompleted {
			return false
		}
	}
	return true
}

// Leader failover: the leading lull-drainer is killed and stays down; the
// time until the other replica acts on a new request is printed.
func TestSystemLeaderFailover(t *testing.T) {
	e := newSysEnv(t)
	node := e.pickNodes("e2e-failover", 1)[0]
	name, err := leader(t.Context(), time.Minute)
	require.NoError(t, err)
	p, err := snapshotProc(name)
	require.NoError(t, err)
	// A finished request of an earlier scenario may still exist for the
	// node: only a new one counts.
	var old lullv1alpha1.NodeMaintenance
	_ = e.c.Get(t.Context(), client.ObjectKey{Name: node}, &old)
	require.NoError(t, p.kill(t.Context()))
	killed := time.Now()
	t.Cleanup(func() { _ = p.start() })
	e.patchNode(node, `{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`)
	e.waitNM(node, "acted on", time.Minute, func(nm *lullv1alpha1.NodeMaintenance) bool {
		return nm.UID != old.UID && nm.Status.Phase != ""
	})
	acted := time.Since(killed)
	e.waitNM(node, "Drained", time.Minute, inPhase(lullv1alpha1.PhaseDrained))
	fmt.Printf("leader failover: the other replica acted %v after the leader was killed (leader election: lease 6s, retry 1s)\n", acted.Round(100*time.Millisecond))
	t.Logf("failover: %v", acted)
	e.complete(node)
}
