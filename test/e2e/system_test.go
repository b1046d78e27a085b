package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/pkg/lease"
	"lull.dev/lull/pkg/plan"
	lullscheme "lull.dev/lull/pkg/scheme"
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

// podDeletions watches the pods bound to nodes and records each eviction
// (deletion) with the time it was seen.
type podDeletions struct {
	mu  sync.Mutex
	got map[string][]string // node -> pods
}

func (e *sysEnv) watchDeletions(nodes ...string) *podDeletions {
	e.t.Helper()
	w, err := cluster.Clientset.CoreV1().Pods(metav1.NamespaceAll).Watch(e.t.Context(), metav1.ListOptions{})
	require.NoError(e.t, err)
	e.t.Cleanup(w.Stop)
	d := &podDeletions{got: map[string][]string{}}
	watched := map[string]bool{}
	for _, n := range nodes {
		watched[n] = true
	}
	seen := map[string]bool{}
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || !watched[p.Spec.NodeName] || seen[string(p.UID)] || (ev.Type != watch.Deleted && p.DeletionTimestamp == nil) {
				continue
			}
			seen[string(p.UID)] = true
			d.mu.Lock()
			d.got[p.Spec.NodeName] = append(d.got[p.Spec.NodeName], p.Namespace+"/"+p.Name)
			d.mu.Unlock()
		}
	}()
	return d
}

func (d *podDeletions) on(node string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.got[node]...)
}

// budgetWatcher records the most NodeMaintenances of the given nodes ever
// seen disrupting at once.
type budgetWatcher struct {
	mu     sync.Mutex
	phases map[string]lullv1alpha1.MaintenancePhase
	max    int
}

func (e *sysEnv) watchBudget(nodes ...string) *budgetWatcher {
	e.t.Helper()
	w, err := e.c.Watch(e.t.Context(), &lullv1alpha1.NodeMaintenanceList{})
	require.NoError(e.t, err)
	e.t.Cleanup(w.Stop)
	b := &budgetWatcher{phases: map[string]lullv1alpha1.MaintenancePhase{}}
	mine := map[string]bool{}
	for _, n := range nodes {
		mine[n] = true
	}
	go func() {
		for ev := range w.ResultChan() {
			nm, ok := ev.Object.(*lullv1alpha1.NodeMaintenance)
			if !ok || !mine[nm.Name] {
				continue
			}
			b.mu.Lock()
			if ev.Type == watch.Deleted {
				delete(b.phases, nm.Name)
			} else {
				b.phases[nm.Name] = nm.Status.Phase
			}
			n := 0
			for _, p := range b.phases {
				if p.Disrupting() {
					n++
				}
			}
			if n > b.max {
				b.max = n
			}
			b.mu.Unlock()
		}
	}()
	return b
}

func (b *budgetWatcher) maxSeen() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.max
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
	deleted := e.watchDeletions(node)
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

	var w lullv1alpha1.MaintenanceWindow
	require.NoError(t, e.c.Get(t.Context(), client.ObjectKey{Name: "e2e-closed"}, &w))
	require.Empty(t, deleted.on(node), "evicted outside the window")
	w.Spec.Override = &lullv1alpha1.Override{Strategy: lullv1alpha1.OverridePermissive,
		Until: metav1.Time{Time: time.Now().Add(time.Hour)}, Reason: "emergency: CVE fix"}
	require.NoError(t, e.c.Update(t.Context(), &w))
	opened := time.Now()
	e.waitNM(node, "Drained", 2*time.Minute, inPhase(lullv1alpha1.PhaseDrained))
	t.Logf("override -> Drained in %v", time.Since(opened).Round(time.Millisecond))
	e.complete(node)
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
	e.waitNM(node, "Drained", 2*time.Minute, inPhase(lullv1alpha1.PhaseDrained))
	e.complete(node)
}

// Budget 1 with three labelled nodes: strictly one at a time.
func TestSystemBudgetOneAtATime(t *testing.T) {
	e := newSysEnv(t)
	nodes := e.pickNodes("e2e-budget", 3)
	e.window(&lullv1alpha1.MaintenanceWindow{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-budget"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{
			NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "e2e-budget"}},
			Strategy:       lullv1alpha1.StrategyPermissive,
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		},
	})
	b := e.watchBudget(nodes...)
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
	require.Equal(t, 1, b.maxSeen(), "more than maxUnavailable nodes disrupted at once")
}

