package maintenance

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/disruptors"
	"lull.dev/lull/internal/lullscheme"
)

// Why a start writes Cordoning before lull touches the node (issue 46,
// eighth round). Dropping that write (the start recorded by the drain's
// first status write instead, lull's mark and the hold annotations it
// added recorded on the node by the cordon's own patch, and a restart
// adopting them) saved one status write per node, and its red team
// (helper 28) broke it six ways, five of them new: the stored request is
// not only a restart's record. Until it says Cordoning, the request has
// not started for everyone who reads it: the policy gate and the label
// decide again (a class that disrupts nothing ends it without giving the
// node back), the budget's cache half does not count it (a lost ledger
// entry frees its slot), the Karpenter NodePool budget and the Cluster
// API hook do not see lull disrupting the node (HoldsSlot), and a
// restarted request goes through the gates rather than cordon(), so it
// does not yield to a tool that began disrupting the node meanwhile.
// These tests keep the sequences the red team found, against the
// Cordoning commit point: a crash at the drain's first write finds the
// start recorded.

// newStartEnv: node n1, labelled, running one ReplicaSet pod, and its
// request not yet started (phase ""); of lull's, nothing on the node.
// cordoned and annotations say what others put on the node before.
func newStartEnv(t *testing.T, cordoned bool, annotations map[string]string) *rcEnv {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{rcLabel: "kernel-update"}, Annotations: annotations},
		Spec:   corev1.NodeSpec{Unschedulable: cordoned},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	nm := &lullv1alpha1.NodeMaintenance{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1", Finalizers: []string{Finalizer},
			Annotations: map[string]string{lullv1alpha1.RequestedByAnnotation: lullv1alpha1.RequestedByLabel}},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"kernel-update"}}}
	e := &rcEnv{kube: kubefake.NewClientset(node.DeepCopy()), clock: clocktesting.NewFakeClock(t0())}
	e.store = fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(node, nm).
		WithStatusSubresource(&corev1.Node{}, &lullv1alpha1.NodeMaintenance{}).Build()
	rc2Pod(t, e)
	rc2EvictionDeletesPod(t, e)
	return e
}

// startUntilCrash reconciles the fresh request until the process is
// killed as the drain's first status write (Draining) is sent: the node
// is cordoned by lull and its pod evicted. The stored request says
// Cordoning: started, holding its slot.
func startUntilCrash(t *testing.T, e *rcEnv) {
	t.Helper()
	r := e.reconciler(t, func(op string, obj client.Object, _ []byte) error {
		if m, ok := obj.(*lullv1alpha1.NodeMaintenance); ok && op == "status" && m.Status.Phase == lullv1alpha1.PhaseDraining {
			panic(errRCCrash)
		}
		return nil
	})
	for i := 0; ; i++ {
		require.Less(t, i, 5, "the request never reached its drain")
		if _, crashed, _ := e.reconcile(t, r); crashed {
			break
		}
	}
	nm := e.nm(t)
	require.Equal(t, lullv1alpha1.PhaseCordoning, nm.Status.Phase)
	require.True(t, nm.Status.HoldsSlot())
	require.NotNil(t, nm.Status.StartedAt)
	require.True(t, e.node(t).Spec.Unschedulable)
}

// ruNothingOfLulls checks that the node carries nothing lull puts on a
// node: no mark, none of the hold annotations (the test nodes had none
// before lull), and no cordon.
func ruNothingOfLulls(t *testing.T, n *corev1.Node, why string) {
	t.Helper()
	require.NotContains(t, n.Annotations, lullv1alpha1.CordonedByAnnotation, why+": lull's cordon mark was left on the node")
	for _, k := range holdAnnotations {
		require.NotContains(t, n.Annotations, k, why+": lull's hold annotation was left on the node")
	}
	require.False(t, n.Spec.Unschedulable, why+": lull's cordon was left on the node")
}

// ruLedger returns the budget ledger's data (nil when it does not exist).
func ruLedger(t *testing.T, e *rcEnv) map[string]string {
	t.Helper()
	var cm corev1.ConfigMap
	err := e.store.Get(context.Background(), client.ObjectKey{Namespace: "lull-system", Name: budget.DefaultLedgerName}, &cm)
	if err != nil {
		require.True(t, client.IgnoreNotFound(err) == nil, "%v", err)
		return nil
	}
	return cm.Data
}

// ruNonePolicy is a policy under which the class disrupts nothing.
func ruNonePolicy(class string) *lullv1alpha1.DisruptionPolicy {
	return &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "site"}, Spec: lullv1alpha1.DisruptionPolicySpec{
		Rules: []lullv1alpha1.DisruptionRule{{Name: "nothing", Class: class, Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.ActionNone}}}}}}
}

