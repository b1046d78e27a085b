package maintenance

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/lease"
)

// Red team (2) of the completion without an Uncordoning write for a
// completion whose trigger is a record (complete(committed=true)), and of
// the budget slot released in finishAs after the Completed write.

// rc2CrashAtCompleted kills the process as the Completed status write is
// sent (giveBack, the lease's release and the label's removal done).
func rc2CrashAtCompleted(op string, obj client.Object, _ []byte) error {
	if m, ok := obj.(*lullv1alpha1.NodeMaintenance); ok && op == "status" && m.Status.Phase == lullv1alpha1.PhaseCompleted {
		panic(errRCCrash)
	}
	return nil
}

// rc2Reserve takes n1's budget slot for the stored request (as its start
// did).
func rc2Reserve(t *testing.T, e *rcEnv) {
	t.Helper()
	r := e.reconciler(t, nil)
	res, err := r.Budget.Reserve(context.Background(), e.store, e.nm(t), budget.Request{Node: "n1", DefaultMaxUnavailable: 1})
	require.NoError(t, err)
	require.True(t, res.Free)
}

// rc2Pod puts a running ReplicaSet pod on n1 (the node was given back and
// took work again).
func rc2Pod(t *testing.T, e *rcEnv) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-0", UID: "web-0",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "rs", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	_, err := e.kube.CoreV1().Pods("shop").Create(context.Background(), pod, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, e.store.Create(context.Background(), pod.DeepCopy()))
}

// rc2LeaseReleaseFailsOnce makes the next write of a node lease (the
// release) fail with err, or kill the process (err nil).
func rc2LeaseReleaseFailsOnce(e *rcEnv, err error) {
	armed := true
	e.kube.(*kubefake.Clientset).PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if armed && (a.GetVerb() == "update" || a.GetVerb() == "delete" || a.GetVerb() == "patch") {
			armed = false
			if err == nil {
				panic(errRCCrash)
			}
			return true, nil, err
		}
		return false, nil, nil
	})
}

// rc2EvictionDeletesPod makes an eviction of n1's pod delete it, as the
// API server's does.
func rc2EvictionDeletesPod(t *testing.T, e *rcEnv) {
	t.Helper()
	kube := e.kube.(*kubefake.Clientset)
	kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "eviction" {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-0"}}
			require.NoError(t, client.IgnoreNotFound(e.store.Delete(context.Background(), pod)))
			require.NoError(t, client.IgnoreNotFound(kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "shop", "web-0")))
		}
		return false, nil, nil
	})
}

func rc2Evictions(e *rcEnv) int {
	n := 0
	for _, a := range e.kube.(*kubefake.Clientset).Actions() {
		if a.GetVerb() == "create" && a.GetSubresource() == "eviction" {
			n++
		}
	}
	return n
}

