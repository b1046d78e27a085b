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
	kubefake "k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/disruptors"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/lease"
)

// Red team of 4411b92: lull's cordon carries a mark (lull.dev/cordoned-by:
// the request's UID), set in the cordon's own write; giveBack undoes a
// cordon only with a JSON patch that tests the mark.
//
// Eight of these tests failed on 4411b92; the fix that followed made the
// node, not the status, say whose cordon it is: cordon() calls a cordon
// lull's only if it carries the request's mark (someone else's
// otherwise, whatever wasUnschedulable recorded), every write that marks
// carries the node's resourceVersion as read, giveBack undoes a cordon
// the cache shows marked whatever the status says, a mark found gone from
// lull's recorded cordon leaves the hold annotations too (an earlier
// giveBack removed them with it), a request waiting with its cordon drops
// the mark once the cordon is gone, and status.cordonMarked tells a
// request started before the mark (given back as before) from one after.

const mkUID = "uid-n1"

// mkDrainPlan is a plan that cordons and drains.
func mkDrainPlan() *lullv1alpha1.Decision {
	return &lullv1alpha1.Decision{Action: lullv1alpha1.ActionDrain, Steps: []lullv1alpha1.PlannedStep{
		{Type: lullv1alpha1.ActionCordon}, {Type: lullv1alpha1.ActionDrain}}}
}

// newMarkEnv: node n1 (labelled when labelled, cordoned when cordoned,
// with anns), its request (UID uid-n1) stored with status st, lull
// holding n1's lease (kube) and the cache showing it (store).
func newMarkEnv(t *testing.T, labelled, cordoned bool, anns map[string]string, st lullv1alpha1.NodeMaintenanceStatus) *rcEnv {
	t.Helper()
	now := t0()
	labels := map[string]string{}
	if labelled {
		labels[rcLabel] = "kernel-update"
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: labels, Annotations: anns},
		Spec: corev1.NodeSpec{Unschedulable: cordoned},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			NodeInfo: corev1.NodeSystemInfo{BootID: "boot-1"}}}
	if st.StartedAt == nil && st.Phase != "" && !st.Phase.Waiting() {
		st.StartedAt = &metav1.Time{Time: now.Add(-10 * time.Minute)}
	}
	if st.Decision == nil {
		st.Decision = mkDrainPlan()
	}
	nm := &lullv1alpha1.NodeMaintenance{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: mkUID, Finalizers: []string{Finalizer},
			Annotations: map[string]string{lullv1alpha1.RequestedByAnnotation: lullv1alpha1.RequestedByLabel}},
		Spec:   lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"kernel-update"}},
		Status: st}
	e := &rcEnv{kube: kubefake.NewClientset(node.DeepCopy()), clock: clocktesting.NewFakeClock(now)}
	e.store = fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(node, nm).
		WithStatusSubresource(&corev1.Node{}, &lullv1alpha1.NodeMaintenance{}).Build()
	lc := lease.New(e.kube, lease.Options{Clock: e.clock})
	_, err := lc.Acquire(context.Background(), "n1", "lull-drainer", "drain", "NodeMaintenance n1", time.Minute)
	require.NoError(t, err)
	l, err := e.kube.CoordinationV1().Leases(lc.Namespace()).Get(context.Background(), lease.Name("n1"), metav1.GetOptions{})
	require.NoError(t, err)
	cached := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.Name, Namespace: l.Namespace, UID: l.UID}, Spec: l.Spec}
	require.NoError(t, e.store.Create(context.Background(), cached))
	return e
}

// mkStarted is the status start() writes before the cordon (Cordoning,
// wasUnschedulable=false: the node was not cordoned at the start;
// cordonedByLull still false: it is set by cordon()).
func mkStarted() lullv1alpha1.NodeMaintenanceStatus {
	return lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseCordoning, WasUnschedulable: ptr.To(false), CordonMarked: true,
		NodeAnnotations: []string{}, Decision: mkDrainPlan()}
}

func (e *rcEnv) removeLabel(t *testing.T) {
	t.Helper()
	e.patchNode(t, `{"metadata":{"labels":{"`+rcLabel+`":null}}}`)
}