// The stored request holds its slot, for every reader of the cache (the
// budget's count, the Karpenter NodePool budget, the Cluster API hook),
// before lull's cordon reaches the node.
func TestCordoningIsRecordedBeforeTheCordon(t *testing.T) {
	e := newStartEnv(t, false, nil)
	checked := false
	r := e.reconciler(t, func(op string, obj client.Object, patch []byte) error {
		if n, ok := obj.(*corev1.Node); ok && op == "patch" && n.Name == "n1" && !checked {
			checked = true
			require.True(t, e.nm(t).Status.HoldsSlot(), "lull patched the node before the stored request held its slot: %s", patch)
		}
		return nil
	})
	for range 4 {
		_, _, err := e.reconcile(t, r)
		require.NoError(t, err)
		e.clock.Step(time.Second)
	}
	require.True(t, checked)
	require.Equal(t, lullv1alpha1.PhaseDrained, e.nm(t).Status.Phase)
}

// Promise: nothing lull puts on a node is left behind when a request
// ends. Sequence: crash at the drain's first write (n1 cordoned, its pod
// evicted); while lull is down the class's policy becomes None. Without
// the Cordoning write the restarted request was not started: the policy
// gate decided again and noDisruption ended it Completed without giving
// the node back. With it, the request keeps the decision it started with.
func TestRedteamCordoningPolicyNoneAfterCrashLeavesLullsCordon(t *testing.T) {
	e := newStartEnv(t, false, nil)
	startUntilCrash(t, e)
	r := e.reconciler(t, nil)
	r.Forecast.SetPolicy(ruNonePolicy("kernel-update"))
	e.rounds(t, r, 3)
	nm := e.nm(t)
	n := e.node(t)
	t.Logf("request %s; node cordoned %v, annotations %v, labels %v", nm.Status.Phase, n.Spec.Unschedulable, n.Annotations, n.Labels)
	if nm.Status.Phase.Finished() {
		ruNothingOfLulls(t, n, "the request ended "+string(nm.Status.Phase))
	} else {
		// Going on under the decision it started with (as before the
		// change: Drained) is fine too.
		require.True(t, nm.Status.Phase.Holding(), "phase %s", nm.Status.Phase)
		require.True(t, nm.Status.CordonedByLull)
	}
}

// Promise: as above, by the label ("a new class replaces the old until
// the request starts"). Sequence: crash at the drain's first write, then
// the node relabelled with a class that disrupts nothing. Without the
// Cordoning write the request was reclassed as not started and ended
// without giving the node back.
func TestRedteamCordoningReclassAfterCrashLeavesLullsCordon(t *testing.T) {
	e := newStartEnv(t, false, nil)
	startUntilCrash(t, e)
	e.patchNode(t, `{"metadata":{"labels":{"`+rcLabel+`":"config-reload"}}}`)
	r := e.reconciler(t, nil)
	r.Forecast.SetPolicy(ruNonePolicy("config-reload"))
	e.rounds(t, r, 4)
	nm := e.nm(t)
	n := e.node(t)
	t.Logf("request %s (classes %v); node cordoned %v, annotations %v", nm.Status.Phase, nm.Spec.Classes, n.Spec.Unschedulable, n.Annotations)
	if nm.Status.Phase.Finished() {
		ruNothingOfLulls(t, n, "the request ended "+string(nm.Status.Phase))
	} else {
		require.Equal(t, []string{"kernel-update"}, nm.Spec.Classes, "a request whose node lull cordoned was reclassed as not started")
	}
}

// Promise (docs/operations.md): the count is the ledger's entries plus
// the requests the cache shows disrupting, so a lost entry never frees a
// slot. Sequence: n1 and n2 labelled, maxUnavailable 1; crash at n1's
// first drain write; the ledger ConfigMap deleted; n2 reconciled. Without
// the Cordoning write n1's request was not counted (not HoldsSlot) and n2
// was cordoned too: two nodes down under maxUnavailable 1.
func TestRedteamCordoningLostLedgerEntryFreesTheSlot(t *testing.T) {
	e := newStartEnv(t, false, nil)
	n2 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2", Labels: map[string]string{rcLabel: "kernel-update"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	nm2 := &lullv1alpha1.NodeMaintenance{
		ObjectMeta: metav1.ObjectMeta{Name: "n2", UID: "uid-n2", Finalizers: []string{Finalizer},
			Annotations: map[string]string{lullv1alpha1.RequestedByAnnotation: lullv1alpha1.RequestedByLabel}},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n2", Classes: []string{"kernel-update"}}}
	require.NoError(t, e.store.Create(context.Background(), n2.DeepCopy()))
	require.NoError(t, e.store.Create(context.Background(), nm2))
	_, err := e.kube.CoreV1().Nodes().Create(context.Background(), n2.DeepCopy(), metav1.CreateOptions{})
	require.NoError(t, err)

	startUntilCrash(t, e)
	require.Contains(t, ruLedger(t, e), "n1", "n1's slot is in the ledger")
	// The ledger is lost (deleted by hand, a namespace restore, ...).
	require.NoError(t, e.store.Delete(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "lull-system", Name: budget.DefaultLedgerName}}))

	r := e.reconciler(t, nil)
	require.Equal(t, 1, r.Options.DefaultMaxUnavailable)
	for range 3 {
		_, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "n2"}})
		require.NoError(t, err)
		e.clock.Step(time.Second)
	}
	var got2 lullv1alpha1.NodeMaintenance
	require.NoError(t, e.store.Get(context.Background(), client.ObjectKey{Name: "n2"}, &got2))
	var node2 corev1.Node
	require.NoError(t, e.store.Get(context.Background(), client.ObjectKey{Name: "n2"}, &node2))
	t.Logf("n1: request %s, node cordoned %v; n2: request %s, node cordoned %v", e.nm(t).Status.Phase, e.node(t).Spec.Unschedulable, got2.Status.Phase, node2.Spec.Unschedulable)
	require.True(t, e.node(t).Spec.Unschedulable, "n1 is lull's, cordoned and drained")
	require.False(t, node2.Spec.Unschedulable, "n2 was cordoned too: two nodes disrupted under maxUnavailable 1 (request %s)", got2.Status.Phase)
	require.Equal(t, lullv1alpha1.PhaseWaitingForBudget, got2.Status.Phase)
}