func rc2LeaseHolder(t *testing.T, e *rcEnv) string {
	t.Helper()
	l, err := e.kube.CoordinationV1().Leases(lease.DefaultNamespace).Get(context.Background(), lease.Name("n1"), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	require.NoError(t, err)
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// rc2Held reports the held phases that promise the operator a node
// cordoned (and, for Drained, empty) under lull's lease.
func rc2Held(p lullv1alpha1.MaintenancePhase) bool {
	return p == lullv1alpha1.PhaseDrained || p == lullv1alpha1.PhaseCordoned || p == lullv1alpha1.PhasePoweredOff
}

// rc2Watch runs n rounds and returns the first round's description at
// which the request says "held" (Drained/Cordoned) while its node is not
// cordoned, or "" if never.
func rc2Watch(t *testing.T, e *rcEnv, r *Reconciler, n int) string {
	t.Helper()
	for i := range n {
		_, crashed, err := e.reconcile(t, r)
		require.False(t, crashed)
		if err != nil {
			t.Logf("round %d: %v", i, err)
		}
		nm, node := e.nm(t), e.node(t)
		t.Logf("round %d: phase %s cordonedByLull %v, node cordoned %v mark %q, lease %q",
			i, nm.Status.Phase, nm.Status.CordonedByLull, node.Spec.Unschedulable,
			node.Annotations[lullv1alpha1.CordonedByAnnotation], rc2LeaseHolder(t, e))
		if rc2Held(nm.Status.Phase) && !node.Spec.Unschedulable {
			return string(nm.Status.Phase)
		}
		e.clock.Step(11 * time.Second)
	}
	return ""
}

// Promise 4 (a crash anywhere, the label removed and put back: the
// request does not claim a node it does not hold) and docs/operations.md's
// phase table ("Drained: cordoned, empty, lease held: do the maintenance
// now").
//
// The operator removes the label of a Drained request; lull gives the
// node back (uncordons it, releases the lease, removes the label) and is
// killed as the Completed write is sent: with committed=true nothing was
// written to the request before. The node, given back, takes a pod. The
// operator labels the node again (documented as "asking again"). The
// restarted drainer finds the old request Drained, cordonedByLull=true,
// without its lease. HELD: it loses the lease (WaitingForLease), takes it
// again under the gates, cordons with its mark and drains again
// (Draining): it never says Drained/Cordoned on an uncordoned node.
func TestRedteamCompletion2CrashThenRelabelIsDrainedOnASchedulableNode(t *testing.T) {
	e := newRCDrainedEnv(t)
	rc2Reserve(t, e)
	e.removeLabel(t)
	r := e.reconciler(t, rc2CrashAtCompleted)
	_, crashed, _ := e.reconcile(t, r)
	require.True(t, crashed, "the completion reached its Completed write")
	require.False(t, e.node(t).Spec.Unschedulable, "lull gave the node back before the crash")
	t.Logf("stored phase at the crash: %s (committed: no Uncordoning)", e.nm(t).Status.Phase)

	rc2Pod(t, e)
	e.patchNode(t, `{"metadata":{"labels":{"`+rcLabel+`":"kernel-update"}}}`) // the operator: maintenance again
	r = e.reconciler(t, nil)
	bad := rc2Watch(t, e, r, 12)
	require.Empty(t, bad, "the request says %s (do the maintenance now) while its node is schedulable and still runs its pod (%d eviction(s))",
		bad, rc2Evictions(e))
}

// Same, spec.complete: the change calls spec.complete "a record a restart
// finds again", but nothing in the CRD keeps it set (no oldSelf rule on
// spec.complete). The operator sets spec.complete; lull gives the node
// back (the label goes too) and is killed at the Completed write; the
// operator's manifest is re-applied (spec.complete false, the label back).
// HELD: as above, the request waits for its lease and starts over
// (cordon, drain); it never claims a held node it does not hold.
func TestRedteamCompletion2CrashThenSpecCompleteUnsetIsHeldOnASchedulableNode(t *testing.T) {
	e := newRCDrainedEnv(t)
	rc2Reserve(t, e)
	nm := e.nm(t)
	nm.Spec.Complete = true
	require.NoError(t, e.store.Update(context.Background(), nm))
	r := e.reconciler(t, rc2CrashAtCompleted)
	_, crashed, _ := e.reconcile(t, r)
	require.True(t, crashed)
	require.False(t, e.node(t).Spec.Unschedulable)
	rc2Pod(t, e)
	nm = e.nm(t)
	nm.Spec.Complete = false // re-applied as written
	require.NoError(t, e.store.Update(context.Background(), nm))
	// The label went before the crash; the operator's manifest puts it
	// back too (a request labelled by GitOps).
	e.patchNode(t, `{"metadata":{"labels":{"`+rcLabel+`":"kernel-update"}}}`)
	r = e.reconciler(t, nil)
	bad := rc2Watch(t, e, r, 12)
	require.Empty(t, bad, "the request says %s while its node is schedulable and still runs its pod (%d eviction(s))", bad, rc2Evictions(e))
}

// Same crash, but nobody puts the label back: the regression the change
// relies on ("the label's removal is a record"). The restart completes:
// Completed, finalizer gone, lease not taken again, node left uncordoned,
// the budget slot free, no eviction.
func TestRedteamCompletion2CrashAtCompletedThenRestartCompletes(t *testing.T) {
	e := newRCDrainedEnv(t)
	rc2Reserve(t, e)
	e.removeLabel(t)
	r := e.reconciler(t, rc2CrashAtCompleted)
	_, crashed, _ := e.reconcile(t, r)
	require.True(t, crashed)
	rc2Pod(t, e)
	r = e.reconciler(t, nil)
	e.rounds(t, r, 4)
	nm := e.nm(t)
	require.Equal(t, lullv1alpha1.PhaseCompleted, nm.Status.Phase)
	require.False(t, controllerutil.ContainsFinalizer(nm, Finalizer))
	require.False(t, e.node(t).Spec.Unschedulable)
	require.Empty(t, rc2LeaseHolder(t, e), "no lease taken again")
	require.Zero(t, rc2Evictions(e))
	entries, err := r.Budget.Entries(context.Background())
	require.NoError(t, err)
	require.NotContains(t, entries, "n1", "the slot is free")
}

// Promise 1 + 4, deletion: the request is deleted while Drained; lull
// gives the node back and is killed at the Completed write (no
// Uncordoning before it). An admin cordons the node meanwhile, with an
// annotation of their own. The restarted drainer completes from the
// stored Drained status (cordonedByLull=true): it keeps the admin's
// cordon and annotation, frees the slot, and lets the request go.
func TestRedteamCompletion2DeleteCrashKeepsAdminsCordonAndFinishes(t *testing.T) {
	e := newRCDrainedEnv(t)
	rc2Reserve(t, e)
	require.NoError(t, e.store.Delete(context.Background(), e.nm(t)))
	r := e.reconciler(t, rc2CrashAtCompleted)
	_, crashed, _ := e.reconcile(t, r)
	require.True(t, crashed)
	require.False(t, e.node(t).Spec.Unschedulable)
	e.patchNode(t, `{"spec":{"unschedulable":true},"metadata":{"annotations":{"admin.example/why":"disk"}}}`)
	r = e.reconciler(t, nil)
	e.rounds(t, r, 3)
	var nm lullv1alpha1.NodeMaintenance
	err := e.store.Get(context.Background(), client.ObjectKey{Name: "n1"}, &nm)
	require.True(t, apierrors.IsNotFound(err), "the deleted request went: %v (phase %s)", err, nm.Status.Phase)
	n := e.node(t)
	require.True(t, n.Spec.Unschedulable, "the admin's cordon stays")
	require.Equal(t, "disk", n.Annotations["admin.example/why"])
	require.Empty(t, rc2LeaseHolder(t, e))
	entries, err := r.Budget.Entries(context.Background())
	require.NoError(t, err)
	require.NotContains(t, entries, "n1", "the slot is free")
}

// Promise 2 + 4: the process is killed after the Completed write, as the
// budget slot's release (the ledger ConfigMap write) is sent. The slot
// must not leak forever: the restarted drainer drops the finalizer, and a
// request for another node under the same budget of 1 gets the slot (the
// ledger's pruning of finished requests).
func TestRedteamCompletion2CrashAtLedgerReleaseDoesNotLeakTheSlot(t *testing.T) {
	e := newRCDrainedEnv(t)
	rc2Reserve(t, e)
	e.removeLabel(t)
	r := e.reconciler(t, func(op string, obj client.Object, _ []byte) error {
		if _, ok := obj.(*corev1.ConfigMap); ok {
			panic(errRCCrash)
		}
		return nil
	})
	_, crashed, _ := e.reconcile(t, r)
	require.True(t, crashed, "the completion reached the slot's release")
	require.Equal(t, lullv1alpha1.PhaseCompleted, e.nm(t).Status.Phase, "Completed was written before the release")
	r = e.reconciler(t, nil)
	e.rounds(t, r, 2)
	require.False(t, controllerutil.ContainsFinalizer(e.nm(t), Finalizer))

	// Another node's request asks for the budget's one slot.
	n2 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2", Labels: map[string]string{rcLabel: "kernel-update"}}}
	nm2 := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n2", UID: "uid-n2"},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n2", Classes: []string{"kernel-update"}}}
	require.NoError(t, e.store.Create(context.Background(), n2))
	require.NoError(t, e.store.Create(context.Background(), nm2))
	nm2 = &lullv1alpha1.NodeMaintenance{}
	require.NoError(t, e.store.Get(context.Background(), client.ObjectKey{Name: "n2"}, nm2))
	r = e.reconciler(t, nil)
	res, err := r.Budget.Reserve(context.Background(), e.store, nm2, budget.Request{Node: "n2", DefaultMaxUnavailable: 1})
	require.NoError(t, err)
	require.True(t, res.Free, "the ended request's slot still counts: %+v", res)
}

