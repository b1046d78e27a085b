package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/app"
	"lull.dev/lull/drainer/maintenance"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/plan"
	"lull.dev/lull/internal/settings"
	"lull.dev/lull/lease"
	"lull.dev/lull/test/framework"
)

// Saturday 2026-11-21 10:00 UTC, the drainer's fake now.
var drainT0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

type drainEnv struct {
	t     *testing.T
	ctx   context.Context
	cs    kubernetes.Interface
	c     client.Client
	clock *clocktesting.FakeClock
	ns    string
	// reg holds the metrics of the controllers last started.
	reg *prometheus.Registry
}

// newDrainEnv gives a clean cluster (no nodes, no lull objects) and a
// namespace for pods; start runs lull-drainer's controllers in-process on
// a fake clock.
func newDrainEnv(t *testing.T) *drainEnv {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cs := kubernetes.NewForConfigOrDie(cp.Config)
	deleteAllNodes(t, cs)
	t.Cleanup(func() { deleteAllNodes(t, cs) })
	e := &drainEnv{t: t, ctx: ctx, cs: cs, c: cp.Client, clock: clocktesting.NewFakeClock(drainT0),
		ns: strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))}
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), e.ns, metav1.DeleteOptions{}) })
	// The node leases' namespace and the budget ledger's (lull-system).
	for _, ns := range []string{lease.DefaultNamespace, "lull-system"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err)
		}
	}
	return e
}

// start runs the controllers; the returned function stops them (as a
// crash would: nothing is cleaned up).
func (e *drainEnv) start(mutate func(*app.Options)) context.CancelFunc {
	e.t.Helper()
	o := app.Options{
		Maintenance: maintenance.Options{Settings: settings.Defaults(), LeaseDuration: time.Minute, DrainTimeout: time.Hour, RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second, DeleteEmptyDirData: true}}
	if mutate != nil {
		mutate(&o)
	}
	mgr := e.manager()
	ctx, cancel := context.WithCancel(e.ctx)
	e.t.Cleanup(cancel) // stop the controller before the namespace goes
	e.reg = prometheus.NewRegistry()
	require.NoError(e.t, app.SetupMaintenance(ctx, mgr, e.clock, o, e.reg))
	done := make(chan struct{})
	go func() { _ = mgr.Start(ctx); close(done) }()
	return func() { cancel(); <-done }
}

// manager is a controller manager on the test's API server, without a
// metrics endpoint, for controllers started more than once.
func (e *drainEnv) manager() ctrl.Manager {
	e.t.Helper()
	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{
		Scheme:     framework.Scheme(),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	require.NoError(e.t, err)
	return mgr
}

// node creates a schedulable node without the API server's not-ready taint.
func (e *drainEnv) node(name string, lbls map[string]string) {
	e.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}}
	created, err := e.cs.CoreV1().Nodes().Create(e.ctx, n, metav1.CreateOptions{})
	require.NoError(e.t, err)
	created.Spec.Taints = nil
	_, err = e.cs.CoreV1().Nodes().Update(e.ctx, created, metav1.UpdateOptions{})
	require.NoError(e.t, err)
}

// pods binds n pods (owned by a ReplicaSet name, so drains may evict them)
// to node; grace period 0 so that, without a kubelet, an eviction deletes
// them at once.
func (e *drainEnv) pods(node, app string, n int) {
	e.t.Helper()
	for i := 0; i < n; i++ {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", app, node, i), Namespace: e.ns, Labels: map[string]string{"app": app},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app, UID: "00000000-0000-0000-0000-000000000001", Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](0),
				Containers: []corev1.Container{{Name: "c", Image: "pause", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}}}}},
		}
		created, err := e.cs.CoreV1().Pods(e.ns).Create(e.ctx, p, metav1.CreateOptions{})
		require.NoError(e.t, err)
		// Running and ready, as a kubelet would report: the eviction API
		// lets pending pods go regardless of their budget.
		created.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		_, err = e.cs.CoreV1().Pods(e.ns).UpdateStatus(e.ctx, created, metav1.UpdateOptions{})
		require.NoError(e.t, err)
	}
}