func (e *rcEnv) rounds(t *testing.T, r *Reconciler, n int) {
	t.Helper()
	for range n {
		_, crashed, err := e.reconcile(t, r)
		require.False(t, crashed)
		if err != nil {
			t.Logf("reconcile: %v", err)
		}
		e.clock.Step(11 * time.Second)
	}
}

// takeLease: holder takes n1's lease from lull (it expired, or was
// released).
func (e *rcEnv) takeLease(t *testing.T, holder string) {
	t.Helper()
	ls := e.kube.CoordinationV1().Leases(lease.DefaultNamespace)
	l, err := ls.Get(context.Background(), lease.Name("n1"), metav1.GetOptions{})
	require.NoError(t, err)
	l.Spec.HolderIdentity = ptr.To(holder)
	_, err = ls.Update(context.Background(), l, metav1.UpdateOptions{})
	require.NoError(t, err)
}

func mkConflict() error {
	return apierrors.NewConflict(schema.GroupResource{Group: "lull.dev", Resource: "nodemaintenances"}, "n1", errors.New("the object has been modified"))
}

// ---------------------------------------------------------------------
// Promise 1: lull never removes a cordon someone else made. Crash between
// start's status write (Cordoning, wasUnschedulable=false) and the cordon
// patch.
//
// Sequence: start() writes Cordoning with wasUnschedulable=false (the
// node was schedulable) and the process is killed as it sends the cordon
// patch (the stored state below). While lull is down an admin cordons
// the node (kubectl cordon: no mark). The restarted drainer's cordon()
// finds the node cordoned, sends no cordon, but still adds lull's mark
// (markCordon whenever !wasUnschedulable) and sets cordonedByLull=true:
// the admin's cordon now carries lull's mark. The operator removes the
// label; giveBack's tested uncordon passes (the mark is lull's) and the
// admin's cordon is removed.
//
// The mark was meant to say on the node whose cordon it is; cordon() puts
// it on a cordon lull did not make.
func TestRedteamMarkCrashBeforeCordonMarksAnAdminsCordon(t *testing.T) {
	e := newMarkEnv(t, true, false, nil, mkStarted())
	e.patchNode(t, `{"spec":{"unschedulable":true}}`) // the admin, while lull is down
	r := e.reconciler(t, nil)
	e.rounds(t, r, 2)
	t.Logf("after the restart: phase %s, cordonedByLull %v, node annotations %v", e.nm(t).Status.Phase, e.nm(t).Status.CordonedByLull, e.node(t).Annotations)
	e.removeLabel(t)
	e.rounds(t, r, 3)
	require.Equal(t, lullv1alpha1.PhaseCompleted, e.nm(t).Status.Phase)
	require.True(t, e.node(t).Spec.Unschedulable, "lull removed the cordon an admin made while lull was down (cordon() marked it lull's)")
}