// Promise 2: the slot is given back only once the stored status no
// longer holds it, on every path that ends a request through finishAs
// (label removed, spec.complete, deletion, the host steps' end, the node
// gone). At the moment of the ledger's release the stored request must
// not HoldsSlot; and the slot must be released (not kept) in the end.
func TestRedteamCompletion2SlotReleasedOnlyAfterStatusStopsHolding(t *testing.T) {
	cases := map[string]struct {
		env     func(t *testing.T) *rcEnv
		trigger func(t *testing.T, e *rcEnv)
	}{
		"label removed": {newRCDrainedEnv, func(t *testing.T, e *rcEnv) { e.removeLabel(t) }},
		"spec.complete": {newRCDrainedEnv, func(t *testing.T, e *rcEnv) {
			nm := e.nm(t)
			nm.Spec.Complete = true
			require.NoError(t, e.store.Update(context.Background(), nm))
		}},
		"deleted": {newRCDrainedEnv, func(t *testing.T, e *rcEnv) {
			require.NoError(t, e.store.Delete(context.Background(), e.nm(t)))
		}},
		"steps done": {newRCActingEnv, func(*testing.T, *rcEnv) {}},
		"node gone": {newRCDrainedEnv, func(t *testing.T, e *rcEnv) {
			require.NoError(t, e.store.Delete(context.Background(), e.node(t)))
		}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			e := c.env(t)
			rc2Reserve(t, e)
			c.trigger(t, e)
			released := 0
			r := e.reconciler(t, func(op string, obj client.Object, _ []byte) error {
				if cm, ok := obj.(*corev1.ConfigMap); ok && !hasKey(cm.Data, "n1") {
					released++
					var nm lullv1alpha1.NodeMaintenance
					if err := e.store.Get(context.Background(), client.ObjectKey{Name: "n1"}, &nm); err == nil {
						require.False(t, nm.Status.HoldsSlot(), "the slot went while the stored status (%s, cordonedByLull %v) still holds it",
							nm.Status.Phase, nm.Status.CordonedByLull)
					}
				}
				return nil
			})
			e.rounds(t, r, 3)
			entries, err := r.Budget.Entries(context.Background())
			require.NoError(t, err)
			require.NotContains(t, entries, "n1", "the slot is free in the end")
			require.Positive(t, released)
		})
	}
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// Promise 4 (a failed write): the ledger refuses the release after the
// Completed write (a conflict storm, an outage). The request is Completed
// and its finalizer gone, so no later round of it releases the slot; the
// slot must still not count against another node (pruning).
func TestRedteamCompletion2FailedLedgerReleaseDoesNotBlockTheNext(t *testing.T) {
	e := newRCDrainedEnv(t)
	rc2Reserve(t, e)
	e.removeLabel(t)
	r := e.reconciler(t, func(op string, obj client.Object, _ []byte) error {
		if _, ok := obj.(*corev1.ConfigMap); ok {
			return apierrors.NewServiceUnavailable("etcdserver: leader changed")
		}
		return nil
	})
	e.rounds(t, r, 3)
	nm := e.nm(t)
	require.Equal(t, lullv1alpha1.PhaseCompleted, nm.Status.Phase)
	entries, err := r.Budget.Entries(context.Background())
	require.NoError(t, err)
	t.Logf("ledger after the refused release: %v", entries)
	nm2 := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n2", UID: "uid-n2"},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n2", Classes: []string{"kernel-update"}}}
	require.NoError(t, e.store.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}))
	require.NoError(t, e.store.Create(context.Background(), nm2))
	require.NoError(t, e.store.Get(context.Background(), client.ObjectKey{Name: "n2"}, nm2))
	r2 := e.reconciler(t, nil)
	res, err := r2.Budget.Reserve(context.Background(), e.store, nm2, budget.Request{Node: "n2", DefaultMaxUnavailable: 1})
	require.NoError(t, err)
	require.True(t, res.Free, "the completed request's slot still counts: %+v", res)
}