// drainerProc is one lull-drainer replica of the local cluster.
type drainerProc struct {
	name    string
	metrics int
}

func drainerProcs() []drainerProc {
	return []drainerProc{{"lull-drainer", cluster.DrainerMetricsPort}, {"lull-drainer-2", cluster.DrainerMetricsPort + 2}}
}

func (p drainerProc) pid() int {
	b, err := os.ReadFile(filepath.Join(cluster.Dir, "pids", p.name+".pid"))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
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

// restart starts the replica again with the command line it had.
func (p drainerProc) restart(t *testing.T, args []string) {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(cluster.Dir, "logs", p.name+".log"), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	require.NoError(t, err)
	defer logf.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(cluster.Dir, "lull-drainer.kubeconfig"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	require.NoError(t, cmd.Start())
	go func() { _ = cmd.Wait() }()
	require.NoError(t, os.WriteFile(filepath.Join(cluster.Dir, "pids", p.name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644))
}

func cmdline(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// Crash anywhere: the leading lull-drainer is killed with SIGKILL at random
// moments, at least 20 times, during maintenance of three nodes with a
// budget of one and PDB-guarded pods; the other replica takes over each
// time and the killed one is restarted. Watchers record every request and
// pod event; afterwards every invariant must hold and every request must
// have reached Drained.
func TestSystemCrashAnywhere(t *testing.T) {
	e := newSysEnv(t)
	ctx := t.Context()
	cs := cluster.Clientset
	nodes := e.pickNodes("e2e-crash", 3)
	frozen := e.pickNodes("e2e-frozen", 1)[0]
	e.window(&lullv1alpha1.MaintenanceWindow{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-crash"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{
			NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "e2e-crash"}},
			Strategy:       lullv1alpha1.StrategyPermissive,
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		},
	})
	e.window(&lullv1alpha1.MaintenanceWindow{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-frozen"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "e2e-frozen"}},
			Strategy:     lullv1alpha1.StrategyRestrictive,
		},
	})
	// Guarded pods spread over the nodes, so drains are paced by the PDB.
	cluster.GuardedApp(t, "crash", 9, policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))}, nil)
	waitAppRunning(ctx, t, "crash", 9)

	budget := e.watchBudget(nodes...)
	deleted := e.watchDeletions(frozen)
	// PDB watcher: healthy pods must never drop below what the budget allows.
	pw, err := cs.PolicyV1().PodDisruptionBudgets("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=crash"})
	require.NoError(t, err)
	defer pw.Stop()
	var pdbMu sync.Mutex
	pdbViolations := 0
	go func() {
		for ev := range pw.ResultChan() {
			if p, ok := ev.Object.(*policyv1.PodDisruptionBudget); ok && p.Status.ObservedGeneration == p.Generation &&
				p.Status.ExpectedPods > 0 && p.Status.CurrentHealthy < p.Status.DesiredHealthy {
				pdbMu.Lock()
				pdbViolations++
				pdbMu.Unlock()
			}
		}
	}()

	args := map[string][]string{}
	for _, p := range drainerProcs() {
		args[p.name] = cmdline(p.pid())
		require.NotEmpty(t, args[p.name], "command line of %s", p.name)
	}
	e.patchNode(frozen, `{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`)
	round := 0
	label := func() {
		round++
		for _, n := range nodes {
			e.patchNode(n, fmt.Sprintf(`{"metadata":{"labels":{"lull.dev/maintenance":"round-%d"}}}`, round))
		}
	}
	label()

	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	kills, takeovers := 0, 0
	var resume []time.Duration
	completed := map[string]int{}
	deadline := time.Now().Add(8 * time.Minute)
	for kills < 20 || len(completed) < len(nodes) {
		require.True(t, time.Now().Before(deadline), "crash test did not finish: %d kills, completed %v; %s", kills, completed, cluster.LogsHint())
		// Operator: complete whatever is drained; start a new round when all are done.
		for _, n := range nodes {
			var nm lullv1alpha1.NodeMaintenance
			if e.c.Get(ctx, client.ObjectKey{Name: n}, &nm) == nil && nm.Status.Phase == lullv1alpha1.PhaseDrained {
				e.patchNode(n, `{"metadata":{"labels":{"lull.dev/maintenance":null}}}`)
				completed[n]++
			}
		}
		if kills < 20 && allCompleted(e, nodes) {
			label()
		}
		time.Sleep(time.Duration(100+rng.Intn(900)) * time.Millisecond) // a random moment
		var leader *drainerProc
		for _, p := range drainerProcs() {
			if p.leading() {
				leader = &p
				break
			}
		}
		if leader == nil || kills >= 20 {
			continue
		}
		pid := leader.pid()
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		killedAt := time.Now()
		kills++
		leader.restart(t, args[leader.name])
		// Time until a replica leads again.
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			for _, p := range drainerProcs() {
				if p.leading() {
					if p.name != leader.name {
						takeovers++
					}
					return true, nil
				}
			}
			return false, nil
		}), "no replica leads after kill %d", kills)
		resume = append(resume, time.Since(killedAt).Round(100*time.Millisecond))
	}
	// Let the last round finish: complete whatever is drained until every
	// request has finished (the budget lets them through one at a time).
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		done := true
		for _, n := range nodes {
			var nm lullv1alpha1.NodeMaintenance
			if err := e.c.Get(ctx, client.ObjectKey{Name: n}, &nm); err != nil {
				return false, nil
			}
			switch {
			case nm.Status.Phase == lullv1alpha1.PhaseDrained:
				e.patchNode(n, `{"metadata":{"labels":{"lull.dev/maintenance":null}}}`)
				completed[n]++
				done = false
			case !nm.Status.Phase.Finished():
				done = false
			}
		}
		return done, nil
	}), "the last round did not finish; %s", cluster.LogsHint())
	sort.Slice(resume, func(i, j int) bool { return resume[i] < resume[j] })
	fmt.Printf("crash-anywhere: %d kills, %d takeovers by the other replica, %d rounds; time to a leader again: min %v, median %v, max %v\n",
		kills, takeovers, round, resume[0], resume[len(resume)/2], resume[len(resume)-1])
	t.Logf("kills %d, takeovers %d, rounds %d, completions %v, resume times %v", kills, takeovers, round, completed, resume)

	// Invariants.
	require.Equal(t, 1, budget.maxSeen(), "budget exceeded")
	require.Empty(t, deleted.on(frozen), "evictions on a node whose window never opened")
	var nm lullv1alpha1.NodeMaintenance
	require.NoError(t, e.c.Get(ctx, client.ObjectKey{Name: frozen}, &nm))
	require.Equal(t, lullv1alpha1.PhaseWaitingForWindow, nm.Status.Phase)
	pdbMu.Lock()
	require.Zero(t, pdbViolations, "PodDisruptionBudget violated")
	pdbMu.Unlock()
	// No node lull handled is left cordoned without an active request.
	for _, name := range append(append([]string(nil), nodes...), frozen) {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		if !n.Spec.Unschedulable {
			continue
		}
		var owner lullv1alpha1.NodeMaintenance
		require.NoError(t, e.c.Get(ctx, client.ObjectKey{Name: name}, &owner), "node %s cordoned without a request", name)
		require.False(t, owner.Status.Phase.Finished(), "node %s cordoned by a finished request", name)
	}
	e.patchNode(frozen, `{"metadata":{"labels":{"lull.dev/maintenance":null}}}`)
	e.waitNM(frozen, "Completed", time.Minute, inPhase(lullv1alpha1.PhaseCompleted))
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
	var leader *drainerProc
	require.NoError(t, wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, p := range drainerProcs() {
			if p.leading() {
				leader = &p
				return true, nil
			}
		}
		return false, nil
	}))
	args := cmdline(leader.pid())
	require.NotEmpty(t, args)
	// A finished request of an earlier scenario may still exist for the
	// node: only a new one counts.
	var old lullv1alpha1.NodeMaintenance
	_ = e.c.Get(t.Context(), client.ObjectKey{Name: node}, &old)
	require.NoError(t, syscall.Kill(leader.pid(), syscall.SIGKILL))
	killed := time.Now()
	t.Cleanup(func() { leader.restart(t, args) })
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