func (e *drainEnv) podsOn(node string) int {
	e.t.Helper()
	pods, err := e.cs.CoreV1().Pods(e.ns).List(e.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	require.NoError(e.t, err)
	return len(pods.Items)
}

// pdb creates a PodDisruptionBudget with the given status (no disruption
// controller runs here, so the test plays its part).
func (e *drainEnv) pdb(name, app string, allowed int32) {
	e.t.Helper()
	p := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
	}
	created, err := e.cs.PolicyV1().PodDisruptionBudgets(e.ns).Create(e.ctx, p, metav1.CreateOptions{})
	require.NoError(e.t, err)
	e.setPDB(created, allowed)
}

func (e *drainEnv) setPDB(p *policyv1.PodDisruptionBudget, allowed int32) {
	e.t.Helper()
	require.NoError(e.t, wait.PollUntilContextTimeout(e.ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		cur, err := e.cs.PolicyV1().PodDisruptionBudgets(e.ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cur.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: cur.Generation, DisruptionsAllowed: allowed,
			CurrentHealthy: 3, DesiredHealthy: 2, ExpectedPods: 3}
		_, err = e.cs.PolicyV1().PodDisruptionBudgets(e.ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err == nil, nil
	}))
}

func (e *drainEnv) label(node string, class *string) {
	e.t.Helper()
	v := "null"
	if class != nil {
		v = fmt.Sprintf("%q", *class)
	}
	_, err := e.cs.CoreV1().Nodes().Patch(e.ctx, node, "application/merge-patch+json",
		[]byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, lullv1alpha1.MaintenanceLabel, v)), metav1.PatchOptions{})
	require.NoError(e.t, err)
}

// noonWindow creates the window "noon" for the nodes of pool: daily 13:00
// to 15:00 in Berlin, closed at the fake clock's start (10:00 UTC).
func (e *drainEnv) noonWindow(pool string) {
	e.t.Helper()
	e.window("noon", func(w *lullv1alpha1.MaintenanceWindow) {
		w.Spec.Strategy = lullv1alpha1.StrategySchedule
		w.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": pool}}
		w.Spec.Schedule = &lullv1alpha1.Schedule{TimeZone: "Europe/Berlin", StartTime: "13:00", Duration: lullv1alpha1.Duration{Duration: 2 * time.Hour},
			Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}}
	})
}

func (e *drainEnv) window(name string, mutate func(*lullv1alpha1.MaintenanceWindow)) {
	e.t.Helper()
	w := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: lullv1alpha1.MaintenanceWindowSpec{Strategy: lullv1alpha1.StrategyPermissive}}
	mutate(w)
	require.NoError(e.t, e.c.Create(e.ctx, w))
}

// waitNM waits until the node's request satisfies cond and returns it.
func (e *drainEnv) waitNM(node, what string, cond func(*lullv1alpha1.NodeMaintenance) bool) *lullv1alpha1.NodeMaintenance {
	e.t.Helper()
	var last *lullv1alpha1.NodeMaintenance
	err := wait.PollUntilContextTimeout(e.ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		nm := &lullv1alpha1.NodeMaintenance{}
		if err := e.c.Get(ctx, client.ObjectKey{Name: node}, nm); err != nil {
			return false, nil
		}
		last = nm
		return cond(nm), nil
	})
	if err != nil {
		var st any
		if last != nil {
			st = last.Status
		}
		e.t.Fatalf("NodeMaintenance %s never reached %s; last status: %+v", node, what, st)
	}
	return last
}

// deletions starts a watcher of the test namespace's pods and returns a
// function listing the pods deleted (or marked for deletion) so far.
func (e *drainEnv) deletions() func() []string {
	e.t.Helper()
	w, err := e.cs.CoreV1().Pods(e.ns).Watch(e.ctx, metav1.ListOptions{})
	require.NoError(e.t, err)
	e.t.Cleanup(w.Stop)
	var mu sync.Mutex
	seen := map[string]bool{}
	var out []string
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || (ev.Type != watch.Deleted && p.DeletionTimestamp == nil) {
				continue
			}
			mu.Lock()
			if !seen[p.Name] {
				seen[p.Name] = true
				out = append(out, p.Name)
			}
			mu.Unlock()
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), out...)
	}
}