// Promise 3/4: the process is killed as the lease's release is sent
// (giveBack done, nothing written to the request: committed). The label
// was removed. The restart completes: the lease is released in the end
// (not leaked), lull does not cordon again, Completed.
func TestRedteamCompletion2CrashAtLeaseReleaseReleasesItLater(t *testing.T) {
	e := newRCDrainedEnv(t)
	rc2Reserve(t, e)
	e.removeLabel(t)
	rc2LeaseReleaseFailsOnce(e, nil)
	r := e.reconciler(t, nil)
	_, crashed, _ := e.reconcile(t, r)
	require.True(t, crashed, "the completion reached the lease's release")
	require.False(t, e.node(t).Spec.Unschedulable)
	require.Equal(t, "lull-drainer", rc2LeaseHolder(t, e), "the lease is still held at the crash")
	var cordons []string
	r = e.reconciler(t, func(op string, obj client.Object, patch []byte) error {
		if _, ok := obj.(*corev1.Node); ok && strings.Contains(string(patch), `"unschedulable":true`) {
			cordons = append(cordons, string(patch))
		}
		return nil
	})
	e.rounds(t, r, 3)
	require.Equal(t, lullv1alpha1.PhaseCompleted, e.nm(t).Status.Phase)
	require.Empty(t, rc2LeaseHolder(t, e), "the lease leaked")
	require.Empty(t, cordons)
}

