package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/maintenance"
	"lull.dev/lull/drainer/windowcontroller"
	"lull.dev/lull/internal/gate"
	"lull.dev/lull/internal/plan"
)

// alertServer is a Prometheus alerts API the test sets: the alerts gate
// asks it from the drainer's window controller. It started long ago and
// has evaluated its rules since, so that its alerts are complete.
type alertServer struct {
	*httptest.Server
	mu     sync.Mutex
	firing bool
}

func newAlertServer(t *testing.T) *alertServer {
	a := &alertServer{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		switch r.URL.Path {
		case "/api/v1/status/runtimeinfo":
			fmt.Fprint(w, `{"status":"success","data":{"startTime":"2026-11-01T00:00:00Z","lastConfigTime":"2026-11-01T00:00:00Z"}}`)
			return
		case "/api/v1/rules":
			fmt.Fprint(w, `{"status":"success","data":{"groups":[]}}`)
			return
		}
		alerts := "[]"
		if a.firing {
			alerts = `[{"labels":{"alertname":"ApiErrorBudgetBurn","severity":"page"},"state":"firing","activeAt":"2026-11-21T09:00:00Z"}]`
		}
		fmt.Fprintf(w, `{"status":"success","data":{"alerts":%s}}`, alerts)
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *alertServer) fire(on bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.firing = on
}

// startWithWindows runs the drainer's request and window controllers, as
// lull-drainer does; the returned channel makes the window controller
// look at every window again (after the test steps the fake clock).
func (e *drainEnv) startWithWindows() chan event.GenericEvent {
	e.t.Helper()
	e.start(nil)
	mgr := e.manager()
	wake := make(chan event.GenericEvent, 16)
	require.NoError(e.t, (&windowcontroller.Reconciler{Client: mgr.GetClient(), Clock: e.clock, Metrics: windowcontroller.NewCollector(e.clock),
		Wake: wake, Secrets: mgr.GetAPIReader(), SecretNamespace: "lull-system"}).SetupWithManager(mgr))
	ctx, cancel := context.WithCancel(e.ctx)
	e.t.Cleanup(cancel)
	go func() { _ = mgr.Start(ctx) }()
	return wake
}

// step moves the fake clock and has the windows looked at again.
func (e *drainEnv) step(wake chan event.GenericEvent, d time.Duration) {
	e.clock.Step(d)
	wake <- event.GenericEvent{Object: &lullv1alpha1.MaintenanceWindow{}}
}

// windowCond waits for a window condition, having the window controller
// look again meanwhile (what it reads changes without waking it).
func (e *drainEnv) windowCond(wake chan event.GenericEvent, name, cond string, ok func(*metav1.Condition) bool) *metav1.Condition {
	e.t.Helper()
	var last *metav1.Condition
	require.NoError(e.t, wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case wake <- event.GenericEvent{Object: &lullv1alpha1.MaintenanceWindow{}}:
		default:
		}
		var w lullv1alpha1.MaintenanceWindow
		if err := e.c.Get(ctx, client.ObjectKey{Name: name}, &w); err != nil {
			return false, nil
		}
		last = meta.FindStatusCondition(w.Status.Conditions, cond)
		return last != nil && ok(last), nil
	}), "window %s condition %s; last %+v", name, cond, last)
	return last
}

func gatesHeld(reason string) func(*lullv1alpha1.NodeMaintenance) bool {
	return func(nm *lullv1alpha1.NodeMaintenance) bool {
		c := meta.FindStatusCondition(nm.Status.Conditions, maintenance.ConditionGatesPass)
		return nm.Status.Phase == lullv1alpha1.PhaseWaitingForGates && c != nil && c.Reason == reason
	}
}

