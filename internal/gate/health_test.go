package gate

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/forecast"
	"lull.dev/lull/internal/lullscheme"
)

func gated(g lullv1alpha1.Gates) *lullv1alpha1.MaintenanceWindow {
	return &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "wave", Generation: 2}, Spec: lullv1alpha1.MaintenanceWindowSpec{Gates: &g}}
}

func alertsGate() lullv1alpha1.Gates {
	return lullv1alpha1.Gates{Alerts: &lullv1alpha1.AlertsGate{URL: "http://prom:9090"}}
}

// The alerts gate reads the window's status and fails closed: not asked
// yet, asked for an older spec, not asked for three periods, or answered
// with anything but "quiet" holds.
func TestAlertsGateFailsClosed(t *testing.T) {
	asked := func(status metav1.ConditionStatus, reason string, gen int64, at time.Time) *lullv1alpha1.MaintenanceWindow {
		w := gated(alertsGate())
		w.Status.Conditions = []metav1.Condition{{Type: lullv1alpha1.WindowConditionAlertsQuiet, Status: status, Reason: reason,
			Message: "the answer", ObservedGeneration: gen}}
		w.Status.Alerts = &lullv1alpha1.AlertsStatus{CheckedAt: metav1.Time{Time: at}}
		return w
	}
	for name, tc := range map[string]struct {
		w      *lullv1alpha1.MaintenanceWindow
		hold   bool
		reason string
		msg    string
	}{
		"never asked":          {w: gated(alertsGate()), hold: true, reason: ReasonAlertsUnknown, msg: "http://prom:9090 has not been asked yet"},
		"asked for older spec": {w: asked(metav1.ConditionTrue, ReasonAlertsQuiet, 1, t0), hold: true, reason: ReasonAlertsUnknown},
		"not asked for long":   {w: asked(metav1.ConditionTrue, ReasonAlertsQuiet, 2, t0.Add(-2*time.Minute)), hold: true, reason: ReasonAlertsUnknown, msg: "not asked since 2026-11-21T09:58:00Z (every 30s)"},
		"firing":               {w: asked(metav1.ConditionFalse, ReasonAlertsFiring, 2, t0.Add(-10*time.Second)), hold: true, reason: ReasonAlertsFiring, msg: "window wave's alerts gate: the answer"},
		"unreachable":          {w: asked(metav1.ConditionFalse, ReasonAlertsUnknown, 2, t0), hold: true, reason: ReasonAlertsUnknown},
		"quiet":                {w: asked(metav1.ConditionTrue, ReasonAlertsQuiet, 2, t0.Add(-80*time.Second)), reason: ReasonAlertsQuiet},
	} {
		t.Run(name, func(t *testing.T) {
			v := Alerts(tc.w, t0)
			require.Equal(t, tc.hold, v.Hold)
			require.Equal(t, tc.reason, v.Reason)
			require.Contains(t, v.Message, tc.msg)
			if tc.hold {
				require.Equal(t, 30*time.Second, v.RetryAfter)
			}
		})
	}
}

func pod(name, node string, phase corev1.PodPhase, lbls map[string]string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name, Labels: lbls},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
}

// podsOf lists pods as the API server's field and label selectors would.
func podsOf(pods ...corev1.Pod) func(context.Context, string, labels.Selector) ([]corev1.Pod, error) {
	return func(_ context.Context, node string, sel labels.Selector) ([]corev1.Pod, error) {
		var out []corev1.Pod
		for _, p := range pods {
			if p.Spec.NodeName == node && sel.Matches(labels.Set(p.Labels)) {
				out = append(out, p)
			}
		}
		return out, nil
	}
}