// maxDisrupting starts a watcher of every NodeMaintenance change and
// returns a function giving the most requests ever seen disrupting
// (cordoning, draining, drained) at once.
func (e *drainEnv) maxDisrupting() func() int {
	e.t.Helper()
	wc, err := client.NewWithWatch(cp.Config, client.Options{Scheme: framework.Scheme()})
	require.NoError(e.t, err)
	w, err := wc.Watch(e.ctx, &lullv1alpha1.NodeMaintenanceList{})
	require.NoError(e.t, err)
	return e.maxAtOnce(w, func(o runtime.Object) (string, bool, bool) {
		nm, ok := o.(*lullv1alpha1.NodeMaintenance)
		if !ok {
			return "", false, false
		}
		return nm.Name, nm.Status.Phase.Disrupting(), true
	})
}

// maxCordoned starts a watcher of nodes and returns a function giving the
// most nodes ever seen cordoned at once.
func (e *drainEnv) maxCordoned() func() int {
	e.t.Helper()
	w, err := e.cs.CoreV1().Nodes().Watch(e.ctx, metav1.ListOptions{})
	require.NoError(e.t, err)
	return e.maxAtOnce(w, func(o runtime.Object) (string, bool, bool) {
		n, ok := o.(*corev1.Node)
		if !ok {
			return "", false, false
		}
		return n.Name, n.Spec.Unschedulable, true
	})
}

// maxAtOnce follows w and returns a function giving the most objects ever
// seen at once for which state says on (state's last result: whether the
// event is one of the watched objects at all).
func (e *drainEnv) maxAtOnce(w watch.Interface, state func(runtime.Object) (name string, on, ok bool)) func() int {
	e.t.Cleanup(w.Stop)
	var mu sync.Mutex
	maxSeen, seen := 0, map[string]bool{}
	go func() {
		for ev := range w.ResultChan() {
			name, on, ok := state(ev.Object)
			if !ok {
				continue
			}
			mu.Lock()
			seen[name] = on && ev.Type != watch.Deleted
			n := 0
			for _, v := range seen {
				if v {
					n++
				}
			}
			maxSeen = max(maxSeen, n)
			mu.Unlock()
		}
	}()
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return maxSeen
	}
}

func phaseIs(p lullv1alpha1.MaintenancePhase) func(*lullv1alpha1.NodeMaintenance) bool {
	return func(nm *lullv1alpha1.NodeMaintenance) bool { return nm.Status.Phase == p }
}

func (e *drainEnv) nodeObj(name string) *corev1.Node {
	e.t.Helper()
	n, err := e.cs.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
	require.NoError(e.t, err)
	return n
}

