package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/maintenance"
	"lull.dev/lull/internal/plan"
	"lull.dev/lull/internal/policy"
)

// predict previews a request of class for nodes, with the options the
// drainer of start() runs with.
func (e *drainEnv) predict(class string, deadline *time.Time, nodes ...string) *plan.Result {
	e.t.Helper()
	o := plan.DefaultOptions()
	o.Clock = e.clock
	res, err := plan.Preview(e.ctx, e.c, e.cs, o, plan.Request{Nodes: nodes, Classes: []string{class}, Deadline: deadline})
	require.NoError(e.t, err)
	require.Len(e.t, res.Nodes, len(nodes))
	return res
}

// verify waits for the drainer's first decision on the node's request and
// requires it to be what the preview said: the action and its rule; the
// start (now, at the window's opening, after the budget, after the lease
// holder) with the same message; and, for a drain started now, the same
// blockers and pods. It returns the request as last seen.
func (e *drainEnv) verify(p plan.Node) *lullv1alpha1.NodeMaintenance {
	e.t.Helper()
	var nm *lullv1alpha1.NodeMaintenance
	switch p.Start {
	case plan.StartImmediately:
		nm = e.waitNM(p.Node, "Completed", phaseIs(lullv1alpha1.PhaseCompleted))
		require.Nil(e.t, nm.Status.StartedAt, "a None request never starts a disruption")
	case plan.StartNow:
		nm = e.waitNM(p.Node, "started", func(nm *lullv1alpha1.NodeMaintenance) bool { return nm.Status.StartedAt != nil })
		require.WithinDuration(e.t, *p.StartAt, nm.Status.StartedAt.Time, time.Second, "started when predicted")
		switch p.Action {
		case lullv1alpha1.ActionCordon:
			nm = e.waitNM(p.Node, "Cordoned", phaseIs(lullv1alpha1.PhaseCordoned))
		case lullv1alpha1.ActionDrain:
			nm = e.waitNM(p.Node, "drained or blocked", func(nm *lullv1alpha1.NodeMaintenance) bool {
				return nm.Status.Phase == lullv1alpha1.PhaseDrained || len(nm.Status.Blockers) > 0
			})
			var got []lullv1alpha1.Blocker
			for _, b := range nm.Status.Blockers {
				got = append(got, lullv1alpha1.Blocker{PodDisruptionBudget: b.PodDisruptionBudget, Pods: b.Pods})
			}
			require.Equal(e.t, p.Blockers, got, "the blockers the preview predicted")
			blocked := 0
			for _, b := range p.Blockers {
				blocked += len(b.Pods)
			}
			require.Equal(e.t, int32(len(p.Evict)+blocked), nm.Status.Pods.Total, "the pods the preview predicted")
		}
	case plan.StartWindow:
		nm = e.waitNM(p.Node, "WaitingForWindow", phaseIs(lullv1alpha1.PhaseWaitingForWindow))
		require.Equal(e.t, p.WaitingFor, nm.Status.WaitingFor)
	case plan.StartBudget:
		nm = e.waitNM(p.Node, "WaitingForBudget", phaseIs(lullv1alpha1.PhaseWaitingForBudget))
		require.Equal(e.t, p.WaitingFor, nm.Status.WaitingFor)
	case plan.StartHolder:
		nm = e.waitNM(p.Node, "WaitingForLease", phaseIs(lullv1alpha1.PhaseWaitingForLease))
		require.Equal(e.t, p.LeaseHolder, nm.Status.LeaseHolder)
		require.Equal(e.t, p.WaitingFor, nm.Status.WaitingFor)
	default:
		e.t.Fatalf("no check for start %q", p.Start)
	}
	require.NotNil(e.t, nm.Status.Decision)
	require.Equal(e.t, p.Action, nm.Status.Decision.Action)
	require.Equal(e.t, p.Rule, nm.Status.Decision.RuleRef())
	return nm
}

// verifyStartedAt requires a request that waited to have started at the
// time the preview predicted.
func (e *drainEnv) verifyStartedAt(p plan.Node) {
	e.t.Helper()
	require.NotNil(e.t, p.StartAt)
	nm := e.waitNM(p.Node, "started", func(nm *lullv1alpha1.NodeMaintenance) bool { return nm.Status.StartedAt != nil })
	require.WithinDuration(e.t, *p.StartAt, nm.Status.StartedAt.Time, time.Second, "started when the preview said")
}