// Blocking pods hold the node they run on, and only while they run.
func TestBlockingPods(t *testing.T) {
	w := gated(lullv1alpha1.Gates{BlockingPods: []metav1.LabelSelector{
		{MatchLabels: map[string]string{"app": "backup"}},
		{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "lull.dev/blocks", Operator: metav1.LabelSelectorOpExists}}},
	}})
	src := HealthSource{Reader: fake.NewClientBuilder().WithScheme(lullscheme.New()).Build(), Pods: podsOf(
		pod("backup-1", "n1", corev1.PodRunning, map[string]string{"app": "backup"}),
		pod("batch", "n1", corev1.PodPending, map[string]string{"lull.dev/blocks": ""}),
		pod("backup-done", "n2", corev1.PodSucceeded, map[string]string{"app": "backup"}),
		pod("web", "n2", corev1.PodRunning, map[string]string{"app": "web"}),
		pod("backup-2", "n3", corev1.PodRunning, map[string]string{"app": "backup"}),
	)}
	v, err := CheckHealth(context.Background(), src, []*lullv1alpha1.MaintenanceWindow{w}, "n1", t0)
	require.NoError(t, err)
	require.True(t, v.Hold)
	require.Equal(t, ReasonBlockingPods, v.Reason)
	require.Equal(t, "window wave's blockingPods: apps/backup-1, apps/batch run on node n1", v.Message)
	v, err = CheckHealth(context.Background(), src, []*lullv1alpha1.MaintenanceWindow{w}, "n2", t0)
	require.NoError(t, err)
	require.False(t, v.Hold, "a finished pod and an unselected one do not block")
	require.Equal(t, ReasonGatesPass, v.Reason)

	none, err := CheckHealth(context.Background(), HealthSource{}, []*lullv1alpha1.MaintenanceWindow{{}, gated(lullv1alpha1.Gates{})}, "n1", t0)
	require.NoError(t, err)
	require.Equal(t, HealthVerdict{}, none, "windows without gates: nothing read, nothing to show")

	bad := gated(lullv1alpha1.Gates{BlockingPods: []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x", Operator: "Near"}}}}})
	v, err = CheckHealth(context.Background(), src, []*lullv1alpha1.MaintenanceWindow{bad}, "n2", t0)
	require.NoError(t, err)
	require.True(t, v.Hold, "an invalid selector holds")
	require.Contains(t, v.Message, "blockingPods[0] is not a valid selector")
}

func readyNode(name string, status corev1.ConditionStatus, since time.Time) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: status, Reason: "KubeletReady", Message: "kubelet says so", LastTransitionTime: metav1.Time{Time: since}}}}}
}

func finished(node string, at time.Time, windows []string, pdbs ...string) lullv1alpha1.NodeMaintenance {
	return lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: node},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseCompleted, Windows: windows, PodDisruptionBudgets: pdbs,
			StartedAt: &metav1.Time{Time: at.Add(-5 * time.Minute)}, CompletedAt: &metav1.Time{Time: at}}}
}

func pdb(name string, healthy, desired int32, allowed metav1.ConditionStatus, since time.Time) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name}, Status: policyv1.PodDisruptionBudgetStatus{
		CurrentHealthy: healthy, DesiredHealthy: desired, Conditions: []metav1.Condition{{Type: policyv1.DisruptionAllowedCondition,
			Status: allowed, Reason: "x", LastTransitionTime: metav1.Time{Time: since}}}}}
}

// A request this process ended whose end the reader does not show yet
// (the cache still says Drained) counts as ended when src.Ended says so:
// the request woken for the slot its completion freed is judged at once.
func TestRecoveryCountsAnEndTheReaderDoesNotShowYet(t *testing.T) {
	settle := time.Minute
	w := gated(lullv1alpha1.Gates{Recovery: &lullv1alpha1.RecoveryGate{SettleTime: &lullv1alpha1.Duration{Duration: settle}}})
	stale := finished("n1", t0, []string{"wave"})
	stale.UID = "uid-n1"
	stale.Status.Phase, stale.Status.CompletedAt = lullv1alpha1.PhaseDrained, nil
	r := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(readyNode("n1", corev1.ConditionTrue, t0.Add(-time.Hour))).Build()
	v, err := Recovery(context.Background(), HealthSource{Reader: r}, w, []lullv1alpha1.NodeMaintenance{stale}, "n2", t0)
	require.NoError(t, err)
	require.False(t, v.Hold, "without Ended, a request the reader shows Drained is not judged")
	ended := t0.Add(-10 * time.Second)
	src := HealthSource{Reader: r, Ended: func(uid types.UID) (time.Time, bool) { return ended, uid == "uid-n1" }}
	v, err = Recovery(context.Background(), src, w, []lullv1alpha1.NodeMaintenance{stale}, "n2", t0)
	require.NoError(t, err)
	require.True(t, v.Hold)
	require.Equal(t, ReasonSettling, v.Reason, v.Message)
	require.Equal(t, 50*time.Second, v.RetryAfter, "it settles from when it ended: %s", v.Message)
}