func (e *drainEnv) leaseHolder(node string) string {
	l, err := e.cs.CoordinationV1().Leases(lease.DefaultNamespace).Get(e.ctx, lease.Name(node), metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// The whole life of a request made by label: cordon, drain, hold, and on
// label removal uncordon and release.
func TestDrainerFullLifeByLabel(t *testing.T) {
	e := newDrainEnv(t)
	e.node("n1", nil)
	e.node("n2", nil)
	e.pods("n1", "web", 3)
	e.pods("n2", "web", 2)
	e.start(nil)
	p := e.predict("kernel-update", nil, "n1").Nodes[0]
	require.Equal(t, plan.StartNow, p.Start)
	require.Len(t, p.Evict, 3)
	e.label("n1", ptr.To("kernel-update"))
	e.verify(p)

	nm := e.waitNM("n1", "Drained", phaseIs(lullv1alpha1.PhaseDrained))
	require.Equal(t, []string{"kernel-update"}, nm.Spec.Classes)
	require.True(t, nm.Status.CordonedByLull)
	require.Equal(t, int32(3), nm.Status.Pods.Total)
	require.Equal(t, int32(3), nm.Status.Pods.Evicted)
	require.True(t, e.nodeObj("n1").Spec.Unschedulable)
	require.Equal(t, "lull-drainer", e.leaseHolder("n1"))
	require.Zero(t, e.podsOn("n1"))
	require.Equal(t, 2, e.podsOn("n2"), "pods elsewhere untouched")

	e.label("n1", nil)
	e.waitNM("n1", "Completed", phaseIs(lullv1alpha1.PhaseCompleted))
	require.False(t, e.nodeObj("n1").Spec.Unschedulable, "lull's cordon undone")
	require.Empty(t, e.leaseHolder("n1"), "lease released")

	// Labelling again makes a new request.
	e.label("n1", ptr.To("hardware"))
	nm = e.waitNM("n1", "a new Drained request", func(nm *lullv1alpha1.NodeMaintenance) bool {
		return nm.Spec.HasOnlyClass("hardware") && nm.Status.Phase == lullv1alpha1.PhaseDrained
	})
	require.NotNil(t, nm.Status.DrainedAt)
}

// A request waits for its window (nothing evicted), then proceeds when the
// window opens.
func TestDrainerWaitsForWindow(t *testing.T) {
	e := newDrainEnv(t)
	e.noonWindow("a")
	e.node("n1", map[string]string{"pool": "a"})
	e.pods("n1", "web", 2)
	deleted := e.deletions()
	e.start(nil)
	p := e.predict("kernel-update", nil, "n1").Nodes[0]
	require.Equal(t, plan.StartWindow, p.Start)
	require.Equal(t, []string{"noon"}, p.Windows.Names)
	e.label("n1", ptr.To("kernel-update"))
	nm := e.verify(p)
	require.Contains(t, nm.Status.WaitingFor, "2026-11-21T12:00:00Z")
	require.Equal(t, []string{"noon"}, nm.Status.Windows)
	require.False(t, e.nodeObj("n1").Spec.Unschedulable)
	require.Equal(t, 2, e.podsOn("n1"), "nothing evicted outside the window")
	require.Empty(t, deleted(), "the watcher saw evictions outside the window")
	require.Empty(t, e.leaseHolder("n1"))

	e.clock.Step(2 * time.Hour) // 12:00 UTC = 13:00 in Berlin
	e.verifyStartedAt(p)
	e.waitNM("n1", "Drained", phaseIs(lullv1alpha1.PhaseDrained))
	require.Zero(t, e.podsOn("n1"))
}

// Budget 1 with three requests: strictly one node disrupted at a time, as
// seen by a watcher of every NodeMaintenance change.
func TestDrainerBudgetOneAtATime(t *testing.T) {
	e := newDrainEnv(t)
	e.window("pool-b", func(w *lullv1alpha1.MaintenanceWindow) {
		w.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "b"}}
		w.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(1))
	})
	nodes := []string{"b1", "b2", "b3"}
	for _, n := range nodes {
		e.node(n, map[string]string{"pool": "b"})
		e.pods(n, "web", 2)
	}
	// The watcher: the most nodes ever disrupted at once.
	maxSeen := e.maxDisrupting()
	e.start(nil)
	// The preview starts one node and makes the others wait for the
	// budget; which one the drainer starts first is the order it sees the
	// labels in, so the check is the count and the waiting message.
	res := e.predict("kernel-update", nil, nodes...)
	starts := map[plan.Start]int{}
	for _, p := range res.Nodes {
		starts[p.Start]++
	}
	require.Equal(t, map[plan.Start]int{plan.StartNow: 1, plan.StartBudget: 2}, starts)
	require.Equal(t, "window pool-b allows 1 node(s) disrupted at once; 1 in use", res.Nodes[1].WaitingFor)
	require.Equal(t, []string{"b1"}, res.Nodes[1].HeldBy)
	for _, n := range nodes {
		e.label(n, ptr.To("kernel-update"))
	}
	require.NoError(t, wait.PollUntilContextTimeout(e.ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got := map[plan.Start]int{}
		for _, n := range nodes {
			nm := &lullv1alpha1.NodeMaintenance{}
			if e.c.Get(ctx, client.ObjectKey{Name: n}, nm) != nil {
				return false, nil
			}
			switch {
			case nm.Status.StartedAt != nil:
				got[plan.StartNow]++
			case nm.Status.Phase == lullv1alpha1.PhaseWaitingForBudget:
				got[plan.StartBudget]++
			}
		}
		return got[plan.StartNow] == 1 && got[plan.StartBudget] == 2, nil
	}), "one started and two waiting for the budget, as previewed")
	done := map[string]bool{}
	for len(done) < len(nodes) {
		drained := e.waitDrainedAmong(nodes, done)
		var all lullv1alpha1.NodeMaintenanceList
		require.NoError(t, e.c.List(e.ctx, &all))
		var requests []*lullv1alpha1.NodeMaintenance
		for i := range all.Items {
			requests = append(requests, &all.Items[i])
		}
		for _, nm := range requests {
			if !done[nm.Name] && nm.Name != drained && nm.Status.Phase == lullv1alpha1.PhaseWaitingForBudget {
				// The status counts the holder; who it is is read live.
				require.Equal(t, "window pool-b allows 1 node(s) disrupted at once; 1 in use", nm.Status.WaitingFor)
				require.Equal(t, []string{drained}, budget.Holders(budget.Recorded(&nm.Status), slices.Values(requests)))
			}
		}
		e.label(drained, nil)
		e.waitNM(drained, "Completed", phaseIs(lullv1alpha1.PhaseCompleted))
		done[drained] = true
	}
	require.Equal(t, 1, maxSeen(), "never more than maxUnavailable nodes disrupted at once")
}

