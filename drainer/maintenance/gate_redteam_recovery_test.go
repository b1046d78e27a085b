package maintenance

import (
	"context"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/forecast"
	"lull.dev/lull/internal/gate"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/lease"
)

// Red team of 93f424e (the recovery gate counts a completion this drainer
// wrote before its cache shows it: HealthSource.Ended = Ledger.SettledAt),
// the drainer's side.

// rrEnv: nodes n1 and n2 in window "careful" (Permissive, maxUnavailable
// 1, recovery gate settleTime 2m), each labelled for maintenance with its
// request made; Ready for an hour. onReserve, when set, runs once, as a
// request's budget reservation makes its first read, that is after its
// health gates have passed (another worker of the same drainer doing
// something at that moment).
type rrEnv struct {
	store     client.WithWatch
	r         *Reconciler
	clock     *clocktesting.FakeClock
	onReserve func()
	// onHealthListed, when set, runs once just after a request's recovery
	// gate has listed the NodeMaintenances: the list it judges is older
	// than what happens in it (a lagging cache).
	onHealthListed func()
}

func newRREnv(t *testing.T) *rrEnv {
	t.Helper()
	now := t0()
	mw := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "careful"}, Spec: lullv1alpha1.MaintenanceWindowSpec{
		Strategy: lullv1alpha1.StrategyPermissive, NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "c"}},
		MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		Gates:          &lullv1alpha1.Gates{Recovery: &lullv1alpha1.RecoveryGate{SettleTime: &lullv1alpha1.Duration{Duration: 2 * time.Minute}}}}}
	objs := []client.Object{mw}
	var kubeObjs []client.Object
	for _, n := range []string{"n1", "n2"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"pool": "c", rcLabel: "kernel-update"}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
				LastTransitionTime: metav1.Time{Time: now.Add(-time.Hour)}}}}}
		nm := &lullv1alpha1.NodeMaintenance{
			ObjectMeta: metav1.ObjectMeta{Name: n, UID: types.UID("uid-" + n), Finalizers: []string{Finalizer},
				CreationTimestamp: metav1.Time{Time: now.Add(-time.Minute)},
				Annotations:       map[string]string{lullv1alpha1.RequestedByAnnotation: lullv1alpha1.RequestedByLabel}},
			Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: n, Classes: []string{"kernel-update"}}}
		objs = append(objs, node, nm)
		kubeObjs = append(kubeObjs, node.DeepCopy())
	}
	e := &rrEnv{clock: clocktesting.NewFakeClock(now)}
	e.store = fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).
		WithStatusSubresource(&corev1.Node{}, &lullv1alpha1.NodeMaintenance{}, &lullv1alpha1.MaintenanceWindow{}).Build()
	kube := kubefake.NewClientset(kubeObjs[0].(*corev1.Node), kubeObjs[1].(*corev1.Node))
	fire := func() {
		if e.onReserve != nil && strings.Contains(string(debug.Stack()), "internal/budget.(*Ledger).Reserve") {
			f := e.onReserve
			e.onReserve = nil
			f()
		}
	}
	listed := func(list client.ObjectList) {
		if _, ok := list.(*lullv1alpha1.NodeMaintenanceList); ok && e.onHealthListed != nil &&
			strings.Contains(string(debug.Stack()), "internal/gate.(*healthCheck).requests") {
			f := e.onHealthListed
			e.onHealthListed = nil
			f()
		}
	}
	c := interceptor.NewClient(e.store, interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			fire()
			return cl.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			fire()
			if err := cl.List(ctx, list, opts...); err != nil {
				return err
			}
			listed(list)
			return nil
		},
	})
	fc := forecast.New(forecast.Options{Clock: e.clock})
	t.Cleanup(fc.Stop)
	fc.SetWindow(mw)
	fc.SetSynced()
	e.r = &Reconciler{Client: c, APIReader: c, Kube: kube, Metrics: NewMetrics(c), Clock: e.clock, Forecast: fc,
		Budget: &budget.Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/x", Clock: e.clock},
		Leases: lease.New(kube, lease.Options{Clock: e.clock})}
	e.r.Options.Default()
	e.r.Options.NodeConditions = false
	return e
}