// The recovery gate, from the conditions' transition times alone: a node
// settles for settleTime after it (and its budgets) are well; a node or
// budget unwell since within the settle time halts the wave; what went
// wrong only later is not the wave's doing.
func TestRecovery(t *testing.T) {
	settle := 2 * time.Minute
	w := gated(lullv1alpha1.Gates{Recovery: &lullv1alpha1.RecoveryGate{SettleTime: &lullv1alpha1.Duration{Duration: settle}}})
	done := t0.Add(-time.Minute) // finished a minute ago
	for name, tc := range map[string]struct {
		nms    []lullv1alpha1.NodeMaintenance
		objs   []client.Object
		skip   string
		hold   bool
		reason string
		msg    string
		retry  time.Duration
	}{
		"settling": {nms: []lullv1alpha1.NodeMaintenance{finished("n1", done, []string{"wave"})},
			objs: []client.Object{readyNode("n1", corev1.ConditionTrue, done.Add(-30*time.Second))},
			hold: true, reason: ReasonSettling, retry: time.Minute,
			msg: "node n1 is well since 2026-11-21T09:59:00Z; the next node starts once it has stayed well until 2026-11-21T10:01:00Z (settleTime 2m0s)"},
		"settled": {nms: []lullv1alpha1.NodeMaintenance{finished("n1", t0.Add(-3*time.Minute), []string{"wave"})},
			objs: []client.Object{readyNode("n1", corev1.ConditionTrue, t0.Add(-4*time.Minute))}, reason: ReasonRecovered},
		"Ready again later settles from then": {nms: []lullv1alpha1.NodeMaintenance{finished("n1", t0.Add(-3*time.Minute), []string{"wave"})},
			objs: []client.Object{readyNode("n1", corev1.ConditionTrue, t0.Add(-30*time.Second))},
			hold: true, reason: ReasonSettling, retry: 90 * time.Second},
		"came back NotReady": {nms: []lullv1alpha1.NodeMaintenance{finished("n1", done, []string{"wave"})},
			objs: []client.Object{readyNode("n1", corev1.ConditionFalse, done.Add(20*time.Second))},
			hold: true, reason: ReasonNodeUnwell, retry: 30 * time.Second,
			msg: "window wave's recovery gate halts the wave: node n1 came back unwell after its maintenance (finished 2026-11-21T09:59:00Z): Ready is False since 2026-11-21T09:59:20Z"},
		"NotReady long after it recovered": {nms: []lullv1alpha1.NodeMaintenance{finished("n1", t0.Add(-time.Hour), []string{"wave"})},
			objs: []client.Object{readyNode("n1", corev1.ConditionFalse, t0.Add(-10*time.Minute))}, reason: ReasonRecovered},
		"workload recovering": {nms: []lullv1alpha1.NodeMaintenance{finished("n1", done, []string{"wave"}, "apps/web")},
			objs: []client.Object{readyNode("n1", corev1.ConditionTrue, done.Add(-time.Minute)), pdb("web", 1, 2, metav1.ConditionFalse, done.Add(-3*time.Minute))},
			hold: true, reason: ReasonSettling, retry: 30 * time.Second,
			msg: "its workloads are recovering: PodDisruptionBudget apps/web has 1 of the 2 healthy pods it needs (the wave halts if they still are at 2026-11-21T10:01:00Z)"},
		"workload not back after the settle time": {nms: []lullv1alpha1.NodeMaintenance{finished("n1", t0.Add(-5*time.Minute), []string{"wave"}, "apps/web")},
			objs: []client.Object{readyNode("n1", corev1.ConditionTrue, t0.Add(-6*time.Minute)), pdb("web", 1, 2, metav1.ConditionFalse, t0.Add(-7*time.Minute))},
			hold: true, reason: ReasonNodeUnwell, msg: "PodDisruptionBudget apps/web has 1 of the 2 healthy pods it needs, 2m0s after the node finished"},
		"workload healthy again settles from then": {nms: []lullv1alpha1.NodeMaintenance{finished("n1", t0.Add(-5*time.Minute), []string{"wave"}, "apps/web")},
			objs: []client.Object{readyNode("n1", corev1.ConditionTrue, t0.Add(-6*time.Minute)), pdb("web", 2, 2, metav1.ConditionTrue, t0.Add(-20*time.Second))},
			hold: true, reason: ReasonSettling, retry: 100 * time.Second},
		"a deleted budget or node is not waited for": {nms: []lullv1alpha1.NodeMaintenance{finished("n1", done, []string{"wave"}, "apps/gone"), finished("gone", done, []string{"wave"})},
			objs: []client.Object{readyNode("n1", corev1.ConditionTrue, t0.Add(-time.Hour))}, hold: true, reason: ReasonSettling},
		"another window's node": {nms: []lullv1alpha1.NodeMaintenance{finished("n1", done, []string{"other"})},
			objs: []client.Object{readyNode("n1", corev1.ConditionFalse, done)}, reason: ReasonRecovered},
		"the node being gated is left out": {nms: []lullv1alpha1.NodeMaintenance{finished("n1", done, []string{"wave"})}, skip: "n1",
			objs: []client.Object{readyNode("n1", corev1.ConditionFalse, done)}, reason: ReasonRecovered},
		"a request that never started": {nms: func() []lullv1alpha1.NodeMaintenance {
			nm := finished("n1", done, []string{"wave"})
			nm.Status.StartedAt = nil
			return []lullv1alpha1.NodeMaintenance{nm}
		}(), objs: []client.Object{readyNode("n1", corev1.ConditionFalse, done)}, reason: ReasonRecovered},
		"a request uncordoning finishes now": {nms: func() []lullv1alpha1.NodeMaintenance {
			nm := finished("n1", done, []string{"wave"})
			nm.Status.Phase, nm.Status.CompletedAt = lullv1alpha1.PhaseUncordoning, nil
			return []lullv1alpha1.NodeMaintenance{nm}
		}(), objs: []client.Object{readyNode("n1", corev1.ConditionTrue, t0.Add(-time.Hour))}, hold: true, reason: ReasonSettling, retry: 2 * time.Minute},
		"a failed request counts": {nms: func() []lullv1alpha1.NodeMaintenance {
			nm := finished("n1", done, []string{"wave"})
			nm.Status.Phase = lullv1alpha1.PhaseFailed
			return []lullv1alpha1.NodeMaintenance{nm}
		}(), objs: []client.Object{readyNode("n1", corev1.ConditionUnknown, done.Add(-time.Minute))}, hold: true, reason: ReasonNodeUnwell},
	} {
		t.Run(name, func(t *testing.T) {
			r := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(tc.objs...).Build()
			v, err := Recovery(context.Background(), HealthSource{Reader: r}, w, tc.nms, tc.skip, t0)
			require.NoError(t, err)
			require.Equal(t, tc.hold, v.Hold, v.Message)
			require.Equal(t, tc.reason, v.Reason, v.Message)
			require.Contains(t, v.Message, tc.msg)
			if tc.retry != 0 {
				require.Equal(t, tc.retry, v.RetryAfter)
			}
		})
	}
}

