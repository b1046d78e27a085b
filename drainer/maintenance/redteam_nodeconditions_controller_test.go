package maintenance

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/lease"
)

// Red team of cf44d28 (node lifecycle conditions), the controller's side:
// promise 2 (lull never overwrites or removes another tool's lifecycle
// condition, and never leaves its own behind when a request ends) and
// promise 4 (a node-condition write failure never stalls a request).

var (
	rtForeignMIP = corev1.NodeCondition{Type: corev1.NodeMaintenanceInProgress, Status: corev1.ConditionTrue, Reason: "FirmwareTool", Message: "theirs"}
	rtForeignMP  = corev1.NodeCondition{Type: corev1.NodeMaintenancePlanned, Status: corev1.ConditionTrue, Reason: "FirmwareTool", Message: "theirs"}
	rtLullMP     = corev1.NodeCondition{Type: corev1.NodeMaintenancePlanned, Status: corev1.ConditionTrue, Reason: "LullWaitingForWindow", Message: "lull: NodeMaintenance n1 (k)"}
	rtLullMIP    = corev1.NodeCondition{Type: corev1.NodeMaintenanceInProgress, Status: corev1.ConditionTrue, Reason: "LullDraining", Message: "lull: NodeMaintenance n1 (k): Draining"}
	rtLullDrain  = corev1.NodeCondition{Type: corev1.NodeDrainInProgress, Status: corev1.ConditionTrue, Reason: "LullDraining", Message: "lull: NodeMaintenance n1 (k): evicting the node's pods"}
	rtReady      = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}
)

func rtNode(conds ...corev1.NodeCondition) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Conditions: conds}}
}

func rtGetNode(t *testing.T, c client.Client) *corev1.Node {
	t.Helper()
	var n corev1.Node
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "n1"}, &n))
	return &n
}

// rtConds lists a node's conditions as type=reason, in order.
func rtConds(n *corev1.Node) []string {
	var out []string
	for _, c := range n.Status.Conditions {
		out = append(out, string(c.Type)+"="+c.Reason)
	}
	return out
}

// rtLulls lists the conditions of a node whose reason is lull's.
func rtLulls(n *corev1.Node) []string {
	var out []string
	for _, c := range n.Status.Conditions {
		if strings.HasPrefix(c.Reason, ReasonPrefix) {
			out = append(out, string(c.Type)+"="+c.Reason)
		}
	}
	return out
}

// rtReconciler is a Reconciler on a fake client holding objs, enough for
// complete(), finalize() and finished(); failPatch, when it returns true,
// fails the node status patch it is given (an API server hiccup, a
// webhook timing out, the guard's parameters missing).
func rtReconciler(t *testing.T, nodeConditions bool, failPatch func() bool, objs ...client.Object) (*Reconciler, client.Client) {
	t.Helper()
	base := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).
		WithStatusSubresource(&corev1.Node{}, &lullv1alpha1.NodeMaintenance{}).Build()
	c := interceptor.NewClient(base, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			if _, ok := obj.(*corev1.Node); ok && sub == "status" && failPatch != nil && failPatch() {
				return errors.New("etcdserver: request timed out")
			}
			return cl.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	})
	r := &Reconciler{Client: c, APIReader: c, Metrics: NewMetrics(c), Clock: clocktesting.NewFakeClock(t0()),
		Budget: &budget.Ledger{Client: c, Live: c, Namespace: "lull-system", Holder: "lull-drainer/x"},
		Leases: lease.New(kubefake.NewClientset(), lease.Options{})}
	r.Options.Default()
	r.Options.NodeConditions = nodeConditions
	return r, c
}

// rtDrainedRequest is a request lull drained its node for, asked to
// complete.
func rtDrainedRequest() *lullv1alpha1.NodeMaintenance {
	return &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1", Finalizers: []string{Finalizer}},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"k"}, Complete: true},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDrained, StartedAt: &metav1.Time{Time: t0()},
			NodeAnnotations: []string{}, Decision: &lullv1alpha1.Decision{Action: lullv1alpha1.ActionDrain}}}
}

// rtReconcile runs the request's reconcile, then the node-conditions
// controller's (which the request's changes enqueue), times times; a
// failed write of the conditions is tried again at the next time, as the
// controller's queue does.
func rtReconcile(t *testing.T, r *Reconciler, times int) {
	t.Helper()
	for range times {
		_, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "n1"}})
		require.NoError(t, err)
		if err := r.syncConditionsOf(context.Background(), "n1"); err != nil {
			t.Logf("node conditions not written (tried again): %v", err)
		}
	}
}