// Promise 1, same root, through yield (crash between yield's giveBack
// and its status write).
//
// Sequence: stored Cordoning (wasUnschedulable=false), node schedulable.
// lull's cordon patch lands (cordon + mark) and returns Karpenter's taint,
// put on between the gate's look and the cordon: yield → giveBack (lull's
// cordon and mark removed) → lease released → the WaitingForLease write:
// process killed. The stored status keeps wasUnschedulable=false (yield
// meant to clear it). An admin cordons the node (no mark). The restarted
// drainer has no lease: LeaseLost, WaitingForLease, wasUnschedulable
// still false (this first part holds: nothing is written to the node).
// Karpenter then gives the node up (taint removed), the admin's cordon
// stays. The gate lets the request start again; start() keeps the stale
// wasUnschedulable=false, cordon() finds the node cordoned, adds lull's
// mark and records cordonedByLull=true. The label's removal then undoes
// the admin's cordon.
func TestRedteamMarkYieldCrashThenRetryRemovesAnAdminsCordon(t *testing.T) {
	e := newMarkEnv(t, true, false, nil, mkStarted())
	tainted := false
	r := e.reconciler(t, func(op string, obj client.Object, patch []byte) error {
		if _, ok := obj.(*corev1.Node); ok && op == "patch" && strings.Contains(string(patch), `"unschedulable":true`) && !tainted {
			tainted = true // Karpenter taints the node a moment before lull's cordon lands
			n := e.node(t)
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: disruptors.KarpenterDisruptedTaint, Effect: corev1.TaintEffectNoSchedule})
			require.NoError(t, e.store.Update(context.Background(), n))
		}
		if m, ok := obj.(*lullv1alpha1.NodeMaintenance); ok && op == "status" && m.Status.Phase == lullv1alpha1.PhaseWaitingForLease {
			panic(errRCCrash)
		}
		return nil
	})
	_, crashed, _ := e.reconcile(t, r)
	// Since the fix the cordon carries the node's resourceVersion as read:
	// the taint put on before it makes it a conflict, and lull never
	// cordons (before, the cordon landed, lull yielded, and the crash came
	// at the yield's status write). Either way nothing of lull's is left.
	t.Logf("crashed at the yield's status write: %v", crashed)
	require.False(t, e.node(t).Spec.Unschedulable, "no cordon of lull's is left")
	require.NotContains(t, e.node(t).Annotations, lullv1alpha1.CordonedByAnnotation)

	e.patchNode(t, `{"spec":{"unschedulable":true}}`) // an admin cordons the node
	r = e.reconciler(t, nil)
	_, crashed, err := e.reconcile(t, r)
	require.False(t, crashed)
	t.Logf("after the restart: phase %s (err %v), wasUnschedulable %v", e.nm(t).Status.Phase, err, ptr.Deref(e.nm(t).Status.WasUnschedulable, false))
	require.True(t, e.node(t).Spec.Unschedulable, "lull removed the admin's cordon (it marked it, then yielded and undid it)")
	// Karpenter gives the node up (its disruption cancelled); the admin's
	// cordon stays. The request starts again with the stale
	// wasUnschedulable=false that start() keeps.
	n := e.node(t)
	n.Spec.Taints = nil
	require.NoError(t, e.store.Update(context.Background(), n))
	e.rounds(t, r, 4)
	t.Logf("then: phase %s, cordonedByLull %v, mark %q", e.nm(t).Status.Phase, e.nm(t).Status.CordonedByLull,
		e.node(t).Annotations[lullv1alpha1.CordonedByAnnotation])
	e.removeLabel(t)
	e.rounds(t, r, 3)
	require.Equal(t, lullv1alpha1.PhaseCompleted, e.nm(t).Status.Phase)
	require.True(t, e.node(t).Spec.Unschedulable, "lull removed the admin's cordon, made while lull had yielded")
}

// Promise 1, without any crash: a stale cache at the start. The admin
// cordons the node a moment before lull starts; the informer has not
// delivered it. start() records wasUnschedulable=false from the cache,
// cordon() sends {unschedulable:true, mark} as a merge patch (no
// precondition), which lands on the admin's cordon and marks it lull's.
// The completion then removes it.
func TestRedteamMarkStaleCacheAtStartMarksAnAdminsCordon(t *testing.T) {
	e := newMarkEnv(t, true, false, nil, mkStarted())
	r := e.reconciler(t, nil)
	// The cache the round starts from shows the node schedulable: run the
	// step on that node while the API server has the admin's cordon.
	stale := e.node(t)
	e.patchNode(t, `{"spec":{"unschedulable":true}}`)
	nm := e.nm(t)
	s := r.newStep(context.Background(), nm, stale)
	r.renewals.renewed("n1", s.now)
	_, err := s.cordon(context.Background())
	require.NoError(t, err)
	t.Logf("after lull's cordon patch: mark %q on the admin's cordon", e.node(t).Annotations[lullv1alpha1.CordonedByAnnotation])
	e.removeLabel(t)
	e.rounds(t, r, 3)
	require.True(t, e.node(t).Spec.Unschedulable, "lull removed the admin's cordon (its unconditional cordon patch marked it lull's)")
}