// Promise 4 (PoweredOff): a powered-off node's request is completed by
// the label's removal (committed: no Uncordoning); lull is killed at the
// Completed write; the operator labels the node again. The request must
// not sit PoweredOff ("lull keeps the node cordoned and leased") on a node
// lull no longer cordons.
func TestRedteamCompletion2PoweredOffCrashThenRelabel(t *testing.T) {
	e := newRCActingEnv(t)
	nm := e.nm(t)
	nm.Status.Phase = lullv1alpha1.PhasePoweredOff
	nm.Status.Actions = []lullv1alpha1.ActionStatus{{Type: lullv1alpha1.StepPowerOff, State: lullv1alpha1.ActionSucceeded,
		StartedAt: &metav1.Time{Time: t0().Add(-5 * time.Minute)}, FinishedAt: &metav1.Time{Time: t0().Add(-4 * time.Minute)}}}
	nm.Status.Decision = &lullv1alpha1.Decision{Action: lullv1alpha1.ActionDrain, Steps: []lullv1alpha1.PlannedStep{
		{Type: lullv1alpha1.ActionCordon}, {Type: lullv1alpha1.ActionDrain}, {Type: lullv1alpha1.StepPowerOff}}}
	require.NoError(t, e.store.Status().Update(context.Background(), nm))
	rc2Reserve(t, e)
	e.removeLabel(t)
	r := e.reconciler(t, rc2CrashAtCompleted)
	_, crashed, _ := e.reconcile(t, r)
	require.True(t, crashed)
	require.False(t, e.node(t).Spec.Unschedulable)
	e.patchNode(t, `{"metadata":{"labels":{"`+rcLabel+`":"kernel-update"}}}`)
	r = e.reconciler(t, nil)
	bad := rc2Watch(t, e, r, 12)
	require.Empty(t, bad, "the request says %s on a node lull no longer cordons", bad)
}