// The health gates come after the window and before the budget: a held
// request takes no budget slot and no lease; a started request is never
// held.
func TestHealthGateOrder(t *testing.T) {
	held := HealthVerdict{Hold: true, Reason: ReasonAlertsFiring, Message: "window wave's alerts gate: 1 alert fires", RetryAfter: 30 * time.Second}
	with := func(c *calls, base Checks) Checks {
		base.Health = func(context.Context) (HealthVerdict, error) {
			*c = append(*c, "health")
			return held, nil
		}
		return base
	}
	var c calls
	v, err := Check(context.Background(), Request{Classes: []string{"k"}, Forecast: open(), Now: t0}, with(&c, c.checks(lullv1alpha1.ActionDrain, true, nil)))
	require.NoError(t, err)
	require.Equal(t, Health, v.Gate)
	require.Equal(t, []string{"decide", "health"}, []string(c))
	require.Equal(t, ReasonAlertsFiring, v.Reason)
	require.Equal(t, 30*time.Second, v.RetryAfter)

	c = nil
	past := &forecast.Node{PastDeadline: true, Maintenance: &forecast.Maintenance{Classes: []string{"k"}}}
	v, err = Check(context.Background(), Request{Classes: []string{"k"}, Forecast: past, Now: t0}, with(&c, c.checks(lullv1alpha1.ActionDrain, true, nil)))
	require.NoError(t, err)
	require.Equal(t, Health, v.Gate, "a passed deadline ends the windows' say, not the gates'")

	c = nil
	v, err = Check(context.Background(), Request{Classes: []string{"k"}, Forecast: closed(), Now: t0}, with(&c, c.checks(lullv1alpha1.ActionDrain, true, nil)))
	require.NoError(t, err)
	require.Equal(t, Window, v.Gate, "a closed window answers first")
	require.Equal(t, []string{"decide"}, []string(c))

	c = nil
	v, err = Check(context.Background(), Request{Classes: []string{"k"}, Started: true, Decision: &lullv1alpha1.Decision{Action: lullv1alpha1.ActionDrain}, Forecast: open(), Now: t0},
		with(&c, c.checks(lullv1alpha1.ActionDrain, true, nil)))
	require.NoError(t, err)
	require.True(t, v.Start(), "work already started is never held")
	require.Equal(t, []string{"budget", "lease"}, []string(c))
}