// ---------------------------------------------------------------------
// Promise 2 (lull never leaves a node cordoned that lull cordoned) and 3
// (the mark is never left behind). The status write after the cordon is
// lost.
//
// Sequence: stored Cordoning (wasUnschedulable=false, cordonedByLull
// false, as start() writes it). cordon() patches the node (cordon +
// mark); the process is killed at the next status write (the drain's
// first round). The operator removes the label. complete() → giveBack:
// the stored cordonedByLull is false, so no uncordon is tried at all,
// although the node carries lull's cordon with lull's own mark.
func TestRedteamMarkStatusLostAfterCordonLeavesLullsCordon(t *testing.T) {
	e := newMarkEnv(t, true, false, nil, mkStarted())
	r := e.reconciler(t, func(op string, obj client.Object, _ []byte) error {
		if _, ok := obj.(*lullv1alpha1.NodeMaintenance); ok && op == "status" {
			panic(errRCCrash)
		}
		return nil
	})
	_, crashed, _ := e.reconcile(t, r)
	require.True(t, crashed)
	require.True(t, e.node(t).Spec.Unschedulable, "lull's cordon landed")
	require.Equal(t, mkUID, e.node(t).Annotations[lullv1alpha1.CordonedByAnnotation], "with lull's mark")
	require.False(t, e.nm(t).Status.CordonedByLull, "the status write that said so did not")

	e.removeLabel(t)
	r = e.reconciler(t, nil)
	e.rounds(t, r, 3)
	n := e.node(t)
	require.Equal(t, lullv1alpha1.PhaseCompleted, e.nm(t).Status.Phase)
	require.False(t, n.Spec.Unschedulable, "lull left its own (marked) cordon on a node whose request completed")
	require.NotContains(t, n.Annotations, lullv1alpha1.CordonedByAnnotation, "lull's mark was left behind")
}

// Promise 2/3 while lull holds the node: keepHold re-cordons a node
// whose pre-lull cordon an admin removed (the cordon is lull's from then
// on: cordonedByLull=true, wasUnschedulable=false, mark), in a node write
// of its own; the status write that records it loses a conflict (any
// other writer of the request). The next round's keepHold finds the node
// cordoned and, with cordonedByLull=false stored, neither restores nor
// claims anything: the hold's write records wasUnschedulable=true again.
// The completion then leaves lull's marked cordon on the node. No crash
// is needed.
func TestRedteamMarkRecordonStatusConflictLeavesLullsCordon(t *testing.T) {
	st := lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDrained, CordonMarked: true, WasUnschedulable: ptr.To(true), NodeAnnotations: []string{},
		Decision: mkDrainPlan()}
	e := newMarkEnv(t, true, false, nil, st) // the admin uncordoned the node lull found cordoned
	conflicted := false
	r := e.reconciler(t, func(op string, obj client.Object, _ []byte) error {
		if _, ok := obj.(*lullv1alpha1.NodeMaintenance); ok && op == "status" && !conflicted {
			conflicted = true
			return mkConflict()
		}
		return nil
	})
	e.rounds(t, r, 3)
	require.True(t, conflicted)
	n := e.node(t)
	require.True(t, n.Spec.Unschedulable, "keepHold restored the cordon")
	t.Logf("held: cordonedByLull %v, wasUnschedulable %v, mark %q", e.nm(t).Status.CordonedByLull,
		ptr.Deref(e.nm(t).Status.WasUnschedulable, false), n.Annotations[lullv1alpha1.CordonedByAnnotation])
	e.removeLabel(t)
	e.rounds(t, r, 3)
	n = e.node(t)
	require.Equal(t, lullv1alpha1.PhaseCompleted, e.nm(t).Status.Phase)
	require.False(t, n.Spec.Unschedulable, "lull left the cordon it put back (and marked) on the node")
	require.NotContains(t, n.Annotations, lullv1alpha1.CordonedByAnnotation, "lull's mark was left behind")
}