// Promise 2 (another tool's condition is never removed). syncNodeConditions
// decides on the node it is given (the manager's cache) and sends an
// unconditional strategic merge patch keyed on the type alone. Another tool
// that writes its MaintenanceInProgress the usual way (a strategic patch by
// type) replaces lull's entry; until the cache shows that, lull's
// "$patch: delete" (its request ended) removes the other tool's condition.
// Fix: send a JSON patch with a "test" of each entry lull replaces or
// removes (index, type, reason), or the node's resourceVersion as a
// precondition, and look again on a conflict.
func TestRedteamNodeConditionsStaleCacheRemovesForeign(t *testing.T) {
	r, c := rtReconciler(t, true, nil, rtNode(rtReady, rtForeignMIP))
	cached := rtNode(rtReady, rtLullMIP) // what the cache still shows
	require.NoError(t, r.syncNodeConditions(context.Background(), cached, nil, t0()))
	require.Contains(t, rtConds(rtGetNode(t, c)), "MaintenanceInProgress=FirmwareTool",
		"lull removed another tool's MaintenanceInProgress it took for its own (stale cache)")
}

// Promise 2 (another tool's condition is never overwritten): same race,
// lull moving on (Draining → Drained) rewrites the other tool's condition
// with its own reason and message.
func TestRedteamNodeConditionsStaleCacheOverwritesForeign(t *testing.T) {
	r, c := rtReconciler(t, true, nil, rtNode(rtReady, rtForeignMIP))
	cached := rtNode(rtReady, rtLullMIP)
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"k"}}}
	st := &lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDrained, StartedAt: &metav1.Time{Time: t0()}}
	require.NoError(t, r.syncNodeConditions(context.Background(), cached, NodeConditions(nm, st, true), t0()))
	require.Contains(t, rtConds(rtGetNode(t, c)), "MaintenanceInProgress=FirmwareTool",
		"lull overwrote another tool's MaintenanceInProgress it took for its own (stale cache)")
}

// Promise 2 (another tool's condition is never removed). A node whose
// status carries two conditions of one type (the API server does not
// refuse them: a tool that appends with a JSON patch or an update, and
// lull's own entry): lull finds its own first and removes it with a
// strategic "$patch: delete", which deletes every entry of that type,
// the other tool's included.
func TestRedteamNodeConditionsDuplicateTypeDeleteTakesForeign(t *testing.T) {
	r, c := rtReconciler(t, true, nil, rtNode(rtReady, rtLullMP, rtForeignMP))
	require.NoError(t, r.syncNodeConditions(context.Background(), rtGetNode(t, c), nil, t0()))
	require.Equal(t, []string{"Ready=KubeletReady", "MaintenancePlanned=FirmwareTool"}, rtConds(rtGetNode(t, c)),
		"lull's removal of its own MaintenancePlanned took the other tool's of the same type with it")
}

// Promise 2 (lull never leaves its own behind). Same duplicate, the other
// tool's entry first: lull looks at the first entry of each type only,
// takes the type for the other tool's and never removes its own; the
// request ends and lull's MaintenancePlanned stays on the node for ever.
func TestRedteamNodeConditionsDuplicateTypeOwnLeftBehind(t *testing.T) {
	r, c := rtReconciler(t, true, nil, rtNode(rtReady, rtForeignMP, rtLullMP))
	require.NoError(t, r.syncNodeConditions(context.Background(), rtGetNode(t, c), nil, t0()))
	require.Empty(t, rtLulls(rtGetNode(t, c)), "the request ended; lull's own condition is still on the node")
}

// Promise 2 + 4: a node-condition write that fails when a request
// completes must be tried again, or lull's MaintenanceInProgress stays on
// the node for ever, saying maintenance goes on on a node given back long
// ago. (Found when the request's last save wrote them; the
// node-conditions controller now writes them, and its queue tries a
// failed write again.)
func TestRedteamNodeConditionsLastWriteLostLeavesThemForever(t *testing.T) {
	var calls atomic.Int32
	fail := func() bool { return calls.Add(1) == 1 } // the write after the completion
	r, c := rtReconciler(t, true, fail, rtNode(rtReady, rtLullMIP, rtLullDrain), rtDrainedRequest())
	rtReconcile(t, r, 1) // Spec.Complete: Completed
	var nm lullv1alpha1.NodeMaintenance
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "n1"}, &nm))
	require.Equal(t, lullv1alpha1.PhaseCompleted, nm.Status.Phase)
	require.GreaterOrEqual(t, calls.Load(), int32(1), "the completion's conditions were tried")
	rtReconcile(t, r, 3) // the API server is fine again; lull looks at the request again
	require.Empty(t, rtLulls(rtGetNode(t, c)), "the request completed; lull's conditions stay on the node for ever")
}

