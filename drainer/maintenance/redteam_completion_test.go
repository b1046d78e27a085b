package maintenance

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
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
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/lease"
)

// Red team of the one-write completion (complete.go: giveBack, lease,
// label, then a single Completed write; Uncordoning only when a step
// fails). The old completion wrote Uncordoning first: a commit point that
// a restart continued from whatever happened to the trigger meanwhile.

const rcLabel = "lull.dev/maintenance"

// errRCCrash is the panic that stands for the process being killed at the
// moment a given write is sent (the write never lands).
var errRCCrash = errors.New("redteam: process killed here")

// rcEnv is a drainer's API server (store: nodes, requests, the fencing
// lease the cache shows; kube: the node leases).
type rcEnv struct {
	store client.WithWatch
	kube  kubernetes.Interface
	clock *clocktesting.FakeClock
}

// reconciler is a freshly started drainer process on env: nothing
// remembered, a synced forecast. hook, when set, sees every write of the
// store first: returning an error fails it; it may panic(errRCCrash).
func (e *rcEnv) reconciler(t *testing.T, hook func(op string, obj client.Object, patch []byte) error) *Reconciler {
	t.Helper()
	var c client.Client = e.store
	if hook != nil {
		c = interceptor.NewClient(e.store, interceptor.Funcs{
			Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
				data, _ := p.Data(obj)
				if err := hook("patch", obj, data); err != nil {
					return err
				}
				return cl.Patch(ctx, obj, p, opts...)
			},
			SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				if err := hook("status", obj, nil); err != nil {
					return err
				}
				return cl.SubResource(sub).Update(ctx, obj, opts...)
			},
			Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				if err := hook("update", obj, nil); err != nil {
					return err
				}
				return cl.Update(ctx, obj, opts...)
			},
		})
	}
	fc := forecast.New(forecast.Options{Clock: e.clock})
	t.Cleanup(fc.Stop)
	fc.SetSynced()
	r := &Reconciler{Client: c, APIReader: c, Kube: e.kube, Metrics: NewMetrics(c), Clock: e.clock, Forecast: fc,
		Budget: &budget.Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/x", Clock: e.clock},
		Leases: lease.New(e.kube, lease.Options{Clock: e.clock})}
	r.Options.Default()
	r.Options.NodeConditions = false
	return r
}

func (e *rcEnv) reconcile(t *testing.T, r *Reconciler) (res reconcile.Result, crashed bool, err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			if p != errRCCrash { //nolint:errorlint // the sentinel itself
				panic(p)
			}
			crashed = true
		}
	}()
	res, err = r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "n1"}})
	return res, false, err
}

func (e *rcEnv) nm(t *testing.T) *lullv1alpha1.NodeMaintenance {
	t.Helper()
	var nm lullv1alpha1.NodeMaintenance
	require.NoError(t, e.store.Get(context.Background(), client.ObjectKey{Name: "n1"}, &nm))
	return &nm
}

func (e *rcEnv) node(t *testing.T) *corev1.Node {
	t.Helper()
	var n corev1.Node
	require.NoError(t, e.store.Get(context.Background(), client.ObjectKey{Name: "n1"}, &n))
	return &n
}

// patchNode is someone else (an admin, another tool) writing the node.
func (e *rcEnv) patchNode(t *testing.T, patch string) {
	t.Helper()
	n := e.node(t)
	require.NoError(t, e.store.Patch(context.Background(), n, client.RawPatch(types.MergePatchType, []byte(patch))))
}