// ---------------------------------------------------------------------
// Promise 2, upgrade mid-request: a node cordoned by a drainer from
// before the mark (status cordonedByLull=true, wasUnschedulable=false, no
// mark on the node). keepHold adopts it, but only in a holding phase, and
// only once a reconcile gets to run(): a completion reached first
// (Uncordoning written by the old drainer; the label removed, or
// spec.complete set, during the upgrade; a request that lost its lease
// and waits with its cordon) goes straight to giveBack, whose tested
// uncordon fails: the old drainer's cordon is left for good.
func TestRedteamMarkUpgradeCompletionBeforeAdoptionLeavesOldCordon(t *testing.T) {
	for _, tc := range []struct {
		name  string
		phase lullv1alpha1.MaintenancePhase
		label bool // the label is still on (then spec.complete is set)
	}{
		{"Uncordoning written by the old drainer", lullv1alpha1.PhaseUncordoning, false},
		{"Drained, label removed during the upgrade", lullv1alpha1.PhaseDrained, false},
		{"Drained, spec.complete set during the upgrade", lullv1alpha1.PhaseDrained, true},
		{"WaitingForLease with its cordon, label removed", lullv1alpha1.PhaseWaitingForLease, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := lullv1alpha1.NodeMaintenanceStatus{Phase: tc.phase, CordonedByLull: true, WasUnschedulable: ptr.To(false),
				NodeAnnotations: []string{}, Decision: mkDrainPlan(), StartedAt: &metav1.Time{Time: t0().Add(-time.Hour)}}
			e := newMarkEnv(t, tc.label, true, nil, st)
			if tc.label {
				nm := e.nm(t)
				nm.Spec.Complete = true
				require.NoError(t, e.store.Update(context.Background(), nm))
			}
			r := e.reconciler(t, nil)
			e.rounds(t, r, 3)
			require.Equal(t, lullv1alpha1.PhaseCompleted, e.nm(t).Status.Phase)
			require.False(t, e.node(t).Spec.Unschedulable, "the cordon the old drainer made for this request was left on the node")
		})
	}
}

// The upgrade case lull does handle (regression test): the first reconcile
// after the upgrade runs the holding phase, keepHold puts the mark on the
// old drainer's cordon, and the completion undoes it.
func TestRedteamMarkUpgradeHeldNodeIsAdoptedThenUncordoned(t *testing.T) {
	st := lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDrained, CordonedByLull: true, WasUnschedulable: ptr.To(false),
		NodeAnnotations: []string{AnnotationDoNotDisrupt}, Decision: mkDrainPlan()}
	e := newMarkEnv(t, true, true, map[string]string{AnnotationDoNotDisrupt: "true"}, st)
	r := e.reconciler(t, nil)
	e.rounds(t, r, 1)
	require.Equal(t, mkUID, e.node(t).Annotations[lullv1alpha1.CordonedByAnnotation], "keepHold adopted the old cordon")
	e.removeLabel(t)
	e.rounds(t, r, 3)
	n := e.node(t)
	require.Equal(t, lullv1alpha1.PhaseCompleted, e.nm(t).Status.Phase)
	require.False(t, n.Spec.Unschedulable)
	require.Empty(t, n.Annotations)
}

// Upgrade in Cordoning (regression test): the old drainer cordoned (no
// mark) and died before the next status write; cordon() marks it and the
// completion undoes it. (The same code is what marks an admin's cordon in
// TestRedteamMarkCrashBeforeCordonMarksAnAdminsCordon: the two cases look
// the same on the node and in the status.)
func TestRedteamMarkUpgradeInCordoningIsAdopted(t *testing.T) {
	st := mkStarted()
	st.CordonMarked = false // written by a lull from before the mark
	e := newMarkEnv(t, true, true, nil, st)
	r := e.reconciler(t, nil)
	e.rounds(t, r, 2)
	e.removeLabel(t)
	e.rounds(t, r, 3)
	require.Equal(t, lullv1alpha1.PhaseCompleted, e.nm(t).Status.Phase)
	require.False(t, e.node(t).Spec.Unschedulable)
}

// ---------------------------------------------------------------------
// Regression tests of what held.