func (e *rrEnv) reconcile(t *testing.T, name string) {
	t.Helper()
	_, err := e.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
	require.NoError(t, err)
}

func (e *rrEnv) nm(t *testing.T, name string) *lullv1alpha1.NodeMaintenance {
	t.Helper()
	var nm lullv1alpha1.NodeMaintenance
	require.NoError(t, e.store.Get(context.Background(), client.ObjectKey{Name: name}, &nm))
	return &nm
}

// Attack: the recovery gate and the budget are judged one after the other
// (gate.Check: health, then budget), not atomically. n2 waits for n1's
// slot (maxUnavailable 1) and looks again by itself (its periodic look, or
// any event). Its health gate lists the requests while n1 is still
// Drained (not finished: nothing to settle). Then, before n2's budget is
// reserved, another worker completes n1: the Completed write, the slot
// released in the ledger, Settled, the next in line woken. n2's Reserve
// now finds the slot free (the ledger gave it back; the cache shows n1
// Completed, or the settled map leaves it out) and n2 starts at the very
// moment n1 finished: no settle time at all, while the recovery gate,
// asked now, says n1 is settling. SettledAt only helps a request whose
// health is judged after Settled (the one woken); a look already past its
// health gate and not yet at its Reserve goes through. (No cache lag is
// needed: the fake client here shows every write at once.)
//
// Fix direction: judge the recovery gate again after the budget slot is
// taken (and give the slot back if it now holds), or have Reserve refuse
// while a request of the request's windows finished (or was Settled)
// less than a settle time ago.
func TestRedteamRecoveryCompletionBetweenHealthAndBudgetStartsTheNextAtOnce(t *testing.T) {
	t.Skip("OPEN finding of the red team of 93f424e, not fixed yet (closing note of 2026-11-28): " +
		"the health and budget gates are not one step; remove this skip with the fix")
	e := newRREnv(t)
	for i := 0; e.nm(t, "n1").Status.Phase != lullv1alpha1.PhaseDrained; i++ {
		require.Less(t, i, 8, "n1 never drained: %+v", e.nm(t, "n1").Status)
		e.reconcile(t, "n1")
	}
	e.reconcile(t, "n2")
	require.Equal(t, lullv1alpha1.PhaseWaitingForBudget, e.nm(t, "n2").Status.Phase, "sanity: n1 holds the one slot; %s", e.nm(t, "n2").Status.WaitingFor)

	// n1's maintenance is done (spec.complete).
	n1 := e.nm(t, "n1")
	n1.Spec.Complete = true
	require.NoError(t, e.store.Update(context.Background(), n1))

	e.clock.Step(30 * time.Second) // n2's periodic look
	ran := false
	e.onReserve = func() {
		ran = true
		e.reconcile(t, "n1") // another worker: n1 completes, its slot goes back
	}
	e.reconcile(t, "n2")
	require.True(t, ran, "the hook ran inside n2's Reserve, after its health gates passed")

	n1 = e.nm(t, "n1")
	require.Equal(t, lullv1alpha1.PhaseCompleted, n1.Status.Phase)
	n2 := e.nm(t, "n2")

	// What the recovery gate says now, for n2.
	var mw lullv1alpha1.MaintenanceWindow
	require.NoError(t, e.store.Get(context.Background(), client.ObjectKey{Name: "careful"}, &mw))
	v, err := gate.Recovery(context.Background(), gate.HealthSource{Reader: e.store, Ended: e.r.Budget.SettledAt}, &mw,
		[]lullv1alpha1.NodeMaintenance{*n1}, "n2", e.clock.Now())
	require.NoError(t, err)
	require.True(t, v.Hold, "the gate, asked now, holds n2 while n1 settles: %s", v.Message)

	require.Nil(t, n2.Status.StartedAt, "n2 started (phase %s) at %s, the instant n1 completed (%s), with n1's settle time of 2m not begun: "+
		"the recovery gate, asked now, says %q", n2.Status.Phase, e.clock.Now().UTC().Format(time.RFC3339),
		n1.Status.CompletedAt.UTC().Format(time.RFC3339), v.Message)
}