// A lease held by another actor blocks the request, which names the holder;
// after release the drain proceeds.
func TestDrainerWaitsForForeignLease(t *testing.T) {
	e := newDrainEnv(t)
	e.node("n1", nil)
	e.pods("n1", "web", 1)
	lc := lease.New(e.cs, lease.Options{})
	_, err := lc.Acquire(e.ctx, "n1", "fw-updater", "reboot", "firmware 2.1", 10*time.Minute)
	require.NoError(t, err)
	e.start(nil)
	p := e.predict("kernel-update", nil, "n1").Nodes[0]
	require.Equal(t, plan.StartHolder, p.Start)
	require.Contains(t, p.Warnings, "node is leased by fw-updater for reboot (firmware 2.1)")
	e.label("n1", ptr.To("kernel-update"))
	nm := e.verify(p)
	require.Contains(t, nm.Status.WaitingFor, `leased by "fw-updater" for reboot`)
	require.Equal(t, "fw-updater", nm.Status.LeaseHolder)
	require.False(t, e.nodeObj("n1").Spec.Unschedulable)
	require.NoError(t, lc.Release(e.ctx, "n1", "fw-updater"))
	e.waitNM("n1", "Drained", phaseIs(lullv1alpha1.PhaseDrained))
}

// A PodDisruptionBudget with no disruptions allowed shows in status, with
// its pods; raising the budget unblocks the drain. The budget still counts
// one of its pods as evicted (status.disruptedPods) by an eviction that
// never deleted it, as when the evicting client died mid-request: the
// Blocked condition says so and when the budget frees it.
func TestDrainerShowsPDBBlockers(t *testing.T) {
	e := newDrainEnv(t)
	e.node("n1", nil)
	e.pods("n1", "db", 2)
	e.pods("n1", "web", 1)
	e.pdb("db", "db", 0)
	evictedAt := time.Date(2026, 11, 22, 9, 58, 0, 0, time.UTC)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := e.cs.PolicyV1().PodDisruptionBudgets(e.ns).Get(e.ctx, "db", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.DisruptedPods = map[string]metav1.Time{"db-n1-0": {Time: evictedAt}}
		_, err = e.cs.PolicyV1().PodDisruptionBudgets(e.ns).UpdateStatus(e.ctx, cur, metav1.UpdateOptions{})
		return err
	}))
	deleted := e.deletions()
	e.start(nil)
	p := e.predict("kernel-update", nil, "n1").Nodes[0]
	require.Equal(t, []string{e.ns + "/web-n1-0"}, p.Evict)
	require.Len(t, p.Blockers, 1)
	e.label("n1", ptr.To("kernel-update"))
	e.verify(p)
	nm := e.waitNM("n1", "a blocker", func(nm *lullv1alpha1.NodeMaintenance) bool { return len(nm.Status.Blockers) > 0 })
	require.Equal(t, lullv1alpha1.PhaseDraining, nm.Status.Phase)
	require.Equal(t, e.ns+"/db", nm.Status.Blockers[0].PodDisruptionBudget)
	require.ElementsMatch(t, []string{e.ns + "/db-n1-0", e.ns + "/db-n1-1"}, nm.Status.Blockers[0].Pods)
	blocked := false
	for _, c := range nm.Status.Conditions {
		if c.Type == maintenance.ConditionBlocked && c.Status == metav1.ConditionTrue {
			blocked = true
			require.Contains(t, c.Message, "PodDisruptionBudget "+e.ns+"/db")
			require.Contains(t, c.Message, e.ns+"/db still counts pod "+e.ns+"/db-n1-0 as evicted by a request that did not finish (the pod was not deleted), until 2026-11-22T10:00:00Z")
			require.NotContains(t, c.Message, "pod "+e.ns+"/db-n1-1 as evicted")
		}
	}
	require.True(t, blocked, "Blocked condition set: %+v", nm.Status.Conditions)
	for _, name := range deleted() {
		require.NotContains(t, name, "db-", "a pod protected by an exhausted budget was deleted")
	}
	require.NoError(t, wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := e.cs.EventsV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.Reason == "DrainBlocked" && ev.Regarding.Name == "n1" {
				return true, nil
			}
		}
		return false, nil
	}), "a DrainBlocked event")

	pdb, err := e.cs.PolicyV1().PodDisruptionBudgets(e.ns).Get(e.ctx, "db", metav1.GetOptions{})
	require.NoError(t, err)
	e.setPDB(pdb, 2)
	nm = e.waitNM("n1", "Drained", phaseIs(lullv1alpha1.PhaseDrained))
	require.Empty(t, nm.Status.Blockers)
}