func (e *drainEnv) installDefaultPolicy() {
	e.t.Helper()
	p, err := policy.Shipped()
	require.NoError(e.t, err)
	require.NoError(e.t, e.c.Create(e.ctx, p))
	e.t.Cleanup(func() { _ = e.c.Delete(context.Background(), p) })
}

// The shipped policy's actions, end to end: None completes at once with no
// lease, cordon or eviction; Cordon cordons and evicts nothing; a policy
// change decides again for a request not yet started.
func TestDrainerAppliesDisruptionPolicy(t *testing.T) {
	e := newDrainEnv(t)
	e.installDefaultPolicy()
	e.window("noon", func(w *lullv1alpha1.MaintenanceWindow) {
		w.Spec.Strategy = lullv1alpha1.StrategySchedule
		w.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}
		w.Spec.Schedule = &lullv1alpha1.Schedule{TimeZone: "UTC", StartTime: "12:00", Duration: lullv1alpha1.Duration{Duration: 2 * time.Hour},
			Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}}
	})
	e.node("keys", nil)
	e.node("cfg", nil)
	e.node("kern", map[string]string{"pool": "a"})
	for _, n := range []string{"keys", "cfg", "kern"} {
		e.pods(n, "web", 2)
	}
	deleted := e.deletions()
	e.start(nil)

	// The policy status shows the merged rules.
	require.NoError(t, wait.PollUntilContextTimeout(e.ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var p lullv1alpha1.DisruptionPolicy
		if err := e.c.Get(ctx, client.ObjectKey{Name: "default"}, &p); err != nil {
			return false, err
		}
		// The rules, then the built-in defaults for classes and for changes.
		return p.Status.Order == 1 && len(p.Status.EffectiveRules) == len(p.Spec.Rules)+2 &&
			strings.HasPrefix(p.Status.Summary, "ssh-keys=None registry-mirror=None node-config=Cordon kernel-update=Drain kernel-*=Drain hardware=Drain chrony-config=RestartService:chronyd reboot-required=Drain+Reboot cluster-api-rollout=Drain cluster-api-scale-down=Drain cluster-api-remediation=Drain cluster-api-delete=Drain *=Drain+Reboot files:"), nil
	}), "DisruptionPolicy status")

	// None.
	p := e.predict("ssh-keys", nil, "keys").Nodes[0]
	require.Equal(t, lullv1alpha1.ActionNone, p.Action)
	e.label("keys", ptr.To("ssh-keys"))
	nm := e.verify(p)
	require.Equal(t, "NoDisruptionNeeded", meta.FindStatusCondition(nm.Status.Conditions, maintenance.ConditionCordoned).Reason)
	require.False(t, e.nodeObj("keys").Spec.Unschedulable)
	require.NotContains(t, e.nodeObj("keys").Labels, lullv1alpha1.MaintenanceLabel, "the label goes with the completed request")
	require.Empty(t, e.leaseHolder("keys"))
	require.Equal(t, 2, e.podsOn("keys"))

	// Cordon.
	p = e.predict("node-config", nil, "cfg").Nodes[0]
	require.Equal(t, lullv1alpha1.ActionCordon, p.Action)
	require.Empty(t, p.Evict, "Cordon evicts nothing")
	e.label("cfg", ptr.To("node-config"))
	e.verify(p)
	require.True(t, e.nodeObj("cfg").Spec.Unschedulable)
	require.Equal(t, "lull-drainer", e.leaseHolder("cfg"))
	require.Equal(t, 2, e.podsOn("cfg"))
	e.label("cfg", nil)
	e.waitNM("cfg", "Completed", phaseIs(lullv1alpha1.PhaseCompleted))
	require.False(t, e.nodeObj("cfg").Spec.Unschedulable)

	// A request waiting for its window is decided again when the policy
	// changes: an admin says this kernel update needs nothing disruptive.
	p = e.predict("kernel-update", nil, "kern").Nodes[0]
	require.Equal(t, plan.StartWindow, p.Start)
	e.label("kern", ptr.To("kernel-update"))
	e.verify(p)
	live := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "livepatch"}, Spec: lullv1alpha1.DisruptionPolicySpec{
		Rules: []lullv1alpha1.DisruptionRule{{Name: "kernel-livepatch", Class: "kernel-update", Action: lullv1alpha1.ActionNone}}}}
	require.NoError(t, e.c.Create(e.ctx, live))
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), live) })
	p = e.predict("kernel-update", nil, "kern").Nodes[0]
	require.Equal(t, "livepatch/kernel-livepatch", p.Rule)
	require.Equal(t, plan.StartImmediately, p.Start)
	e.verify(p)
	require.Equal(t, 2, e.podsOn("kern"))

	// A waiting request made by label follows the label's new class.
	e.label("kern", ptr.To("hardware"))
	e.waitNM("kern", "a new hardware request waiting", func(nm *lullv1alpha1.NodeMaintenance) bool {
		return nm.Spec.HasOnlyClass("hardware") && nm.Status.Phase == lullv1alpha1.PhaseWaitingForWindow
	})
	p = e.predict("registry-mirror", nil, "kern").Nodes[0]
	require.Equal(t, "default/registry-mirror", p.Rule)
	e.label("kern", ptr.To("registry-mirror"))
	nm = e.waitNM("kern", "Completed as registry-mirror", func(nm *lullv1alpha1.NodeMaintenance) bool {
		return nm.Spec.HasOnlyClass("registry-mirror") && nm.Status.Phase == lullv1alpha1.PhaseCompleted
	})
	require.Equal(t, p.Rule, nm.Status.Decision.RuleRef())
	require.Nil(t, nm.Status.StartedAt)
	require.Empty(t, deleted(), "no pod was evicted by None or Cordon requests")

	// The counter is bumped right after the status write the test waited
	// for: look until it shows (or the wait ends with the last difference).
	var last error
	_ = wait.PollUntilContextTimeout(e.ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		last = testutil.GatherAndCompare(e.reg, strings.NewReader(`
# HELP lull_policy_decisions_total DisruptionPolicy decisions recorded on requests (a request decided again after a policy change counts again), by action and rule.
# TYPE lull_policy_decisions_total counter
lull_policy_decisions_total{action="Cordon",rule="default/node-config"} 1
lull_policy_decisions_total{action="Drain",rule="default/hardware"} 1
lull_policy_decisions_total{action="Drain",rule="default/kernel-update"} 1
lull_policy_decisions_total{action="None",rule="default/registry-mirror"} 1
lull_policy_decisions_total{action="None",rule="default/ssh-keys"} 1
lull_policy_decisions_total{action="None",rule="livepatch/kernel-livepatch"} 1
`), "lull_policy_decisions_total")
		return last == nil, nil
	})
	require.NoError(t, last)
}