// rcActingRequest: node n1, labelled, cordoned by lull, drained, and its
// Reboot (the plan's one host step) running; the node has come back with
// a new boot ID and is Ready, so the next reconcile ends the step and
// completes the request on its own (actionsDone): nobody removes the
// label or sets spec.complete. lull holds n1's lease (kube) and the cache
// shows it (store, for the fencing token).
func newRCActingEnv(t *testing.T) *rcEnv {
	t.Helper()
	now := t0()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{rcLabel: "kernel-update"},
		Annotations: map[string]string{lullv1alpha1.CordonedByAnnotation: "uid-n1"}},
		Spec: corev1.NodeSpec{Unschedulable: true},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			NodeInfo: corev1.NodeSystemInfo{BootID: "boot-2"}}}
	nm := &lullv1alpha1.NodeMaintenance{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1", Finalizers: []string{Finalizer},
			Annotations: map[string]string{lullv1alpha1.RequestedByAnnotation: lullv1alpha1.RequestedByLabel}},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"kernel-update"}},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseActing,
			CordonedByLull: true, CordonMarked: true, WasUnschedulable: ptr.To(false), NodeAnnotations: []string{},
			StartedAt: &metav1.Time{Time: now.Add(-10 * time.Minute)}, DrainedAt: &metav1.Time{Time: now.Add(-8 * time.Minute)},
			Decision: &lullv1alpha1.Decision{Action: lullv1alpha1.ActionDrain, Steps: []lullv1alpha1.PlannedStep{
				{Type: lullv1alpha1.ActionCordon}, {Type: lullv1alpha1.ActionDrain}, {Type: lullv1alpha1.StepReboot}}},
			Actions: []lullv1alpha1.ActionStatus{{Type: lullv1alpha1.StepReboot, State: lullv1alpha1.ActionRunning, BootID: "boot-1",
				StartedAt: &metav1.Time{Time: now.Add(-2 * time.Minute)}, Timeout: lullv1alpha1.Duration{Duration: 10 * time.Minute}}}}}
	e := &rcEnv{kube: kubefake.NewClientset(node.DeepCopy()), clock: clocktesting.NewFakeClock(now)}
	e.store = fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(node, nm).
		WithStatusSubresource(&corev1.Node{}, &lullv1alpha1.NodeMaintenance{}).Build()
	// lull holds the node's lease; the cache shows it too.
	lc := lease.New(e.kube, lease.Options{Clock: e.clock})
	_, err := lc.Acquire(context.Background(), "n1", "lull-drainer", "drain", "NodeMaintenance n1", time.Minute)
	require.NoError(t, err)
	l, err := e.kube.CoordinationV1().Leases(lc.Namespace()).Get(context.Background(), lease.Name("n1"), metav1.GetOptions{})
	require.NoError(t, err)
	cached := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.Name, Namespace: l.Namespace, UID: l.UID}, Spec: l.Spec}
	require.NoError(t, e.store.Create(context.Background(), cached))
	return e
}