// The window closes while a drain is blocked: Pause keeps the cordon and
// the lease; Abort undoes both; Continue keeps going.
func TestDrainerWindowEnd(t *testing.T) {
	for _, policy := range []lullv1alpha1.WindowEndPolicy{lullv1alpha1.WindowEndPause, lullv1alpha1.WindowEndAbort, lullv1alpha1.WindowEndContinue} {
		t.Run(string(policy), func(t *testing.T) {
			e := newDrainEnv(t)
			e.window("morning", func(w *lullv1alpha1.MaintenanceWindow) {
				w.Spec.Strategy = lullv1alpha1.StrategySchedule
				w.Spec.WindowEnd = policy
				w.Spec.Schedule = &lullv1alpha1.Schedule{TimeZone: "UTC", StartTime: "09:30", Duration: lullv1alpha1.Duration{Duration: time.Hour},
					Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}}
			})
			e.node("n1", nil)
			e.pods("n1", "db", 1)
			e.pdb("db", "db", 0)
			e.start(nil)
			p := e.predict("kernel-update", nil, "n1").Nodes[0]
			require.Equal(t, plan.StartNow, p.Start)
			e.label("n1", ptr.To("kernel-update"))
			e.verify(p)
			e.clock.Step(31 * time.Minute) // 10:31: the window closed at 10:30
			switch policy {
			case lullv1alpha1.WindowEndPause:
				nm := e.waitNM("n1", "paused", func(nm *lullv1alpha1.NodeMaintenance) bool { return strings.HasPrefix(nm.Status.WaitingFor, "paused") })
				require.Equal(t, lullv1alpha1.PhaseDraining, nm.Status.Phase)
				require.Contains(t, nm.Status.WaitingFor, "resumes at 2026-11-22T09:30:00Z")
				require.True(t, e.nodeObj("n1").Spec.Unschedulable)
				require.Equal(t, "lull-drainer", e.leaseHolder("n1"))
			case lullv1alpha1.WindowEndAbort:
				nm := e.waitNM("n1", "aborted", phaseIs(lullv1alpha1.PhaseWaitingForWindow))
				require.False(t, e.nodeObj("n1").Spec.Unschedulable)
				require.Empty(t, e.leaseHolder("n1"))
				require.False(t, nm.Status.CordonedByLull)
			case lullv1alpha1.WindowEndContinue:
				pdb, err := e.cs.PolicyV1().PodDisruptionBudgets(e.ns).Get(e.ctx, "db", metav1.GetOptions{})
				require.NoError(t, err)
				e.setPDB(pdb, 1)
				e.waitNM("n1", "Drained", phaseIs(lullv1alpha1.PhaseDrained))
			}
		})
	}
}