// The alerts gate holds a node while a matching alert fires, and while
// the server cannot be asked; the request takes no cordon, lease or
// budget slot meanwhile, the preview says the same, and the node starts
// once the alert clears. An alert firing again does not stop the drain
// that started.
func TestAlertsGateHoldsTheWave(t *testing.T) {
	e := newDrainEnv(t)
	prom := newAlertServer(t)
	prom.fire(true)
	e.window("gated", func(w *lullv1alpha1.MaintenanceWindow) {
		w.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "g"}}
		w.Spec.Gates = &lullv1alpha1.Gates{Alerts: &lullv1alpha1.AlertsGate{URL: prom.URL, Matchers: []string{`severity="page"`}}}
	})
	e.node("g1", map[string]string{"pool": "g"})
	e.pods("g1", "web", 2)
	maxSeen := e.maxDisrupting()
	wake := e.startWithWindows()
	quiet := e.windowCond(wake, "gated", lullv1alpha1.WindowConditionAlertsQuiet, func(c *metav1.Condition) bool { return c.Status == metav1.ConditionFalse })
	require.Equal(t, gate.ReasonAlertsFiring, quiet.Reason)
	require.Contains(t, quiet.Message, `1 alert fires: ApiErrorBudgetBurn{severity="page"} firing since 2026-11-21T09:00:00Z`)

	res := e.predict("kernel-update", nil, "g1")
	require.Equal(t, plan.StartGates, res.Nodes[0].Start)
	e.label("g1", ptr.To("kernel-update"))
	nm := e.waitNM("g1", "held by the alerts gate", gatesHeld(gate.ReasonAlertsFiring))
	require.Equal(t, res.Nodes[0].WaitingFor, nm.Status.WaitingFor, "the preview says what holds the node")
	require.Contains(t, nm.Status.WaitingFor, "window gated's alerts gate: 1 alert fires: ApiErrorBudgetBurn")
	require.False(t, e.nodeObj("g1").Spec.Unschedulable, "a held node is not cordoned")
	require.Empty(t, e.leaseHolder("g1"), "a held node is not leased")
	require.Nil(t, nm.Status.StartedAt)

	// Unreachable: holds, saying so.
	prom.Close()
	e.step(wake, 30*time.Second)
	prom.fire(false)
	nm = e.waitNM("g1", "held: alerts unknown", gatesHeld(gate.ReasonAlertsUnknown))
	require.Contains(t, nm.Status.WaitingFor, "the window's nodes do not start until lull can ask again")

	// Reachable and quiet again: the node starts and drains.
	prom2 := newAlertServer(t)
	e.editWindow("gated", func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Gates.Alerts.URL = prom2.URL })
	e.waitNM("g1", "started", func(nm *lullv1alpha1.NodeMaintenance) bool { return nm.Status.StartedAt != nil })
	prom2.fire(true)
	e.step(wake, 30*time.Second)
	e.windowCond(wake, "gated", lullv1alpha1.WindowConditionAlertsQuiet, func(c *metav1.Condition) bool { return c.Status == metav1.ConditionFalse })
	nm = e.waitNM("g1", "Drained", phaseIs(lullv1alpha1.PhaseDrained))
	require.True(t, meta.IsStatusConditionTrue(nm.Status.Conditions, maintenance.ConditionGatesPass), "the gate passed when it started")
	require.Empty(t, nm.Status.PodDisruptionBudgets, "no budget covered the pods")
	e.label("g1", nil)
	e.waitNM("g1", "Completed", phaseIs(lullv1alpha1.PhaseCompleted))
	require.Equal(t, 1, maxSeen())
}

func (e *drainEnv) editWindow(name string, edit func(*lullv1alpha1.MaintenanceWindow)) {
	e.t.Helper()
	require.NoError(e.t, wait.PollUntilContextTimeout(e.ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var w lullv1alpha1.MaintenanceWindow
		if err := e.c.Get(ctx, client.ObjectKey{Name: name}, &w); err != nil {
			return false, err
		}
		edit(&w)
		return e.c.Update(ctx, &w) == nil, nil
	}))
}

// A pod matching a blocking selector holds the node it runs on, and only
// that node; the node starts once the pod is gone.
func TestBlockingPodsHoldTheirNode(t *testing.T) {
	e := newDrainEnv(t)
	e.window("backups", func(w *lullv1alpha1.MaintenanceWindow) {
		w.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "k"}}
		w.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(2))
		w.Spec.Gates = &lullv1alpha1.Gates{BlockingPods: []metav1.LabelSelector{{MatchLabels: map[string]string{"app": "backup"}}}}
	})
	e.node("k1", map[string]string{"pool": "k"})
	e.node("k2", map[string]string{"pool": "k"})
	e.pods("k1", "backup", 1)
	e.pods("k2", "web", 1)
	e.start(nil)
	e.label("k1", ptr.To("kernel-update"))
	e.label("k2", ptr.To("kernel-update"))
	nm := e.waitNM("k1", "held by a blocking pod", gatesHeld(gate.ReasonBlockingPods))
	require.Equal(t, fmt.Sprintf("window backups's blockingPods: %s/backup-k1-0 run on node k1", e.ns), nm.Status.WaitingFor)
	e.waitNM("k2", "Drained", phaseIs(lullv1alpha1.PhaseDrained))
	require.Equal(t, 1, e.podsOn("k1"), "the blocking pod was not evicted")
	require.NoError(t, e.cs.CoreV1().Pods(e.ns).Delete(e.ctx, "backup-k1-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	e.waitNM("k1", "Drained", phaseIs(lullv1alpha1.PhaseDrained))
}

func setReady(t *testing.T, e *drainEnv, node string, status corev1.ConditionStatus, since time.Time) {
	t.Helper()
	require.NoError(t, wait.PollUntilContextTimeout(e.ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := e.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "Test", Message: "set by the test",
			LastHeartbeatTime: metav1.Time{Time: since}, LastTransitionTime: metav1.Time{Time: since}}}
		_, err = e.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err == nil, nil
	}))
}