// Promise: lull yields to a tool that began disrupting the node as lull
// started (cordon.go, yield), giving back everything at once. Sequence:
// crash at the drain's first write; Karpenter taints the node while lull
// is down. Without the Cordoning write the restarted request went through
// the gates and waited for Karpenter with lull's cordon, mark and
// do-not-disrupt still on the node.
func TestRedteamCordoningKarpenterAfterCrashIsNotYieldedTo(t *testing.T) {
	e := newStartEnv(t, false, nil)
	startUntilCrash(t, e)
	e.patchNode(t, `{"spec":{"taints":[{"key":"`+disruptors.KarpenterDisruptedTaint+`","effect":"NoSchedule"}]}}`)
	r := e.reconciler(t, nil)
	e.rounds(t, r, 2)
	nm := e.nm(t)
	n := e.node(t)
	t.Logf("request %s cordonedByLull %v; node cordoned %v, annotations %v, ledger %v", nm.Status.Phase, nm.Status.CordonedByLull, n.Spec.Unschedulable, n.Annotations, ruLedger(t, e))
	require.Equal(t, lullv1alpha1.PhaseWaitingForLease, nm.Status.Phase)
	_, tainted := disruptors.Of(n)
	require.True(t, tainted, "Karpenter's taint stays")
	require.False(t, nm.Status.CordonedByLull, "lull kept its cordon on a node Karpenter is disrupting")
	ruNothingOfLulls(t, n, "lull waits for Karpenter")
}

// Promise: nothing is left behind when the request is deleted; the
// ledger and another holder's lease are not touched. Sequence: crash at
// the drain's first write; another holder takes the lease (lull's expired
// while it was down); the request is deleted.
func TestRedteamCordoningOtherLeaseHolderThenDeleted(t *testing.T) {
	e := newStartEnv(t, false, nil)
	startUntilCrash(t, e)
	e.takeLease(t, "someone-else")
	r := e.reconciler(t, nil)
	e.rounds(t, r, 2)
	nm := e.nm(t)
	t.Logf("after the restart: %s cordonedByLull %v ledger %v", nm.Status.Phase, nm.Status.CordonedByLull, ruLedger(t, e))
	require.Equal(t, lullv1alpha1.PhaseWaitingForLease, nm.Status.Phase)
	// lull's cordon (it carries the request's mark) stays while the
	// request waits for the lease, and so does its slot (adoptMark; the
	// slot was given back with the cordon still on before).
	require.True(t, nm.Status.CordonedByLull)
	require.True(t, e.node(t).Spec.Unschedulable)
	require.True(t, nm.Status.HoldsSlot(), "the request waits with lull's cordon: it holds its slot")
	require.Contains(t, ruLedger(t, e), "n1")

	require.NoError(t, e.store.Delete(context.Background(), e.nm(t)))
	e.rounds(t, r, 3)
	var gone lullv1alpha1.NodeMaintenance
	err := e.store.Get(context.Background(), client.ObjectKey{Name: "n1"}, &gone)
	require.True(t, client.IgnoreNotFound(err) == nil && err != nil, "the request is gone: %v", err)
	ruNothingOfLulls(t, e.node(t), "the request was deleted")
	require.Equal(t, "someone-else", rc2LeaseHolder(t, e), "the other holder's lease stays")
	require.NotContains(t, ruLedger(t, e), "n1", "the slot is released")
}