// rc2PodRunsOn reports whether web-0 still runs on n1 (not evicted).
func rc2PodRunsOn(t *testing.T, e *rcEnv) bool {
	t.Helper()
	p, err := e.kube.CoreV1().Pods("shop").Get(context.Background(), "web-0", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	require.NoError(t, err)
	return p.Spec.NodeName == "n1" && p.DeletionTimestamp == nil && rc2Evictions(e) == 0
}

// Promise 4 (a crash anywhere; the label removed and put back: no lie,
// no unasked disruption) and docs/operations.md ("Drained: cordoned,
// empty of evictable pods, the lease held: do the maintenance now").
//
// The operator removes the label of a Drained request. complete() with
// committed=true writes nothing first: it undoes lull's cordon (node
// schedulable again) and is killed as it sends the lease's release (the
// lease is still lull's, for its duration). The node, given back, takes a
// pod. The operator labels the node again. The restarted drainer reads
// the request as it was before the completion (Drained,
// cordonedByLull=true): its renewal succeeds (the lease is still held),
// keepHold takes the schedulable node for "uncordoned by someone else"
// and cordons it again, and the request stays Drained ("do the
// maintenance now") with the pod still running on it: it is never
// drained again. The old completion wrote Uncordoning first: the restart
// finished the completion instead.
//
// Fixed in the mechanism, not by the write: a held request whose cordon
// keepHold puts back drains the node again before it says Drained or
// hands out a step (drainsAgain). The same was true of any uncordon by
// someone else while lull held a Drained node.
func TestRedteamCompletion2CrashAtLeaseReleaseThenRelabelIsDrainedWithAPod(t *testing.T) {
	e := newRCDrainedEnv(t)
	rc2Reserve(t, e)
	e.removeLabel(t)
	rc2LeaseReleaseFailsOnce(e, nil)
	r := e.reconciler(t, nil)
	_, crashed, _ := e.reconcile(t, r)
	require.True(t, crashed, "the completion reached the lease's release")
	require.False(t, e.node(t).Spec.Unschedulable, "giveBack undid lull's cordon before the crash")
	t.Logf("stored phase at the crash: %s (committed: nothing written)", e.nm(t).Status.Phase)
	rc2Pod(t, e)
	e.patchNode(t, `{"metadata":{"labels":{"`+rcLabel+`":"kernel-update"}}}`) // the operator: maintenance again
	r = e.reconciler(t, nil)
	for i := range 6 {
		_, _, err := e.reconcile(t, r)
		nm, n := e.nm(t), e.node(t)
		t.Logf("round %d: phase %s, node cordoned %v, lease %q, pod runs %v, err %v", i, nm.Status.Phase, n.Spec.Unschedulable,
			rc2LeaseHolder(t, e), rc2PodRunsOn(t, e), err)
		e.clock.Step(5 * time.Second)
	}
	nm := e.nm(t)
	require.False(t, nm.Status.Phase == lullv1alpha1.PhaseDrained && rc2PodRunsOn(t, e),
		"the request says Drained (do the maintenance now) while the pod that landed after lull's uncordon still runs on the node (never drained again)")
}

// Same without a crash (promise 4: a failed write): the lease's release
// is refused once (an API server hiccup) after giveBack; the operator
// labels the node again before the next round.
//
// Fixed in the mechanism, not by the write: a held request whose cordon
// keepHold puts back drains the node again before it says Drained or
// hands out a step (drainsAgain). The same was true of any uncordon by
// someone else while lull held a Drained node.
func TestRedteamCompletion2FailedLeaseReleaseThenRelabelIsDrainedWithAPod(t *testing.T) {
	e := newRCDrainedEnv(t)
	rc2Reserve(t, e)
	e.removeLabel(t)
	rc2LeaseReleaseFailsOnce(e, apierrors.NewServiceUnavailable("etcdserver: leader changed"))
	r := e.reconciler(t, nil)
	_, _, err := e.reconcile(t, r)
	require.Error(t, err, "the lease's release failed")
	require.False(t, e.node(t).Spec.Unschedulable)
	rc2Pod(t, e)
	e.patchNode(t, `{"metadata":{"labels":{"`+rcLabel+`":"kernel-update"}}}`)
	for i := range 6 {
		e.clock.Step(5 * time.Second)
		_, _, err := e.reconcile(t, r)
		nm, n := e.nm(t), e.node(t)
		t.Logf("round %d: phase %s, node cordoned %v, lease %q, pod runs %v, err %v", i, nm.Status.Phase, n.Spec.Unschedulable,
			rc2LeaseHolder(t, e), rc2PodRunsOn(t, e), err)
	}
	nm := e.nm(t)
	require.False(t, nm.Status.Phase == lullv1alpha1.PhaseDrained && rc2PodRunsOn(t, e),
		"the request says Drained while the pod that landed after lull's uncordon still runs on the node")
}

// Promise 4 ("not disrupt a node again unasked" / not without its drain),
// the host steps: a request is Acting, its Reboot not yet run by
// lull-agent. The operator removes the label (changes their mind);
// complete() (committed, nothing written first) undoes lull's cordon and
// is killed as it releases the lease. The node takes a pod; the operator
// labels the node again. The restarted drainer finds the request Acting
// with its lease still held: it cordons the node again (keepHold) and
// goes on handing the Reboot to lull-agent, which reboots a node whose new
// pod was never evicted.
//
// Fixed in the mechanism, not by the write: a held request whose cordon
// keepHold puts back drains the node again before it says Drained or
// hands out a step (drainsAgain). The same was true of any uncordon by
// someone else while lull held a Drained node.
func TestRedteamCompletion2CrashAtLeaseReleaseThenRelabelRebootsUndrained(t *testing.T) {
	e := newRCActingEnv(t)
	nm := e.nm(t)
	nm.Status.Actions = []lullv1alpha1.ActionStatus{{Type: lullv1alpha1.StepReboot, State: lullv1alpha1.ActionPending,
		Timeout: lullv1alpha1.Duration{Duration: 10 * time.Minute}}}
	require.NoError(t, e.store.Status().Update(context.Background(), nm))
	e.patchNode(t, `{"status":{"nodeInfo":{"bootID":"boot-1"}}}`)
	rc2Reserve(t, e)
	e.removeLabel(t)
	rc2LeaseReleaseFailsOnce(e, nil)
	r := e.reconciler(t, nil)
	_, crashed, _ := e.reconcile(t, r)
	require.True(t, crashed, "the completion reached the lease's release")
	require.False(t, e.node(t).Spec.Unschedulable)
	t.Logf("stored phase at the crash: %s", e.nm(t).Status.Phase)
	rc2Pod(t, e)
	e.patchNode(t, `{"metadata":{"labels":{"`+rcLabel+`":"kernel-update"}}}`)
	r = e.reconciler(t, nil)
	for i := range 6 {
		_, _, err := e.reconcile(t, r)
		nm, n := e.nm(t), e.node(t)
		t.Logf("round %d: phase %s, actions %v, node cordoned %v, lease %q, pod runs %v, err %v", i, nm.Status.Phase, nm.Status.Actions,
			n.Spec.Unschedulable, rc2LeaseHolder(t, e), rc2PodRunsOn(t, e), err)
		e.clock.Step(5 * time.Second)
	}
	nm = e.nm(t)
	require.False(t, nm.Status.Phase == lullv1alpha1.PhaseActing && rc2PodRunsOn(t, e),
		"the request hands lull-agent its Reboot (phase Acting) while the pod that landed after lull's uncordon still runs on the node (never drained)")
}