// Promise 1: a crash between giveBack's uncordon and the Completed write;
// an admin cordons the node lull gave back; the restarted drainer (the
// stored status still Drained, cordonedByLull=true) completes again
// and leaves the admin's (unmarked) cordon.
func TestRedteamMarkCrashAfterUncordonKeepsAdminsLaterCordon(t *testing.T) {
	st := lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDrained, CordonedByLull: true, CordonMarked: true, WasUnschedulable: ptr.To(false),
		NodeAnnotations: []string{AnnotationScaleDownDisabled}, Decision: mkDrainPlan()}
	e := newMarkEnv(t, false, true, map[string]string{lullv1alpha1.CordonedByAnnotation: mkUID, AnnotationScaleDownDisabled: "true"}, st)
	r := e.reconciler(t, func(op string, obj client.Object, _ []byte) error {
		if m, ok := obj.(*lullv1alpha1.NodeMaintenance); ok && op == "status" && m.Status.Phase == lullv1alpha1.PhaseCompleted {
			panic(errRCCrash)
		}
		return nil
	})
	_, crashed, _ := e.reconcile(t, r)
	require.True(t, crashed)
	n := e.node(t)
	require.False(t, n.Spec.Unschedulable)
	require.Empty(t, n.Annotations, "lull's cordon, mark and annotation went in one write")
	// The label's removal is the completion's commit point: nothing else
	// was written before the crash.
	require.Equal(t, lullv1alpha1.PhaseDrained, e.nm(t).Status.Phase)
	e.patchNode(t, `{"spec":{"unschedulable":true},"metadata":{"annotations":{"`+AnnotationScaleDownDisabled+`":"true"}}}`) // the admin's
	r = e.reconciler(t, nil)
	e.rounds(t, r, 3)
	n = e.node(t)
	require.Equal(t, lullv1alpha1.PhaseCompleted, e.nm(t).Status.Phase)
	require.True(t, n.Spec.Unschedulable, "the admin's cordon stays")
}

// Promise 3 (lull never removes someone else's annotation), same crash as
// above: giveBack's tested uncordon removed lull's cordon, mark and
// scale-down-disabled in one write; the process is killed at the
// Completed write, so the stored status is still Uncordoning with
// nodeAnnotations=[scale-down-disabled]. An admin, now that lull has
// given the node back, sets scale-down-disabled (and cordons) for their
// own reasons. The retried completion's tested uncordon fails (no mark),
// and giveBack's fallback then removes every annotation the stale status
// lists that the node carries: the admin's scale-down-disabled goes. The
// mark protects the cordon, not the hold annotations, though the
// completion's retry is the same.
func TestRedteamMarkCrashAfterUncordonRemovesAdminsLaterAnnotation(t *testing.T) {
	st := lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDrained, CordonedByLull: true, CordonMarked: true, WasUnschedulable: ptr.To(false),
		NodeAnnotations: []string{AnnotationScaleDownDisabled}, Decision: mkDrainPlan()}
	e := newMarkEnv(t, false, true, map[string]string{lullv1alpha1.CordonedByAnnotation: mkUID, AnnotationScaleDownDisabled: "true"}, st)
	r := e.reconciler(t, func(op string, obj client.Object, _ []byte) error {
		if m, ok := obj.(*lullv1alpha1.NodeMaintenance); ok && op == "status" && m.Status.Phase == lullv1alpha1.PhaseCompleted {
			panic(errRCCrash)
		}
		return nil
	})
	_, crashed, _ := e.reconcile(t, r)
	require.True(t, crashed)
	require.Empty(t, e.node(t).Annotations)
	e.patchNode(t, `{"spec":{"unschedulable":true},"metadata":{"annotations":{"`+AnnotationScaleDownDisabled+`":"true"}}}`) // the admin's
	r = e.reconciler(t, nil)
	e.rounds(t, r, 3)
	n := e.node(t)
	require.Equal(t, lullv1alpha1.PhaseCompleted, e.nm(t).Status.Phase)
	require.True(t, n.Spec.Unschedulable)
	require.Equal(t, "true", n.Annotations[AnnotationScaleDownDisabled],
		"the retried completion removed the scale-down-disabled an admin set after lull had given the node back")
}

