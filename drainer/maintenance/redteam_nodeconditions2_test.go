package maintenance

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllertest"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
)

// Red team of a0a57c7's node-conditions controller (setupNodeConditions):
// the real controller, its real event handlers and its real queue (with
// conditionsDelay), driven by fake informers standing in for the
// manager's cache; the fake client holds what the cache (and the API
// server) show.

// rt2Mgr is just enough of a manager for the builder to build and
// register the nodeconditions controller on fake informers.
type rt2Mgr struct {
	manager.Manager
	informers *informertest.FakeInformers
	runnables []manager.Runnable
}

func (m *rt2Mgr) GetScheme() *runtime.Scheme     { return m.informers.Scheme }
func (m *rt2Mgr) GetCache() cache.Cache          { return m.informers }
func (m *rt2Mgr) GetLogger() logr.Logger         { return logr.Discard() }
func (m *rt2Mgr) GetRESTMapper() meta.RESTMapper { return nil }
func (m *rt2Mgr) Add(r manager.Runnable) error   { m.runnables = append(m.runnables, r); return nil }
func (m *rt2Mgr) GetControllerOptions() config.Controller {
	return config.Controller{SkipNameValidation: ptr.To(true)}
}

// rt2Informer records the handlers the controller registers, so a test
// can hand them what a real informer may: a tombstone.
type rt2Informer struct {
	*controllertest.FakeInformer
	handlers []toolscache.ResourceEventHandler
}

func (i *rt2Informer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	i.handlers = append(i.handlers, h)
	return i.FakeInformer.AddEventHandlerWithOptions(h, o)
}

// rt2Controller starts the nodeconditions controller of r and returns
// the informers of Nodes and NodeMaintenances it watches.
func rt2Controller(t *testing.T, r *Reconciler) (nodes, nms *rt2Informer) {
	t.Helper()
	s := lullscheme.New()
	gvk := func(o client.Object) schema.GroupVersionKind {
		gvks, _, err := s.ObjectKinds(o)
		require.NoError(t, err)
		return gvks[0]
	}
	nodes = &rt2Informer{FakeInformer: controllertest.NewFakeInformer(controllertest.Synced)}
	nms = &rt2Informer{FakeInformer: controllertest.NewFakeInformer(controllertest.Synced)}
	fi := &informertest.FakeInformers{Scheme: s, InformersByGVK: map[schema.GroupVersionKind]toolscache.SharedIndexInformer{
		gvk(&corev1.Node{}): nodes, gvk(&lullv1alpha1.NodeMaintenance{}): nms,
	}}
	mgr := &rt2Mgr{informers: fi}
	require.NoError(t, r.setupNodeConditions(mgr))
	require.Len(t, mgr.runnables, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.runnables[0].Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, func() bool { return len(nodes.handlers) > 0 && len(nms.handlers) > 0 }, 5*time.Second, 10*time.Millisecond)
	return nodes, nms
}

// rt2Settles waits for what the controller writes 2 s after an event.
func rt2Settles(t *testing.T, c client.Client, want []string, msg string) {
	t.Helper()
	require.Eventually(t, func() bool { return equalStrings(rtConds(rtGetNode(t, c)), want) }, 6*time.Second, 50*time.Millisecond,
		"%s: node has %v, want %v", msg, rtConds(rtGetNode(t, c)), want)
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func rt2Request(phase lullv1alpha1.MaintenancePhase, started bool) *lullv1alpha1.NodeMaintenance {
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1", Finalizers: []string{Finalizer}},
		Spec:   lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"k"}},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: phase, Decision: &lullv1alpha1.Decision{Action: lullv1alpha1.ActionDrain}}}
	if started {
		nm.Status.StartedAt = &metav1.Time{Time: t0()}
	}
	return nm
}

// ---------------------------------------------------------------------
// Held: the controller's handlers, end to end.

// Promise: lull never leaves its own conditions behind once a request is
// gone, the drainer restarted meanwhile. The request was deleted while no
// drainer ran; the cache starts with the node (an Add) carrying lull's
// conditions and no request: they go.
func TestRedteam2StartupOrphanedConditionsRemoved(t *testing.T) {
	node := rtNode(rtReady, rtLullMIP, rtLullDrain, rtForeignMP)
	r, c := rtReconciler(t, true, nil, node)
	nodes, _ := rt2Controller(t, r)
	nodes.Add(rtGetNode(t, c))
	rt2Settles(t, c, []string{"Ready=KubeletReady", "MaintenancePlanned=FirmwareTool"}, "orphaned lull conditions at startup")
}