// Invalid policies are rejected at admission with a message that says
// what to fix.
func TestDisruptionPolicyAdmission(t *testing.T) {
	ctx := t.Context()
	rule := func(mutate func(*lullv1alpha1.DisruptionRule)) *lullv1alpha1.DisruptionPolicy {
		r := lullv1alpha1.DisruptionRule{Name: "r", Class: "kernel-update", Action: lullv1alpha1.ActionDrain}
		mutate(&r)
		return &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "adm"}, Spec: lullv1alpha1.DisruptionPolicySpec{Rules: []lullv1alpha1.DisruptionRule{r}}}
	}
	for name, tc := range map[string]struct {
		p    *lullv1alpha1.DisruptionPolicy
		want string
	}{
		"class and pattern": {rule(func(r *lullv1alpha1.DisruptionRule) { r.ClassPattern = "kernel-*" }), "set exactly one of class"},
		"neither":           {rule(func(r *lullv1alpha1.DisruptionRule) { r.Class = "" }), "set exactly one of class"},
		"unknown action":    {rule(func(r *lullv1alpha1.DisruptionRule) { r.Action = "Restart" }), `Unsupported value: "Restart"`},
		"drain with None": {rule(func(r *lullv1alpha1.DisruptionRule) {
			r.Action = lullv1alpha1.ActionNone
			r.Drain = &lullv1alpha1.RuleDrain{}
		}), "drain settings apply only to rules that drain"},
		"zero timeout": {rule(func(r *lullv1alpha1.DisruptionRule) {
			r.Drain = &lullv1alpha1.RuleDrain{Timeout: &lullv1alpha1.Duration{}}
		}), "drain timeout must be positive"},
		"bad pattern": {rule(func(r *lullv1alpha1.DisruptionRule) { r.Class = ""; r.ClassPattern = "Kernel/[a-z]" }), "classPattern"},
		"no rules":    {&lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "adm"}}, "spec.rules"},
		"duplicate names": {&lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "adm"}, Spec: lullv1alpha1.DisruptionPolicySpec{Rules: []lullv1alpha1.DisruptionRule{
			{Name: "a", Class: "x", Action: lullv1alpha1.ActionNone}, {Name: "a", Class: "y", Action: lullv1alpha1.ActionNone}}}}, "Duplicate value"},
	} {
		t.Run(name, func(t *testing.T) {
			err := cp.Client.Create(ctx, tc.p)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}