// After its deadline a request no longer waits for a window.
func TestDrainerDeadlineOverridesWindow(t *testing.T) {
	e := newDrainEnv(t)
	e.window("frozen", func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Strategy = lullv1alpha1.StrategyRestrictive })
	e.node("n1", nil)
	e.pods("n1", "web", 1)
	e.start(nil)
	deadline := drainT0.Add(time.Hour)
	p := e.predict("hardware", &deadline, "n1").Nodes[0]
	require.Equal(t, plan.StartWindow, p.Start)
	require.Equal(t, deadline, *p.StartAt, "a Restrictive window never opens: the deadline starts it")
	require.NoError(t, e.c.Create(e.ctx, &lullv1alpha1.NodeMaintenance{
		ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"hardware"}, Reason: "disk failing",
			Deadline: &metav1.Time{Time: deadline}},
	}))
	nm := e.verify(p)
	require.Contains(t, nm.Status.WaitingFor, "deadline 2026-11-21T11:00:00Z")
	e.clock.Step(time.Hour)
	e.verifyStartedAt(p)
	e.waitNM("n1", "Drained", phaseIs(lullv1alpha1.PhaseDrained))
	// Completing the object (no label involved) uncordons and releases.
	require.NoError(t, wait.PollUntilContextTimeout(e.ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		cur := &lullv1alpha1.NodeMaintenance{}
		if err := e.c.Get(ctx, client.ObjectKey{Name: "n1"}, cur); err != nil {
			return false, err
		}
		cur.Spec.Complete = true
		return e.c.Update(ctx, cur) == nil, nil
	}))
	e.waitNM("n1", "Completed", phaseIs(lullv1alpha1.PhaseCompleted))
	require.False(t, e.nodeObj("n1").Spec.Unschedulable)
}

// A node an admin had cordoned stays cordoned after lull's maintenance.
func TestDrainerKeepsAdminCordon(t *testing.T) {
	e := newDrainEnv(t)
	e.node("n1", nil)
	n := e.nodeObj("n1")
	n.Spec.Unschedulable = true
	_, err := e.cs.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{})
	require.NoError(t, err)
	e.pods("n1", "web", 1)
	e.start(nil)
	p := e.predict("kernel-update", nil, "n1").Nodes[0]
	require.Contains(t, p.Warnings, "node is already cordoned by someone else; lull will leave that cordon in place")
	e.label("n1", ptr.To("kernel-update"))
	e.verify(p)
	nm := e.waitNM("n1", "Drained", phaseIs(lullv1alpha1.PhaseDrained))
	require.True(t, *nm.Status.WasUnschedulable)
	require.False(t, nm.Status.CordonedByLull)
	e.label("n1", nil)
	e.waitNM("n1", "Completed", phaseIs(lullv1alpha1.PhaseCompleted))
	require.True(t, e.nodeObj("n1").Spec.Unschedulable, "the admin's cordon stays")
}

// A node deleted mid-drain ends its request cleanly and the lease goes.
func TestDrainerNodeDeletedMidDrain(t *testing.T) {
	e := newDrainEnv(t)
	e.node("n1", nil)
	e.pods("n1", "db", 1)
	e.pdb("db", "db", 0)
	e.start(nil)
	p := e.predict("hardware", nil, "n1").Nodes[0]
	e.label("n1", ptr.To("hardware"))
	e.verify(p)
	require.Equal(t, "lull-drainer", e.leaseHolder("n1"))
	require.NoError(t, e.cs.CoreV1().Nodes().Delete(e.ctx, "n1", metav1.DeleteOptions{}))
	nm := e.waitNM("n1", "Completed without finalizer", func(nm *lullv1alpha1.NodeMaintenance) bool {
		return nm.Status.Phase == lullv1alpha1.PhaseCompleted && len(nm.Finalizers) == 0
	})
	require.Equal(t, "NodeDeleted", meta.FindStatusCondition(nm.Status.Conditions, maintenance.ConditionCordoned).Reason)
	require.Empty(t, e.leaseHolder("n1"))
}