// Promise: --node-conditions=false after a restart removes lull's own,
// the request still in progress.
func TestRedteam2TurnedOffAtRestartRemoves(t *testing.T) {
	nm := rt2Request(lullv1alpha1.PhaseDraining, true)
	r, c := rtReconciler(t, false, nil, rtNode(rtReady, rtLullMIP, rtLullDrain), nm)
	nodes, nms := rt2Controller(t, r)
	nms.Add(nm)
	nodes.Add(rtGetNode(t, c))
	rt2Settles(t, c, []string{"Ready=KubeletReady"}, "--node-conditions=false")
}

// Promise: a request deleted (its delete seen only as a tombstone, the
// watch having missed the delete) takes lull's conditions with it.
func TestRedteam2TombstoneDeleteRemoves(t *testing.T) {
	nm := rt2Request(lullv1alpha1.PhaseDraining, true)
	r, c := rtReconciler(t, true, nil, rtNode(rtReady, rtLullMIP, rtLullDrain))
	_, nms := rt2Controller(t, r)
	for _, h := range nms.handlers {
		h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "n1", Obj: nm})
	}
	rt2Settles(t, c, []string{"Ready=KubeletReady"}, "request deleted, seen as a tombstone")
}

// Promise: a request re-created under the same name at once (seen as an
// update from the old request to the new one after a relist): the node
// shows the new request's conditions, none of the old one's.
func TestRedteam2RecreatedSameNameRewrites(t *testing.T) {
	old := rt2Request(lullv1alpha1.PhaseDraining, true)
	nu := rt2Request(lullv1alpha1.PhaseWaitingForWindow, false)
	nu.UID = "uid-n1-again"
	nu.Status.Decision = nil
	r, c := rtReconciler(t, true, nil, rtNode(rtReady, rtLullMIP, rtLullDrain), nu)
	_, nms := rt2Controller(t, r)
	nms.Update(old, nu)
	rt2Settles(t, c, []string{"Ready=KubeletReady", "MaintenancePlanned=LullWaitingForWindow"}, "request re-created")
}

// Promise: a request that ends while lull's own write of its last
// conditions is not in the cache yet: the cache catching up (lull's
// conditions appear on the cached node) looks again, and they go.
func TestRedteam2EndBeforeCacheSawOwnWrite(t *testing.T) {
	nm := rt2Request(lullv1alpha1.PhaseCompleted, true)
	r, c := rtReconciler(t, true, nil, rtNode(rtReady, rtLullMIP), nm)
	nodes, _ := rt2Controller(t, r)
	// The cache still shows the node before lull's write.
	nodes.Update(rtNode(rtReady), rtGetNode(t, c))
	rt2Settles(t, c, []string{"Ready=KubeletReady"}, "ended request, the cache caught up late")
}

// ---------------------------------------------------------------------
// Breaks.

// docs/interop.md: lull writes MaintenanceInProgress on the node of each
// started request, and writes none of a type another tool holds. When the
// other tool's condition goes, nothing looks again: the node handler only
// looks at changes of lull's own conditions (lullsOn), and the request
// does not change, so the started request's MaintenanceInProgress never
// appears (a tool reading Nodes sees a node being drained with no
// maintenance in progress for as long as the request lasts).
// Fix: in the node UpdateFunc, compare every lifecycle condition
// (lifecycleConditions' types, any reason), not lullsOn alone.
func TestRedteam2ForeignConditionGoneLullNeverWrites(t *testing.T) {
	nm := rt2Request(lullv1alpha1.PhaseDraining, true)
	r, c := rtReconciler(t, true, nil, rtNode(rtReady, rtForeignMIP), nm)
	nodes, nms := rt2Controller(t, r)
	nms.Add(nm)
	nodes.Add(rtGetNode(t, c))
	rt2Settles(t, c, []string{"Ready=KubeletReady", "MaintenanceInProgress=FirmwareTool", "DrainInProgress=LullDraining"}, "lull writes beside the other tool's type none")
	// The other tool finishes and removes its condition.
	before := rtGetNode(t, c)
	after := before.DeepCopy()
	after.Status.Conditions = []corev1.NodeCondition{after.Status.Conditions[0], after.Status.Conditions[2]}
	require.NoError(t, c.Status().Update(context.Background(), after))
	nodes.Update(before, rtGetNode(t, c))
	rt2Settles(t, c, []string{"Ready=KubeletReady", "DrainInProgress=LullDraining", "MaintenanceInProgress=LullDraining"},
		"the other tool's MaintenanceInProgress went; lull's own for its draining request is never written")
}