// The recovery gate: the next node waits until the one the window
// finished has stayed well for the settle time; a finished node that
// comes back unwell halts the wave (the window's Recovered condition
// names it) until it is well again for the settle time. The budgets of
// its evicted pods are recorded for the gate.
func TestRecoveryGateHaltsTheWave(t *testing.T) {
	e := newDrainEnv(t)
	e.window("careful", func(w *lullv1alpha1.MaintenanceWindow) {
		w.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "c"}}
		w.Spec.Gates = &lullv1alpha1.Gates{Recovery: &lullv1alpha1.RecoveryGate{SettleTime: &lullv1alpha1.Duration{Duration: time.Minute}}}
	})
	for _, n := range []string{"c1", "c2"} {
		e.node(n, map[string]string{"pool": "c"})
		setReady(t, e, n, corev1.ConditionTrue, drainT0.Add(-time.Hour))
		e.pods(n, "shop", 1)
	}
	e.pdb("shop", "shop", 1)
	maxSeen := e.maxDisrupting()
	wake := e.startWithWindows()
	e.label("c1", ptr.To("kernel-update"))
	nm := e.waitNM("c1", "Drained", phaseIs(lullv1alpha1.PhaseDrained))
	require.Equal(t, []string{e.ns + "/shop"}, nm.Status.PodDisruptionBudgets, "the budget that covered the evicted pod")
	// The eviction counted the budget down; no disruption controller runs
	// here to count it up again once the pod is replaced: the test does.
	shop, err := e.cs.PolicyV1().PodDisruptionBudgets(e.ns).Get(e.ctx, "shop", metav1.GetOptions{})
	require.NoError(t, err)
	e.setPDB(shop, 1)
	e.label("c2", ptr.To("kernel-update"))
	e.label("c1", nil)
	e.waitNM("c1", "Completed", phaseIs(lullv1alpha1.PhaseCompleted))

	// c1 came back unwell: the wave halts.
	setReady(t, e, "c1", corev1.ConditionFalse, e.clock.Now().Add(10*time.Second))
	e.step(wake, 0)
	nm = e.waitNM("c2", "halted by c1", gatesHeld(gate.ReasonNodeUnwell))
	require.Contains(t, nm.Status.WaitingFor, "window careful's recovery gate halts the wave: node c1 came back unwell after its maintenance")
	require.Contains(t, nm.Status.WaitingFor, "Ready is False since")
	rec := e.windowCond(wake, "careful", lullv1alpha1.WindowConditionRecovered, func(c *metav1.Condition) bool { return c.Reason == gate.ReasonNodeUnwell })
	require.Equal(t, metav1.ConditionFalse, rec.Status)
	require.Contains(t, rec.Message, "node c1 came back unwell")
	res := e.predict("kernel-update", nil, "c2")
	require.Equal(t, plan.StartGates, res.Nodes[0].Start, "the preview judges the gate as the drainer does")
	require.Equal(t, nm.Status.WaitingFor, res.Nodes[0].WaitingFor)

	// Well again: it settles for a minute from then, and the wave goes on.
	setReady(t, e, "c1", corev1.ConditionTrue, e.clock.Now().Add(20*time.Second))
	e.step(wake, 30*time.Second)
	nm = e.waitNM("c2", "settling", gatesHeld(gate.ReasonSettling))
	require.Contains(t, nm.Status.WaitingFor, "node c1 is well since")
	require.Nil(t, nm.Status.StartedAt)
	e.step(wake, time.Minute)
	e.waitNM("c2", "Drained", phaseIs(lullv1alpha1.PhaseDrained))
	e.windowCond(wake, "careful", lullv1alpha1.WindowConditionRecovered, func(c *metav1.Condition) bool { return c.Status == metav1.ConditionTrue })
	require.Equal(t, 1, maxSeen())
}

// A gate removed from the window lets its held node start, and the
// request no longer shows a gate condition (the windows have none).
func TestRemovedGateLeavesNoCondition(t *testing.T) {
	e := newDrainEnv(t)
	e.window("was-gated", func(w *lullv1alpha1.MaintenanceWindow) {
		w.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "r"}}
		w.Spec.Gates = &lullv1alpha1.Gates{BlockingPods: []metav1.LabelSelector{{MatchLabels: map[string]string{"app": "backup"}}}}
	})
	e.node("r1", map[string]string{"pool": "r"})
	e.pods("r1", "backup", 1)
	e.start(nil)
	e.label("r1", ptr.To("kernel-update"))
	e.waitNM("r1", "held by a blocking pod", gatesHeld(gate.ReasonBlockingPods))
	e.editWindow("was-gated", func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Gates = nil })
	nm := e.waitNM("r1", "Drained", phaseIs(lullv1alpha1.PhaseDrained))
	require.Nil(t, meta.FindStatusCondition(nm.Status.Conditions, maintenance.ConditionGatesPass), "no gate, no gate condition")
}