// Promise 2: --node-conditions turned off (a restart with the flag, a
// rollback) after lull wrote its conditions: syncNodeConditions returns
// at once, so the request completes and lull's MaintenanceInProgress and
// DrainInProgress stay on the node for ever. Fix: with the writes off,
// still remove lull's own (want nothing) instead of returning.
func TestRedteamNodeConditionsTurnedOffLeavesThemBehind(t *testing.T) {
	r, c := rtReconciler(t, false, nil, rtNode(rtReady, rtLullMIP, rtLullDrain), rtDrainedRequest())
	rtReconcile(t, r, 2)
	var nm lullv1alpha1.NodeMaintenance
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "n1"}, &nm))
	require.Equal(t, lullv1alpha1.PhaseCompleted, nm.Status.Phase)
	require.Empty(t, rtLulls(rtGetNode(t, c)), "--node-conditions=false: lull's conditions of a completed request stay on the node")
}

// Promise 2: the request is deleted without lull's finalizer running (an
// admin strips the finalizer of a request stuck in deletion, a backup
// restore, the CRD re-created): nothing looks at a node whose request is
// gone, and lull's conditions stay on it for ever.
func TestRedteamNodeConditionsRequestGoneLeavesThemBehind(t *testing.T) {
	r, c := rtReconciler(t, true, nil, rtNode(rtReady, rtLullMIP, rtLullDrain))
	rtReconcile(t, r, 2)
	require.Empty(t, rtLulls(rtGetNode(t, c)), "no request for n1; lull's conditions stay on it")
}

// Held (promise 2): a request deleted the ordinary way (lull's finalizer)
// takes lull's conditions with it, and another tool's stays.
func TestRedteamNodeConditionsDeletedRequestCleansUp(t *testing.T) {
	nm := rtDrainedRequest()
	nm.Spec.Complete = false
	nm.DeletionTimestamp = &metav1.Time{Time: t0()}
	r, c := rtReconciler(t, true, nil, rtNode(rtReady, rtLullMIP, rtForeignMP), nm)
	rtReconcile(t, r, 2)
	require.Equal(t, []string{"Ready=KubeletReady", "MaintenancePlanned=FirmwareTool"}, rtConds(rtGetNode(t, c)))
}

// Held (promise 2): an abort to Failed removes lull's conditions; another
// tool's Drained stays.
func TestRedteamNodeConditionsAbortCleansUp(t *testing.T) {
	foreignDrained := corev1.NodeCondition{Type: corev1.NodeDrained, Status: corev1.ConditionTrue, Reason: "FirmwareTool"}
	nm := rtDrainedRequest()
	nm.Spec.Complete = false
	r, c := rtReconciler(t, true, nil, rtNode(rtReady, rtLullMIP, foreignDrained), nm)
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "n1"}, nm))
	s := &step{r: r, logger: klog.Background(), now: t0(), nm: nm, node: rtGetNode(t, c), status: nm.Status.DeepCopy()}
	_, err := s.abort(context.Background(), lullv1alpha1.PhaseFailed, "drain timed out")
	require.NoError(t, err)
	require.NoError(t, r.syncConditionsOf(context.Background(), "n1"))
	require.Equal(t, []string{"Ready=KubeletReady", "Drained=FirmwareTool"}, rtConds(rtGetNode(t, c)))
}

// Held (promise 4): every node-condition write failing, the request still
// completes (the failure is logged, the request goes on).
func TestRedteamNodeConditionsFailuresNeverStall(t *testing.T) {
	r, c := rtReconciler(t, true, func() bool { return true }, rtNode(rtReady, rtLullMIP, rtLullDrain), rtDrainedRequest())
	rtReconcile(t, r, 1)
	var nm lullv1alpha1.NodeMaintenance
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "n1"}, &nm))
	require.Equal(t, lullv1alpha1.PhaseCompleted, nm.Status.Phase)
	require.False(t, rtGetNode(t, c).Spec.Unschedulable)
}