// Promise: lull uncordons only a node it cordoned (docs/operations.md),
// and a crash anywhere is resumed from what the API server says.
//
// A request whose host steps are done completes on its own (actionsDone:
// no label removed, no spec.complete). The process is killed after
// giveBack (lull's cordon undone) and the lease's release, as the label's
// removal is sent. Nothing persistent says "completing" any more (the old
// Uncordoning commit point is gone, and the label is still there), so the
// restarted drainer finds a held request (Acting) whose lease is gone:
// LeaseLost, WaitingForLease, with status.cordonedByLull=true and the old
// wasUnschedulable=false kept, on a node lull no longer cordons. An admin
// cordons the node in the 10 s before the request looks again (lull gave
// it back). The request then starts again: start() keeps the stale
// wasUnschedulable=false, cordon() finds the node cordoned, sends nothing
// and sets cordonedByLull = !wasUnschedulable = true: the admin's cordon
// is now "lull's", and the completion that follows removes it. (The old
// completion resumed from Uncordoning at once, before the admin's cordon.)
//
// Fix: keep a commit point before giveBack for a completion without a
// persistent trigger (actionsDone calls complete() with neither the label
// removed nor spec.complete): write Uncordoning first there, as before.
// Defence in depth: a request that lost its lease and goes back to
// waiting should clear wasUnschedulable / cordonedByLull when the node is
// not cordoned (lull's cordon is gone), so start() records the node anew.
func TestRedteamCompletionCrashAfterActionsDoneUncordonsAnAdminsCordon(t *testing.T) {
	e := newRCActingEnv(t)
	r := e.reconciler(t, func(op string, obj client.Object, patch []byte) error {
		if _, ok := obj.(*corev1.Node); ok && op == "patch" && strings.Contains(string(patch), `"labels"`) {
			panic(errRCCrash)
		}
		return nil
	})
	_, crashed, _ := e.reconcile(t, r)
	require.True(t, crashed, "the reconcile reached the label's removal (the reboot came back: actionsDone → complete)")
	require.False(t, e.node(t).Spec.Unschedulable, "giveBack ran before the crash: lull's cordon is undone")
	_, err := e.kube.CoordinationV1().Leases(lease.DefaultNamespace).Get(context.Background(), lease.Name("n1"), metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the lease was released before the crash: %v", err)

	// The drainer restarts and looks at the request once.
	r = e.reconciler(t, nil)
	res, _, err := e.reconcile(t, r)
	after := e.nm(t)
	t.Logf("after the restart: phase %s (requeue %v, err %v), cordonedByLull %v, wasUnschedulable %v, node cordoned %v",
		after.Status.Phase, res.RequeueAfter, err, after.Status.CordonedByLull, ptr.Deref(after.Status.WasUnschedulable, false), e.node(t).Spec.Unschedulable)

	// An admin cordons the node meanwhile: lull gave it back (uncordoned,
	// no lease); the cordon is theirs.
	e.patchNode(t, `{"spec":{"unschedulable":true}}`)
	for range 5 {
		e.clock.Step(11 * time.Second)
		_, _, _ = e.reconcile(t, r)
	}
	final := e.nm(t)
	t.Logf("in the end: phase %s, cordonedByLull %v", final.Status.Phase, final.Status.CordonedByLull)
	require.True(t, e.node(t).Spec.Unschedulable,
		"lull removed the admin's cordon: after the restart the request was %s with cordonedByLull=%v on a node lull had already given back",
		after.Status.Phase, after.Status.CordonedByLull)
}

// Promise: a node is disrupted once per request, and a crash anywhere is
// resumed from what the API server says (docs/operations.md, Crash-safe).
// Same crash as above; meanwhile the node, given back, took a workload
// again. The restarted drainer should finish the completion it had begun.
// It instead starts the request over: it takes the lease again, cordons
// the node again and evicts its pods again, for a maintenance whose every
// step was done.
func TestRedteamCompletionCrashAfterActionsDoneDisruptsTheNodeAgain(t *testing.T) {
	e := newRCActingEnv(t)
	r := e.reconciler(t, func(op string, obj client.Object, patch []byte) error {
		if _, ok := obj.(*corev1.Node); ok && op == "patch" && strings.Contains(string(patch), `"labels"`) {
			panic(errRCCrash)
		}
		return nil
	})
	_, crashed, _ := e.reconcile(t, r)
	require.True(t, crashed)
	// The node is back in service: a pod lands on it.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-0", UID: "web-0",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "rs", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	_, err := e.kube.CoreV1().Pods("shop").Create(context.Background(), pod, metav1.CreateOptions{})
	require.NoError(t, err)

	var cordoned []string
	r = e.reconciler(t, func(op string, obj client.Object, patch []byte) error {
		if _, ok := obj.(*corev1.Node); ok && op == "patch" && strings.Contains(string(patch), `"unschedulable":true`) {
			cordoned = append(cordoned, string(patch))
		}
		return nil
	})
	for range 5 {
		_, _, _ = e.reconcile(t, r)
		e.clock.Step(11 * time.Second)
	}
	var evictions []string
	for _, a := range e.kube.(*kubefake.Clientset).Actions() {
		if a.GetVerb() == "create" && a.GetSubresource() == "eviction" {
			evictions = append(evictions, a.GetNamespace())
		}
	}
	nm := e.nm(t)
	require.Empty(t, cordoned, "the restarted drainer cordoned the node again (request now %s; %d pod(s) evicted again)", nm.Status.Phase, len(evictions))
	require.Empty(t, evictions, "the restarted drainer evicted the node's pods again")
	require.Equal(t, lullv1alpha1.PhaseCompleted, nm.Status.Phase)
}

// The same without a crash (promise: a controller never stalls on, nor
// is led astray by, a failed write): the API server refuses writes for a
// moment (the label's removal, then completionStuck's Uncordoning write,
// as in one etcd leader change). The request is left Acting with its
// lease released, its node uncordoned and cordonedByLull=true; once the
// API server answers again, the next reconciles do not finish the
// completion: they cordon the node again (and would evict its pods).
func TestRedteamCompletionStuckWriteLostDisruptsTheNodeAgain(t *testing.T) {
	e := newRCActingEnv(t)
	outage, hiccup := true, false
	var cordoned []string
	r := e.reconciler(t, func(op string, obj client.Object, patch []byte) error {
		if _, ok := obj.(*corev1.Node); ok && op == "patch" && strings.Contains(string(patch), `"labels"`) && outage {
			hiccup = true
		}
		if hiccup {
			return apierrors.NewServiceUnavailable("etcdserver: leader changed")
		}
		if _, ok := obj.(*corev1.Node); ok && op == "patch" && strings.Contains(string(patch), `"unschedulable":true`) {
			cordoned = append(cordoned, string(patch))
		}
		return nil
	})
	_, _, err := e.reconcile(t, r)
	require.Error(t, err, "the completion failed midway")
	require.True(t, hiccup)
	t.Logf("after the outage: phase %s (4c2959b: Acting, completionStuck's Uncordoning write refused too)", e.nm(t).Status.Phase)
	outage, hiccup = false, false
	for range 3 {
		_, _, _ = e.reconcile(t, r)
		e.clock.Step(11 * time.Second)
	}
	nm := e.nm(t)
	require.Empty(t, cordoned, "after the outage lull cordoned the node again instead of finishing the completion (request now %s)", nm.Status.Phase)
	require.Equal(t, lullv1alpha1.PhaseCompleted, nm.Status.Phase)
}

// Promise: lull uncordons only a node it cordoned; the new completion
// says each of its steps is "safe twice". The uncordon is not: giveBack
// runs, someone cordons the node (lull gave it back), and the Completed
// write loses a conflict (lull-agent, kubectl or another controller wrote
// the request meanwhile). The next reconcile completes again from the
// stored status, still cordonedByLull=true, and removes the other party's
// cordon. (The old Uncordoning-first completion did the same: Uncordoning
// was written with cordonedByLull=true. Not new, but the change's
// argument rests on it.)
//
// Fixed: lull marks its cordon in the cordon's own patch (the annotation
// lull.dev/cordoned-by, the request's UID), and giveBack undoes it with a
// JSON patch that tests the mark, so a cordon made after lull's uncordon
// (without the mark) is left alone.
func TestRedteamCompletionRetryUncordonsACordonMadeAfterGiveBack(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{lullv1alpha1.CordonedByAnnotation: "uid-n1"}},
		Spec: corev1.NodeSpec{Unschedulable: true}}
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1", Finalizers: []string{Finalizer}},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"k"}, Complete: true},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDrained, CordonedByLull: true, CordonMarked: true, WasUnschedulable: ptr.To(false),
			StartedAt: &metav1.Time{Time: t0()}, NodeAnnotations: []string{}, Decision: &lullv1alpha1.Decision{Action: lullv1alpha1.ActionDrain}}}
	e := &rcEnv{kube: kubefake.NewClientset(), clock: clocktesting.NewFakeClock(t0())}
	e.store = fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(node, nm).
		WithStatusSubresource(&corev1.Node{}, &lullv1alpha1.NodeMaintenance{}).Build()
	conflicted := false
	r := e.reconciler(t, func(op string, obj client.Object, _ []byte) error {
		if m, ok := obj.(*lullv1alpha1.NodeMaintenance); ok && op == "status" && m.Status.Phase == lullv1alpha1.PhaseCompleted && !conflicted {
			conflicted = true
			require.False(t, e.node(t).Spec.Unschedulable, "lull gave the node back before the Completed write")
			e.patchNode(t, `{"spec":{"unschedulable":true}}`) // an admin cordons it now
			return apierrors.NewConflict(schema.GroupResource{Group: "lull.dev", Resource: "nodemaintenances"}, "n1", errors.New("the object has been modified"))
		}
		return nil
	})
	for range 3 {
		_, _, _ = e.reconcile(t, r)
		e.clock.Step(time.Second)
	}
	require.True(t, conflicted)
	require.Equal(t, lullv1alpha1.PhaseCompleted, e.nm(t).Status.Phase)
	require.True(t, e.node(t).Spec.Unschedulable, "lull removed a cordon made after it had given the node back")
}