// The change's own case, held: the completion lands after n2's recovery
// gate listed the requests (the list, like a lagging cache, still shows
// n1 Drained) but before it judges them. Ended (SettledAt) counts n1 as
// finished: n2 waits for n1 to settle.
func TestRedteamRecoveryCompletionTheListDoesNotShowIsCounted(t *testing.T) {
	e := newRREnv(t)
	for i := 0; e.nm(t, "n1").Status.Phase != lullv1alpha1.PhaseDrained; i++ {
		require.Less(t, i, 8, "n1 never drained: %+v", e.nm(t, "n1").Status)
		e.reconcile(t, "n1")
	}
	e.reconcile(t, "n2")
	require.Equal(t, lullv1alpha1.PhaseWaitingForBudget, e.nm(t, "n2").Status.Phase)
	n1 := e.nm(t, "n1")
	n1.Spec.Complete = true
	require.NoError(t, e.store.Update(context.Background(), n1))
	e.clock.Step(30 * time.Second)
	ran := false
	e.onHealthListed = func() {
		ran = true
		e.reconcile(t, "n1")
	}
	e.reconcile(t, "n2")
	require.True(t, ran)
	require.Equal(t, lullv1alpha1.PhaseCompleted, e.nm(t, "n1").Status.Phase)
	n2 := e.nm(t, "n2")
	require.Nil(t, n2.Status.StartedAt)
	require.Equal(t, lullv1alpha1.PhaseWaitingForGates, n2.Status.Phase, n2.Status.WaitingFor)
	require.Contains(t, n2.Status.WaitingFor, "node n1 is well since")
}

// Attack (beside the change, on the promise it serves): a request that
// fails after it started (a drain escalated to Abort, a host step that
// failed: abort(PhaseFailed)) has its startedAt cleared by abort, and the
// recovery gate counts only requests with a startedAt. docs/gates.md:
// "Every node whose request this window governed and which finished
// (phase Completed or Failed after it started ...) is judged". The node a
// failed request disrupted (cordoned, drained, maybe rebooted) and left
// unwell does not halt the wave; nor does Ended (SettledAt) help: abort
// releases the slot before its status says it holds none, so it is never
// Settled, and the gate skips it all the same once the cache shows it.
// FAILED, fixed: a request that ends in abort keeps its startedAt and
// records completedAt (step.abort).
func TestRedteamRecoveryFailedAfterStartIsNotJudged(t *testing.T) {
	e := newRREnv(t)
	for i := 0; e.nm(t, "n1").Status.Phase != lullv1alpha1.PhaseDrained; i++ {
		require.Less(t, i, 8, "n1 never drained: %+v", e.nm(t, "n1").Status)
		e.reconcile(t, "n1")
	}
	ctx := context.Background()
	nm := e.nm(t, "n1")
	var node corev1.Node
	require.NoError(t, e.store.Get(ctx, client.ObjectKey{Name: "n1"}, &node))
	s := e.r.newStep(ctx, nm, &node)
	_, err := s.abort(ctx, lullv1alpha1.PhaseFailed, "eviction refused for 1h (timeout 1h, escalation Abort)")
	require.NoError(t, err)
	failed := e.nm(t, "n1")
	require.Equal(t, lullv1alpha1.PhaseFailed, failed.Status.Phase)
	require.Contains(t, failed.Status.Windows, "careful")

	// n1 comes back NotReady 10 s after its request failed.
	require.NoError(t, e.store.Get(ctx, client.ObjectKey{Name: "n1"}, &node))
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady",
		LastTransitionTime: metav1.Time{Time: e.clock.Now().Add(10 * time.Second)}}}
	require.NoError(t, e.store.Status().Update(ctx, &node))
	e.clock.Step(20 * time.Second)

	var mw lullv1alpha1.MaintenanceWindow
	require.NoError(t, e.store.Get(ctx, client.ObjectKey{Name: "careful"}, &mw))
	v, err := gate.CheckHealth(ctx, gate.HealthSource{Reader: e.store, Ended: e.r.Budget.SettledAt},
		[]*lullv1alpha1.MaintenanceWindow{&mw}, "n2", e.clock.Now())
	require.NoError(t, err)
	require.True(t, v.Hold, "n1's request failed after it started (drained it), n1 is NotReady since 10 s after: the wave must halt; "+
		"the gate says %s (%s); the stored request has startedAt %v", v.Reason, v.Message, failed.Status.StartedAt)
}