// Promise 1/2/3 on uninstall (regression test): windDown of a held node
// undoes lull's marked cordon and its annotations; a crash at its status
// write, then an admin's cordon, and the retried windDown leaves the
// admin's cordon.
func TestRedteamMarkWindDownCrashThenAdminCordon(t *testing.T) {
	st := lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDrained, CordonedByLull: true, CordonMarked: true, WasUnschedulable: ptr.To(false),
		NodeAnnotations: []string{AnnotationDoNotDisrupt}, Decision: mkDrainPlan()}
	e := newMarkEnv(t, true, true, map[string]string{lullv1alpha1.CordonedByAnnotation: mkUID, AnnotationDoNotDisrupt: "true"}, st)
	r := e.reconciler(t, func(op string, obj client.Object, _ []byte) error {
		if _, ok := obj.(*lullv1alpha1.NodeMaintenance); ok && op == "status" {
			panic(errRCCrash)
		}
		return nil
	})
	r.Uninstall = &UninstallWatch{}
	r.Uninstall.seen.Store(true)
	_, crashed, _ := e.reconcile(t, r)
	require.True(t, crashed)
	n := e.node(t)
	require.False(t, n.Spec.Unschedulable)
	require.Empty(t, n.Annotations)
	e.patchNode(t, `{"spec":{"unschedulable":true}}`)
	r = e.reconciler(t, nil)
	r.Uninstall = &UninstallWatch{}
	r.Uninstall.seen.Store(true)
	e.rounds(t, r, 3)
	require.Equal(t, lullv1alpha1.PhaseFailed, e.nm(t).Status.Phase)
	require.True(t, e.node(t).Spec.Unschedulable, "the admin's cordon stays")
}

// Promise 2 with the stale cache of TestDrainerWindowEnd (regression
// test): lull's cordon patch landed (with its mark), the cache the next
// round reads does not show it yet, and the request is completed at once:
// the uncordon is sent whatever the cache shows and undoes it.
func TestRedteamMarkStaleCacheCompletionUndoesLullsCordon(t *testing.T) {
	st := lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDraining, CordonedByLull: true, CordonMarked: true, WasUnschedulable: ptr.To(false),
		NodeAnnotations: []string{}, Decision: mkDrainPlan()}
	e := newMarkEnv(t, false, true, map[string]string{lullv1alpha1.CordonedByAnnotation: mkUID}, st)
	r := e.reconciler(t, nil)
	stale := e.node(t)
	stale.Spec.Unschedulable = false
	stale.Annotations = nil
	_, err := r.complete(context.Background(), e.nm(t), stale, true)
	require.NoError(t, err)
	n := e.node(t)
	require.False(t, n.Spec.Unschedulable)
	require.Empty(t, n.Annotations)
}

// Promise 1: the request deleted and re-created under the same name (new
// UID) while the old one's mark is on the node: the new request's
// completion does not undo the old request's cordon.
func TestRedteamMarkNewUIDDoesNotUndoAnotherRequestsCordon(t *testing.T) {
	st := lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDrained, CordonedByLull: true, CordonMarked: true, WasUnschedulable: ptr.To(false),
		NodeAnnotations: []string{}, Decision: mkDrainPlan()}
	e := newMarkEnv(t, false, true, map[string]string{lullv1alpha1.CordonedByAnnotation: "uid-old"}, st)
	r := e.reconciler(t, nil)
	e.rounds(t, r, 3)
	n := e.node(t)
	require.Equal(t, lullv1alpha1.PhaseCompleted, e.nm(t).Status.Phase)
	require.True(t, n.Spec.Unschedulable)
	require.Equal(t, "uid-old", n.Annotations[lullv1alpha1.CordonedByAnnotation])
}

// Promise 1 with the real API server's answer to a failed test op (422
// Invalid, not the fake client's plain error): the cordon stays and the
// completion finishes.
func TestRedteamMark422OnFailedTestLeavesCordon(t *testing.T) {
	st := lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseUncordoning, CordonedByLull: true, CordonMarked: true, WasUnschedulable: ptr.To(false),
		NodeAnnotations: []string{}, Decision: mkDrainPlan()}
	e := newMarkEnv(t, false, true, nil, st)
	r := e.reconciler(t, func(op string, obj client.Object, patch []byte) error {
		if _, ok := obj.(*corev1.Node); ok && op == "patch" && strings.Contains(string(patch), `"op":"test"`) {
			return apierrors.NewInvalid(schema.GroupKind{Kind: "Node"}, "n1", nil)
		}
		return nil
	})
	e.rounds(t, r, 3)
	require.Equal(t, lullv1alpha1.PhaseCompleted, e.nm(t).Status.Phase)
	require.True(t, e.node(t).Spec.Unschedulable)
}