// docs/interop.md: lull writes MaintenancePlanned on the node of each
// waiting request. A node deleted and registered again under its name
// (a re-imaged machine, a kubelet re-registering) while its request
// waits: the new Node object has none of lull's conditions, so the node
// handler's Create ignores it, and the waiting request does not change;
// MaintenancePlanned is never written on it again. (The old code wrote
// them at each save of the request.)
// Fix: in the node CreateFunc, also enqueue a node the cache holds a
// request for (r.Client.Get of the NodeMaintenance, from the cache), or
// every created node (one cache read per node at startup).
func TestRedteam2NodeRecreatedLosesPlanned(t *testing.T) {
	nm := rt2Request(lullv1alpha1.PhaseWaitingForWindow, false)
	nm.Status.Decision = nil
	r, c := rtReconciler(t, true, nil, rtNode(rtReady, rtLullMP), nm)
	nodes, _ := rt2Controller(t, r)
	old := rtGetNode(t, c)
	require.NoError(t, c.Delete(context.Background(), old))
	nodes.Delete(old)
	fresh := rtNode(rtReady)
	fresh.UID = "node-uid-2"
	require.NoError(t, c.Create(context.Background(), fresh))
	nodes.Add(rtGetNode(t, c))
	rt2Settles(t, c, []string{"Ready=KubeletReady", "MaintenancePlanned=LullWaitingForWindow"},
		"the node came back under its name; its waiting request's MaintenancePlanned is never written on it")
}

// Promise: lull never overwrites or removes another tool's lifecycle
// condition (nor Ready). The node lull decides on (the cache) shows no
// conditions at all (a node just registered, whose kubelet's first status
// and another tool's condition the cache has not seen yet): the patch
// starts with an untested "add /status/conditions []", which in JSON
// patch replaces the whole list, so Ready and the other tool's
// DrainInProgress are erased. (conditionsPatch since b7b2637; the
// controller now decides from the cache 2 s after a request is created,
// which is exactly when a new node's status is still arriving.)
// Fix: when the list is made, test it absent first
// ({"op":"test","path":"/status/conditions","value":null}); or test
// /metadata/resourceVersion of the node read, for every patch.
func TestRedteam2EmptyCachedConditionsWipeLiveOnes(t *testing.T) {
	foreignDIP := corev1.NodeCondition{Type: corev1.NodeDrainInProgress, Status: corev1.ConditionTrue, Reason: "FirmwareTool"}
	r, c := rtReconciler(t, true, nil, rtNode())
	cached := rtGetNode(t, c) // what the cache holds: no status yet
	live := cached.DeepCopy()
	live.Status.Conditions = []corev1.NodeCondition{rtReady, foreignDIP} // the kubelet's and the other tool's writes since
	require.NoError(t, c.Status().Update(context.Background(), live))
	want := wantedOn(rt2Request(lullv1alpha1.PhaseWaitingForWindow, false))
	require.NoError(t, r.syncNodeConditions(context.Background(), cached, want, t0()))
	got := rtConds(rtGetNode(t, c))
	require.Contains(t, got, "Ready=KubeletReady", "lull's patch erased the node's Ready: %v", got)
	require.Contains(t, got, "DrainInProgress=FirmwareTool", "lull's patch erased another tool's DrainInProgress: %v", got)
}

// docs/interop.md: "A condition of the same type written by another tool
// ... lull writes none of that type beside it." The cache has not seen the
// other tool's MaintenancePlanned yet: lull's add is not tested, so it
// lands beside it (two MaintenancePlanned on the node, one True from
// each; readers taking the first or the last disagree). The next look
// keeps lull's (have[type] is lull's, foreign() only gates adds).
// Fix: test /metadata/resourceVersion of the node read in every patch that
// adds (a 422 reads the node again), or test the list's length.
func TestRedteam2StaleCacheAddsBesideForeign(t *testing.T) {
	r, c := rtReconciler(t, true, nil, rtNode(rtReady))
	cached := rtGetNode(t, c) // the cache has not seen the other tool's write
	live := cached.DeepCopy()
	live.Status.Conditions = append(live.Status.Conditions, rtForeignMP)
	require.NoError(t, c.Status().Update(context.Background(), live))
	want := wantedOn(rt2Request(lullv1alpha1.PhaseWaitingForWindow, false))
	require.NoError(t, r.syncNodeConditions(context.Background(), cached, want, t0()))
	// The next look, from the node as it is: lull keeps its own beside.
	require.NoError(t, r.syncNodeConditions(context.Background(), rtGetNode(t, c), want, t0()))
	require.Equal(t, []string{"Ready=KubeletReady", "MaintenancePlanned=FirmwareTool"}, rtConds(rtGetNode(t, c)),
		"lull wrote its MaintenancePlanned beside another tool's")
}