// newRCDrainedEnv: node n1 labelled, cordoned by lull and drained (phase
// Drained), lull holding its lease.
func newRCDrainedEnv(t *testing.T) *rcEnv {
	t.Helper()
	e := newRCActingEnv(t)
	nm := e.nm(t)
	nm.Status.Phase = lullv1alpha1.PhaseDrained
	nm.Status.Actions = nil
	nm.Status.Decision = &lullv1alpha1.Decision{Action: lullv1alpha1.ActionDrain, Steps: []lullv1alpha1.PlannedStep{
		{Type: lullv1alpha1.ActionCordon}, {Type: lullv1alpha1.ActionDrain}}}
	require.NoError(t, e.store.Status().Update(context.Background(), nm))
	return e
}

// Promise: lull uncordons only a node it cordoned. complete() says the
// trigger "(the label gone, spec.complete) outlives a restart, so a crash
// before that write does them again". The label does not: it is the
// operator's, and labelling the node again is the documented way to ask
// for maintenance again. The operator removes the label of a Drained
// request; the drainer gives the node back (uncordon, lease released)
// and dies before the Completed write. The operator labels the node
// again. The restarted drainer does not see a completion any more: the
// old request (Drained, cordonedByLull=true, wasUnschedulable=false from
// its first start) loses its lease, waits, and starts again with the
// stale wasUnschedulable. An admin cordoned the node meanwhile (lull had
// given it back); cordon() sends nothing and calls that cordon lull's; the
// next completion removes it. (Before the change Uncordoning was written
// first: the restart finished the completion at once.)
//
// Fix: as for actionsDone, a commit point before giveBack (Uncordoning),
// or clear wasUnschedulable when a request goes back to waiting for its
// lease on a node lull's cordon is no longer on.
func TestRedteamCompletionCrashThenRelabelUncordonsAnAdminsCordon(t *testing.T) {
	e := newRCDrainedEnv(t)
	e.patchNode(t, `{"metadata":{"labels":{"`+rcLabel+`":null}}}`) // the operator: done
	r := e.reconciler(t, func(op string, obj client.Object, _ []byte) error {
		if m, ok := obj.(*lullv1alpha1.NodeMaintenance); ok && op == "status" && m.Status.Phase == lullv1alpha1.PhaseCompleted {
			panic(errRCCrash)
		}
		return nil
	})
	_, crashed, _ := e.reconcile(t, r)
	require.True(t, crashed, "the completion reached its Completed write")
	require.False(t, e.node(t).Spec.Unschedulable, "lull gave the node back before the crash")

	e.patchNode(t, `{"metadata":{"labels":{"`+rcLabel+`":"kernel-update"}}}`) // the operator: maintenance again
	r = e.reconciler(t, nil)
	_, _, _ = e.reconcile(t, r)
	after := e.nm(t)
	t.Logf("after the restart: phase %s, cordonedByLull %v, wasUnschedulable %v", after.Status.Phase, after.Status.CordonedByLull, ptr.Deref(after.Status.WasUnschedulable, false))
	e.patchNode(t, `{"spec":{"unschedulable":true}}`) // an admin cordons the node lull gave back
	for range 4 {
		e.clock.Step(11 * time.Second)
		_, _, _ = e.reconcile(t, r)
	}
	mid := e.nm(t)
	t.Logf("then: phase %s, cordonedByLull %v", mid.Status.Phase, mid.Status.CordonedByLull)
	e.patchNode(t, `{"metadata":{"labels":{"`+rcLabel+`":null}}}`) // the operator: done again
	for range 3 {
		e.clock.Step(11 * time.Second)
		_, _, _ = e.reconcile(t, r)
	}
	require.True(t, e.node(t).Spec.Unschedulable, "lull removed the admin's cordon (the request came back as %s with cordonedByLull=%v)",
		mid.Status.Phase, mid.Status.CordonedByLull)
}