// Promise 2/3 across a lost uncordon response: the JSON patch lands but
// its answer is lost (timeout). The re-read finds no mark; giveBack goes
// on (not undone) and the request completes with nothing left behind.
func TestRedteamMarkLostUncordonResponse(t *testing.T) {
	st := lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDrained, CordonedByLull: true, CordonMarked: true, WasUnschedulable: ptr.To(false),
		NodeAnnotations: []string{AnnotationDoNotDisrupt}, Decision: mkDrainPlan()}
	e := newMarkEnv(t, false, true, map[string]string{lullv1alpha1.CordonedByAnnotation: mkUID, AnnotationDoNotDisrupt: "true"}, st)
	lost := false
	r := e.reconciler(t, func(op string, obj client.Object, patch []byte) error {
		if _, ok := obj.(*corev1.Node); ok && op == "patch" && strings.Contains(string(patch), `"op":"test"`) && !lost {
			lost = true
			n := e.node(t)
			require.NoError(t, e.store.Patch(context.Background(), n, client.RawPatch("application/json-patch+json", patch)))
			return apierrors.NewTimeoutError("the answer was lost", 1)
		}
		return nil
	})
	e.rounds(t, r, 3)
	require.True(t, lost)
	n := e.node(t)
	require.Equal(t, lullv1alpha1.PhaseCompleted, e.nm(t).Status.Phase)
	require.False(t, n.Spec.Unschedulable)
	require.Empty(t, n.Annotations)
}

// Promise 4: the mark is only put back with the lease. A held request
// whose lease another holder took: keepHold does not write the node.
func TestRedteamMarkNotRestoredWithoutTheLease(t *testing.T) {
	st := lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDrained, CordonedByLull: true, CordonMarked: true, WasUnschedulable: ptr.To(false),
		NodeAnnotations: []string{}, Decision: mkDrainPlan()}
	e := newMarkEnv(t, true, true, nil, st)
	// The lease expires and someone else takes it.
	e.takeLease(t, "someone-else")
	var nodeWrites []string
	r := e.reconciler(t, func(op string, obj client.Object, patch []byte) error {
		if _, ok := obj.(*corev1.Node); ok && op == "patch" {
			nodeWrites = append(nodeWrites, string(patch))
		}
		return nil
	})
	_, _, _ = e.reconcile(t, r)
	require.Empty(t, nodeWrites, "lull wrote the node without its lease")
}

// Promise 1 while lull's request waits for a lease it lost, its cordon
// still on the node (status HoldsSlot: WaitingForLease,
// cordonedByLull=true). keepHold does not run there, so nothing looks at
// the node: kubectl uncordon leaves lull's mark in place; the holder of
// the lease then cordons the node for its own work (no mark needed: the
// annotation survives). lull's completion finds its mark and removes the
// holder's cordon mid-work.
func TestRedteamMarkSurvivesAnUncordonWhileWaiting(t *testing.T) {
	st := lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseWaitingForLease, CordonedByLull: true, CordonMarked: true, WasUnschedulable: ptr.To(false),
		NodeAnnotations: []string{}, Decision: mkDrainPlan(), StartedAt: &metav1.Time{Time: t0().Add(-time.Hour)}}
	e := newMarkEnv(t, true, true, map[string]string{lullv1alpha1.CordonedByAnnotation: mkUID}, st)
	e.takeLease(t, "someone-else")
	r := e.reconciler(t, nil)
	e.rounds(t, r, 1)
	e.patchNode(t, `{"spec":{"unschedulable":false}}`) // kubectl uncordon: lull's mark stays
	e.rounds(t, r, 1)
	e.patchNode(t, `{"spec":{"unschedulable":true}}`) // the lease holder's own cordon
	e.removeLabel(t)
	e.rounds(t, r, 3)
	t.Logf("phase %s", e.nm(t).Status.Phase)
	require.True(t, e.node(t).Spec.Unschedulable, "lull removed the cordon the lease holder made after lull's was gone")
}