// Invalid requests are rejected at admission with a message that says what
// to fix.
func TestNodeMaintenanceAdmission(t *testing.T) {
	ctx := t.Context()
	valid := func() *lullv1alpha1.NodeMaintenance {
		return &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "adm-1"},
			Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "adm-1", Classes: []string{"kernel-update"}}}
	}
	for name, tc := range map[string]struct {
		mutate func(*lullv1alpha1.NodeMaintenance)
		want   string
	}{
		"name differs from node": {func(nm *lullv1alpha1.NodeMaintenance) { nm.Spec.NodeName = "other" }, "a NodeMaintenance is named after its node"},
		"class with capitals":    {func(nm *lullv1alpha1.NodeMaintenance) { nm.Spec.Classes = []string{"Kernel Update"} }, "spec.classes"},
		"empty class":            {func(nm *lullv1alpha1.NodeMaintenance) { nm.Spec.Classes = nil }, "say what changes: classes"},
		"negative grace period": {func(nm *lullv1alpha1.NodeMaintenance) {
			nm.Spec.Drain = &lullv1alpha1.DrainOptions{GracePeriodSeconds: ptr.To[int64](-1)}
		}, "gracePeriodSeconds"},
		"zero drain timeout": {func(nm *lullv1alpha1.NodeMaintenance) {
			nm.Spec.Drain = &lullv1alpha1.DrainOptions{Timeout: &lullv1alpha1.Duration{}}
		}, "drain timeout must be positive"},
		"unknown escalation": {func(nm *lullv1alpha1.NodeMaintenance) {
			nm.Spec.Drain = &lullv1alpha1.DrainOptions{Escalation: "Panic"}
		}, `Unsupported value: "Panic"`},
	} {
		t.Run(name, func(t *testing.T) {
			nm := valid()
			tc.mutate(nm)
			err := cp.Client.Create(ctx, nm)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	nm := valid()
	require.NoError(t, cp.Client.Create(ctx, nm))
	defer func() { _ = cp.Client.Delete(context.Background(), nm) }()
	nm.Spec.NodeName = "adm-2"
	err := cp.Client.Update(ctx, nm)
	require.Error(t, err)
	require.Contains(t, err.Error(), "nodeName is immutable")
}

// The controller is stopped mid-drain and a new one takes over: the blocked
// drain continues, the waiting request is not let through (the budget is
// counted from the API server), the cordon and the lease stay owned.
func TestDrainerResumesAfterRestart(t *testing.T) {
	e := newDrainEnv(t)
	e.window("pool-b", func(w *lullv1alpha1.MaintenanceWindow) {
		w.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "b"}}
		w.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(1))
	})
	e.node("b1", map[string]string{"pool": "b"})
	e.node("b2", map[string]string{"pool": "b"})
	e.pods("b1", "db", 2)
	e.pods("b2", "web", 1)
	e.pdb("db", "db", 0)
	stop := e.start(nil)
	p := e.predict("kernel-update", nil, "b1").Nodes[0]
	e.label("b1", ptr.To("kernel-update"))
	e.verify(p)
	p = e.predict("kernel-update", nil, "b2").Nodes[0]
	require.Equal(t, plan.StartBudget, p.Start)
	e.label("b2", ptr.To("kernel-update"))
	e.verify(p)
	stop()

	// A watcher records every phase change: both disrupting at once is a
	// budget overrun.
	maxSeen := e.maxDisrupting()
	e.start(nil)
	nm := e.waitNM("b1", "still blocked", func(nm *lullv1alpha1.NodeMaintenance) bool { return len(nm.Status.Blockers) > 0 })
	require.Equal(t, lullv1alpha1.PhaseDraining, nm.Status.Phase)
	require.True(t, nm.Status.CordonedByLull)
	require.True(t, e.nodeObj("b1").Spec.Unschedulable)
	require.Equal(t, "lull-drainer", e.leaseHolder("b1"))

	require.Equal(t, lullv1alpha1.PhaseWaitingForBudget, e.waitNM("b2", "a phase", func(*lullv1alpha1.NodeMaintenance) bool { return true }).Status.Phase)
	pdb, err := e.cs.PolicyV1().PodDisruptionBudgets(e.ns).Get(e.ctx, "db", metav1.GetOptions{})
	require.NoError(t, err)
	e.setPDB(pdb, 2)
	e.waitNM("b1", "Drained", phaseIs(lullv1alpha1.PhaseDrained))
	e.label("b1", nil)
	e.waitNM("b1", "Completed", phaseIs(lullv1alpha1.PhaseCompleted))
	require.False(t, e.nodeObj("b1").Spec.Unschedulable)
	e.waitNM("b2", "Drained", phaseIs(lullv1alpha1.PhaseDrained))
	require.Equal(t, 1, maxSeen(), "b1 and b2 disrupted at once after the restart")
}