// BenchmarkRecovery5000 judges a window's recovery gate over 5,000
// finished requests (every node of a finished wave, half of them the
// window's), as each held request does when it looks again; beside it,
// the same with 500, to show how the cost grows.
func BenchmarkRecovery5000(b *testing.B) {
	for _, n := range []int{500, 5000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			w := gated(lullv1alpha1.Gates{Recovery: &lullv1alpha1.RecoveryGate{}})
			var objs []client.Object
			var nms []lullv1alpha1.NodeMaintenance
			for i := range n {
				name := fmt.Sprintf("n%04d", i)
				windows := []string{"other"}
				if i%2 == 0 {
					windows = []string{"wave"}
				}
				nms = append(nms, finished(name, t0.Add(-time.Hour), windows, "apps/web"))
				objs = append(objs, readyNode(name, corev1.ConditionTrue, t0.Add(-2*time.Hour)))
			}
			objs = append(objs, pdb("web", 3, 2, metav1.ConditionTrue, t0.Add(-2*time.Hour)))
			// As lull-drainer's cache serves a list without copies
			// (UnsafeDisableDeepCopy): the gate's own cost, not a fake
			// client's JSON round trips.
			r := &listReader{}
			for _, o := range objs {
				switch o := o.(type) {
				case *corev1.Node:
					r.nodes = append(r.nodes, *o)
				case *policyv1.PodDisruptionBudget:
					r.pdbs = append(r.pdbs, *o)
				}
			}
			b.ResetTimer()
			for b.Loop() {
				v, err := Recovery(context.Background(), HealthSource{Reader: r}, w, nms, "", t0)
				if err != nil || v.Hold {
					b.Fatal(v, err)
				}
			}
		})
	}
}

// listReader lists nodes and budgets from memory without copying them.
type listReader struct {
	client.Reader
	nodes []corev1.Node
	pdbs  []policyv1.PodDisruptionBudget
}

func (r *listReader) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	switch l := list.(type) {
	case *corev1.NodeList:
		l.Items = r.nodes
	case *policyv1.PodDisruptionBudgetList:
		l.Items = r.pdbs
	}
	return nil
}