// Promise: nothing is left behind when lull is uninstalled (windDown).
// Sequence: crash at the drain's first write, then WindDown.
func TestRedteamCordoningUninstallAfterCrash(t *testing.T) {
	e := newStartEnv(t, false, nil)
	startUntilCrash(t, e)
	r := e.reconciler(t, nil)
	n, err := r.WindDown(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, lullv1alpha1.PhaseFailed, e.nm(t).Status.Phase)
	ruNothingOfLulls(t, e.node(t), "lull was uninstalled")
	require.Empty(t, rc2LeaseHolder(t, e), "the lease is released")
	require.NotContains(t, ruLedger(t, e), "n1", "the slot is released")
}

// Promise: a node deleted mid-work keeps its slot until its request
// finishes, then frees it; no lease left. Sequence: crash at the drain's
// first write; the node deleted while lull is down.
func TestRedteamCordoningNodeDeletedAfterCrash(t *testing.T) {
	e := newStartEnv(t, false, nil)
	startUntilCrash(t, e)
	require.NoError(t, e.store.Delete(context.Background(), e.node(t)))
	r := e.reconciler(t, nil)
	e.rounds(t, r, 3)
	require.True(t, e.nm(t).Status.Phase.Finished(), "phase %s", e.nm(t).Status.Phase)
	require.Empty(t, rc2LeaseHolder(t, e), "the lease is released")
	require.NotContains(t, ruLedger(t, e), "n1", "the slot is released")
}

// Promise: a crash is resumed; Drained means cordoned and empty; the end
// gives everything back. Sequence: crash at the drain's first write; an
// admin uncordons the node while lull is down; the restarted drainer
// cordons again (its mark), drains, holds Drained; the label goes.
func TestRedteamCordoningAdminUncordonWhileDownThenResumed(t *testing.T) {
	e := newStartEnv(t, false, nil)
	startUntilCrash(t, e)
	e.patchNode(t, `{"spec":{"unschedulable":false}}`)
	r := e.reconciler(t, nil)
	e.rounds(t, r, 4)
	nm := e.nm(t)
	n := e.node(t)
	require.Equal(t, lullv1alpha1.PhaseDrained, nm.Status.Phase)
	require.True(t, n.Spec.Unschedulable)
	require.Equal(t, "uid-n1", n.Annotations[lullv1alpha1.CordonedByAnnotation])
	require.True(t, nm.Status.CordonedByLull)
	require.ElementsMatch(t, holdAnnotations, nm.Status.NodeAnnotations)
	e.removeLabel(t)
	e.rounds(t, r, 2)
	require.Equal(t, lullv1alpha1.PhaseCompleted, e.nm(t).Status.Phase)
	ruNothingOfLulls(t, e.node(t), "the request completed")
	require.Empty(t, rc2LeaseHolder(t, e))
	require.NotContains(t, ruLedger(t, e), "n1")
}

// Promise: lull takes for its own only a cordon carrying this request's
// mark. Sequence: n1 cordoned by an admin, carrying an old request's mark
// (uid-old); the new request never started; the label goes. The admin's
// cordon and annotation stay.
func TestRedteamCordoningOtherUIDMarkNotAdopted(t *testing.T) {
	e := newStartEnv(t, true, map[string]string{lullv1alpha1.CordonedByAnnotation: "uid-old",
		AnnotationDoNotDisrupt: "true"})
	e.removeLabel(t)
	e.rounds(t, e.reconciler(t, nil), 2)
	n := e.node(t)
	require.Equal(t, lullv1alpha1.PhaseCompleted, e.nm(t).Status.Phase)
	require.True(t, n.Spec.Unschedulable, "the admin's cordon stays")
	require.Equal(t, "true", n.Annotations[AnnotationDoNotDisrupt], "an annotation lull did not set for this request stays")
}

// Promise: another replica's reservation does not prune the slot of a
// request whose start was interrupted. Sequence: crash at the drain's
// first write; another Ledger reserves for n2 with maxUnavailable 1.
func TestRedteamCordoningLedgerNotPrunedWhileWaiting(t *testing.T) {
	e := newStartEnv(t, false, nil)
	startUntilCrash(t, e)
	nm2 := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n2", UID: "uid-n2"},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n2", Classes: []string{"kernel-update"}}}
	require.NoError(t, e.store.Create(context.Background(), nm2))
	other := &budget.Ledger{Client: e.store, Live: e.store, Namespace: "lull-system", Holder: "lull-drainer/y", Clock: e.clock}
	res, err := other.Reserve(context.Background(), e.store, nm2, budget.Request{Node: "n2", DefaultMaxUnavailable: 1})
	require.NoError(t, err)
	require.False(t, res.Free, "n2 got a slot while n1 is cordoned by lull: %+v ledger %v", res, ruLedger(t, e))
	require.Contains(t, ruLedger(t, e), "n1")
}
