package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"lull.dev/lull/agent"
	"lull.dev/lull/agent/agenttest"
	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/maintenance"
	"lull.dev/lull/internal/agentlease"
	"lull.dev/lull/internal/policy"
	"lull.dev/lull/lease"
)

// actionsPolicy maps the acceptance classes: ssh-keys needs nothing,
// chrony-config a restart of chronyd, kernel-update a drain and a reboot.
func (e *drainEnv) actionsPolicy() {
	e.t.Helper()
	p := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "hosts"}, Spec: lullv1alpha1.DisruptionPolicySpec{Rules: []lullv1alpha1.DisruptionRule{
		{Name: "ssh", Class: "ssh-keys", Action: lullv1alpha1.ActionNone},
		{Name: "chrony", Class: "chrony-config", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepRestartService, Unit: "chronyd"}}},
		{Name: "kernel", Class: "kernel-update", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.ActionDrain}, {Type: lullv1alpha1.StepReboot}}},
	}}}
	require.NoError(e.t, e.c.Create(e.ctx, p))
	e.t.Cleanup(func() { _ = e.c.Delete(context.Background(), p) })
}

// unitCommands gives c a stand-in for systemd (agenttest.FakeUnit): its
// restart command also restarts the stand-in unit, whose InvocationID the
// agent reads before and after, as it reads a real unit's.
func unitCommands(t *testing.T, c *agent.Commands) *agent.Commands {
	restart, state := agenttest.FakeUnit(t.TempDir())
	c.Restart, c.UnitState = "("+c.Restart+") && "+restart, state
	return c
}

// readyNode gives node a Ready condition and a boot ID, as a kubelet would.
func (e *drainEnv) readyNode(name, bootID string) {
	e.t.Helper()
	n, err := e.cs.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
	require.NoError(e.t, err)
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
	n.Status.NodeInfo.BootID = bootID
	_, err = e.cs.CoreV1().Nodes().UpdateStatus(e.ctx, n, metav1.UpdateOptions{})
	require.NoError(e.t, err)
}

// newAgent is lull-agent for node on the drainer's fake clock; exec
// carries its steps out.
func (e *drainEnv) newAgent(node string, exec agent.Executor) *agent.Agent {
	return &agent.Agent{Client: cp.Client, Live: cp.Client, Node: node, LeaseNamespace: lease.DefaultNamespace,
		DrainerIdentity: "lull-drainer", Exec: exec, Clock: e.clock}
}

// startAgent runs a for its node in a manager of its own, its cache
// limited as lull-agent's is, and renews its agent lease once.
func (e *drainEnv) startAgent(a *agent.Agent) context.CancelFunc {
	e.t.Helper()
	require.NoError(e.t, (&agent.Heartbeat{Kube: e.cs, Namespace: "lull-system", Node: a.Node, Identity: "agent-" + a.Node, Clock: e.clock}).Renew(e.ctx))
	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{Scheme: cp.Client.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}, Cache: agent.CacheOptions(a.Node, lease.DefaultNamespace)})
	require.NoError(e.t, err)
	a.Client = mgr.GetClient()
	require.NoError(e.t, a.SetupWithManager(mgr))
	ctx, cancel := context.WithCancel(e.ctx)
	e.t.Cleanup(cancel)
	done := make(chan struct{})
	go func() { _ = mgr.Start(ctx); close(done) }()
	return func() { cancel(); <-done }
}

// fencedWatcher asserts, beside a scenario, that no host step starts
// unless the node's lease, read at that moment, is lull's and is the one
// the request's fencing token names. It returns the violations seen.
func (e *drainEnv) fencedWatcher(node string) func() []string {
	e.t.Helper()
	wc, err := client.NewWithWatch(cp.Config, client.Options{Scheme: cp.Client.Scheme()})
	require.NoError(e.t, err)
	w, err := wc.Watch(e.ctx, &lullv1alpha1.NodeMaintenanceList{})
	require.NoError(e.t, err)
	var mu sync.Mutex
	var bad []string
	started := map[string]bool{}
	go func() {
		for ev := range w.ResultChan() {
			nm, ok := ev.Object.(*lullv1alpha1.NodeMaintenance)
			if !ok || ev.Type == watch.Deleted || nm.Name != node {
				continue
			}
			for _, a := range nm.Status.Actions {
				if a.StartedAt == nil {
					continue
				}
				key := string(nm.UID) + a.Label() + a.StartedAt.String()
				if started[key] {
					continue
				}
				started[key] = true
				l, err := e.cs.CoordinationV1().Leases(lease.DefaultNamespace).Get(e.ctx, lease.Name(node), metav1.GetOptions{})
				f := nm.Status.Fencing
				mu.Lock()
				switch {
				case err != nil:
					bad = append(bad, a.Label()+" started without a lease: "+err.Error())
				case f == nil || l.UID != f.LeaseUID || ptr.Deref(l.Spec.LeaseTransitions, 0) != f.LeaseTransitions:
					bad = append(bad, a.Label()+" started under a stale fencing token")
				case !lease.SameFamily(ptr.Deref(l.Spec.HolderIdentity, ""), "lull-drainer"):
					bad = append(bad, a.Label()+" started while "+ptr.Deref(l.Spec.HolderIdentity, "")+" held the lease")
				}
				mu.Unlock()
			}
		}
	}()
	e.t.Cleanup(w.Stop)
	return func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), bad...) }
}

// The acceptance scenario: classes ssh-keys (None), chrony-config (restart
// chronyd) and kernel-update (drain + reboot) plan exactly cordon, drain,
// reboot before anything starts; without an agent nothing is taken; with
// one, the node is cordoned, drained and rebooted (its boot ID changes and
// it is Ready again), then uncordoned and its lease released.
func TestActionsAcceptance(t *testing.T) {
	e := newDrainEnv(t)
	e.node("n1", nil)
	e.readyNode("n1", "boot-1")
	e.pods("n1", "web", 2)
	e.actionsPolicy()
	violations := e.fencedWatcher("n1")
	e.start(nil)
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1",
		Classes: []string{"ssh-keys", "chrony-config", "kernel-update"}}}
	require.NoError(t, e.c.Create(e.ctx, nm))

	nm = e.waitNM("n1", "WaitingForAgent", phaseIs(lullv1alpha1.PhaseWaitingForAgent))
	require.Equal(t, "Cordon, Drain, Reboot", policy.StepsLine(nm.Status.Decision.Steps), "the plan says so before it starts")
	require.Equal(t, []string{"RestartService chronyd (chrony-config)"}, nm.Status.Decision.Steps[2].Covers)
	require.Contains(t, nm.Status.WaitingFor, "no lull-agent runs on node n1")
	require.False(t, e.nodeObj("n1").Spec.Unschedulable, "nothing done without an agent")
	require.Empty(t, e.leaseHolder("n1"), "no lease taken without an agent")

	a := e.newAgent("n1", &agent.SimulatedPower{Client: cp.Client, Node: "n1", BootTime: 50 * time.Millisecond, Clock: clock.RealClock{},
		Commands: unitCommands(t, &agent.Commands{HostRoot: "/", Restart: "exit 7"})})
	e.startAgent(a)
	nm = e.waitNM("n1", "Completed", phaseIs(lullv1alpha1.PhaseCompleted))
	require.Len(t, nm.Status.Actions, 1)
	require.Equal(t, lullv1alpha1.StepReboot, nm.Status.Actions[0].Type)
	require.Equal(t, lullv1alpha1.ActionSucceeded, nm.Status.Actions[0].State)
	require.Equal(t, "boot-1", nm.Status.Actions[0].BootID)
	n := e.nodeObj("n1")
	require.NotEqual(t, "boot-1", n.Status.NodeInfo.BootID, "the node rebooted")
	require.False(t, n.Spec.Unschedulable, "lull's cordon undone")
	require.Empty(t, e.leaseHolder("n1"), "lease released")
	require.Zero(t, e.podsOn("n1"), "drained before the reboot")
	require.Empty(t, violations())
}

// A service restart that fails falls back to a reboot, draining first.
func TestActionsRestartFailsFallsBackToReboot(t *testing.T) {
	e := newDrainEnv(t)
	e.node("n1", nil)
	e.readyNode("n1", "boot-1")
	e.pods("n1", "web", 1)
	e.actionsPolicy()
	violations := e.fencedWatcher("n1")
	e.start(nil)
	a := e.newAgent("n1", &agent.SimulatedPower{Client: cp.Client, Node: "n1", BootTime: 50 * time.Millisecond, Clock: clock.RealClock{},
		Commands: unitCommands(t, &agent.Commands{HostRoot: "/", Restart: `echo "no unit $LULL_UNIT"; exit 5`})})
	e.startAgent(a)
	e.label("n1", ptr.To("chrony-config"))
	nm := e.waitNM("n1", "Completed", phaseIs(lullv1alpha1.PhaseCompleted))
	require.Len(t, nm.Status.Actions, 2)
	require.Equal(t, lullv1alpha1.ActionFailed, nm.Status.Actions[0].State)
	require.Contains(t, nm.Status.Actions[0].Message, "no unit chronyd")
	require.True(t, nm.Status.Actions[1].Fallback)
	require.Equal(t, lullv1alpha1.ActionSucceeded, nm.Status.Actions[1].State)
	require.Equal(t, metav1.ConditionTrue, nmCond(nm, "FellBack"))
	require.Zero(t, e.podsOn("n1"), "the fallback reboot drained first")
	require.NotEqual(t, "boot-1", e.nodeObj("n1").Status.NodeInfo.BootID)
	require.Empty(t, violations())
}

func nmCond(nm *lullv1alpha1.NodeMaintenance, t string) metav1.ConditionStatus {
	for _, c := range nm.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

// A stale fencing token never acts: the agent, asked directly, leaves the
// step Pending while the token names an older holder of the lease, and
// runs it once the token is current. An agent stopped mid-step leaves it
// Running; the next agent runs it again to the end.
func TestActionsFencingAndAgentKilledMidStep(t *testing.T) {
	e := newDrainEnv(t)
	e.node("n1", nil)
	e.readyNode("n1", "boot-1")
	leases := lease.New(e.cs, lease.Options{Clock: e.clock})
	info, err := leases.Acquire(e.ctx, "n1", "lull-drainer/a", "maintenance", "test", time.Minute)
	require.NoError(t, err)
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"chrony-config"}}}
	require.NoError(t, e.c.Create(e.ctx, nm))
	nm.Status = lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseActing,
		Fencing: &lullv1alpha1.Fencing{LeaseUID: info.UID, LeaseTransitions: info.Transitions + 1},
		Actions: []lullv1alpha1.ActionStatus{{Type: lullv1alpha1.StepRestartService, Unit: "chronyd", State: lullv1alpha1.ActionPending,
			Timeout: lullv1alpha1.Duration{Duration: time.Hour}}}}
	require.NoError(t, e.c.Status().Update(e.ctx, nm))
	req := reconcile.Request{NamespacedName: client.ObjectKey{Name: "n1"}}

	// Stale token (transitions ahead of the lease's): no action.
	hang := e.newAgent("n1", unitCommands(t, &agent.Commands{HostRoot: "/", Restart: "sleep 60"}))
	_, err = hang.Reconcile(e.ctx, req)
	require.NoError(t, err)
	require.NoError(t, e.c.Get(e.ctx, client.ObjectKey{Name: "n1"}, nm))
	require.Equal(t, lullv1alpha1.ActionPending, nm.Status.Actions[0].State, "a stale token never acts")

	// Another tool's lease with the token's numbers: no action either.
	nm.Status.Fencing.LeaseTransitions = info.Transitions
	require.NoError(t, e.c.Status().Update(e.ctx, nm))
	// The agent killed mid-step: its run is cancelled while the command
	// hangs; the step stays Running.
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { _, err := hang.Reconcile(ctx, req); done <- err }()
	e.waitNM("n1", "the restart Running", func(nm *lullv1alpha1.NodeMaintenance) bool {
		return nm.Status.Actions[0].State == lullv1alpha1.ActionRunning
	})
	cancel()
	require.Error(t, <-done)
	require.NoError(t, e.c.Get(e.ctx, client.ObjectKey{Name: "n1"}, nm))
	require.Equal(t, lullv1alpha1.ActionRunning, nm.Status.Actions[0].State, "a killed agent records nothing")

	// The next agent runs the step again and records it.
	ok := e.newAgent("n1", unitCommands(t, &agent.Commands{HostRoot: "/", Restart: `echo "restarted $LULL_UNIT"`}))
	_, err = ok.Reconcile(e.ctx, req)
	require.NoError(t, err)
	require.NoError(t, e.c.Get(e.ctx, client.ObjectKey{Name: "n1"}, nm))
	require.Equal(t, lullv1alpha1.ActionSucceeded, nm.Status.Actions[0].State)
	require.Equal(t, "restarted chronyd; unit chronyd restarted (InvocationID 2, was 1) and active", nm.Status.Actions[0].Message)

	// A lease taken by another tool: the token's UID no longer matches.
	require.NoError(t, leases.Release(e.ctx, "n1", "lull-drainer/a"))
	_, err = leases.Acquire(e.ctx, "n1", "kured", "reboot", "test", time.Minute)
	require.NoError(t, err)
	nm.Status.Actions = append(nm.Status.Actions, lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "sshd",
		State: lullv1alpha1.ActionPending, Timeout: lullv1alpha1.Duration{Duration: time.Hour}})
	require.NoError(t, e.c.Status().Update(e.ctx, nm))
	_, err = ok.Reconcile(e.ctx, req)
	require.NoError(t, err)
	require.NoError(t, e.c.Get(e.ctx, client.ObjectKey{Name: "n1"}, nm))
	require.Equal(t, lullv1alpha1.ActionPending, nm.Status.Actions[1].State, "another holder's lease: no action")
}

// A reboot that fails ends the request Failed: lull's cordon is undone,
// its lease released, and the maintenance label goes with the request, so
// a label left on the node does not make a new request that drains and
// fails again and again. Labelling the node again asks again.
func TestActionsFailedRebootEndsTheRequest(t *testing.T) {
	e := newDrainEnv(t)
	e.node("n1", nil)
	e.readyNode("n1", "boot-1")
	e.actionsPolicy()
	violations := e.fencedWatcher("n1")
	e.start(nil)
	e.startAgent(e.newAgent("n1", &agent.Commands{HostRoot: "/", Reboot: `echo "no reboot on this machine"; exit 1`}))
	e.label("n1", ptr.To("kernel-update"))
	// A failed reboot is believed only once the agent is seen running
	// after it (a reboot command killed by the shutdown it started fails
	// too): until its next heartbeat the node is held.
	nm := e.waitNM("n1", "held until the agent is seen after the failure", func(nm *lullv1alpha1.NodeMaintenance) bool {
		return nmCond(nm, maintenance.ConditionNodeUnwell) == metav1.ConditionTrue
	})
	require.Contains(t, nm.Status.WaitingFor, "no lull-agent heartbeat since the failure")
	e.clock.Step(agentlease.RenewEvery) // the agent's next heartbeat
	require.NoError(t, (&agent.Heartbeat{Kube: e.cs, Namespace: "lull-system", Node: "n1", Identity: "agent-n1", Clock: e.clock}).Renew(e.ctx))
	nm = e.waitNM("n1", "Failed", phaseIs(lullv1alpha1.PhaseFailed))
	require.Len(t, nm.Status.Actions, 1)
	require.Equal(t, lullv1alpha1.ActionFailed, nm.Status.Actions[0].State)
	require.Contains(t, nm.Status.Actions[0].Message, "no reboot on this machine")
	n := e.nodeObj("n1")
	require.NotContains(t, n.Labels, lullv1alpha1.MaintenanceLabel, "the label goes with the failed request")
	require.False(t, n.Spec.Unschedulable, "lull's cordon undone")
	require.Empty(t, e.leaseHolder("n1"), "lease released")
	require.Never(t, func() bool {
		var cur lullv1alpha1.NodeMaintenance
		err := e.c.Get(e.ctx, client.ObjectKey{Name: "n1"}, &cur)
		return err != nil || cur.UID != nm.UID || cur.Status.Phase != lullv1alpha1.PhaseFailed
	}, 2*time.Second, 100*time.Millisecond, "the failed request stays as it ended; nothing tries again")
	require.Empty(t, violations())
}

// The agent judges the node lease's expiry by observation, as the lease
// protocol and the drainer do, never by the holder's renewTime (issue 27,
// finding 9). A drainer whose clock runs an hour ahead writes a renewTime
// an hour in the future and then stops renewing: once the lease has gone
// unchanged for its duration on the agent's clock, the agent no longer
// acts under it, though its renewTime still says "alive" for an hour. A
// drainer whose clock runs an hour behind renews a live lease: the agent
// acts at once, though its renewTime says "expired an hour ago".
func TestActionsAgentJudgesLeaseExpiryByObservation(t *testing.T) {
	e := newDrainEnv(t)
	e.node("n1", nil)
	e.readyNode("n1", "boot-1")
	ahead := lease.New(e.cs, lease.Options{Clock: clocktesting.NewFakeClock(e.clock.Now().Add(time.Hour))})
	info, err := ahead.Acquire(e.ctx, "n1", "lull-drainer/a", "maintenance", "test", time.Minute)
	require.NoError(t, err)
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"chrony-config"}}}
	require.NoError(t, e.c.Create(e.ctx, nm))
	step := func(unit string) lullv1alpha1.ActionStatus {
		return lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: unit, State: lullv1alpha1.ActionPending,
			Timeout: lullv1alpha1.Duration{Duration: time.Hour}}
	}
	nm.Status = lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseActing,
		Fencing: &lullv1alpha1.Fencing{LeaseUID: info.UID, LeaseTransitions: info.Transitions},
		Actions: []lullv1alpha1.ActionStatus{step("chronyd")}}
	require.NoError(t, e.c.Status().Update(e.ctx, nm))
	req := reconcile.Request{NamespacedName: client.ObjectKey{Name: "n1"}}
	a := e.newAgent("n1", unitCommands(t, &agent.Commands{HostRoot: "/", Restart: `echo "restarted $LULL_UNIT"`}))
	state := func(i int) lullv1alpha1.ActionState {
		t.Helper()
		_, err := a.Reconcile(e.ctx, req)
		require.NoError(t, err)
		require.NoError(t, e.c.Get(e.ctx, client.ObjectKey{Name: "n1"}, nm))
		return nm.Status.Actions[i].State
	}
	require.Equal(t, lullv1alpha1.ActionSucceeded, state(0), "a fresh lease: the agent acts")

	// The drainer stops renewing; two minutes pass on the agent's clock.
	e.clock.Step(2 * time.Minute)
	nm.Status.Actions = append(nm.Status.Actions, step("sshd"))
	require.NoError(t, e.c.Status().Update(e.ctx, nm))
	require.Equal(t, lullv1alpha1.ActionPending, state(1),
		"the lease went unchanged for longer than its duration: expired, whatever its renewTime (an hour ahead) says")

	// A drainer an hour behind renews it: a new version, alive.
	behind := lease.New(e.cs, lease.Options{Clock: clocktesting.NewFakeClock(e.clock.Now().Add(-time.Hour))})
	_, err = behind.Renew(e.ctx, "n1", "lull-drainer/a")
	require.NoError(t, err)
	require.Equal(t, lullv1alpha1.ActionSucceeded, state(1), "a renewed lease is alive, though its renewTime is an hour old")
}

// A reboot that does not come back within its timeout keeps the node held
// (issue 41, finding 6): the request stays Acting with NodeUnwell saying
// what is missing, the node stays cordoned and leased, and its budget
// slot stays taken, so the window's next node does not start while this
// one is down. Once the node is seen back (a new boot ID, Ready) the
// request completes and the next node starts.
func TestActionsRebootTimeoutKeepsTheSlot(t *testing.T) {
	e := newDrainEnv(t)
	e.window("pool-a", func(w *lullv1alpha1.MaintenanceWindow) {
		w.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}
		w.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(1))
	})
	for _, n := range []string{"a1", "a2"} {
		e.node(n, map[string]string{"pool": "a"})
		e.readyNode(n, "boot-1")
	}
	p := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "hosts"}, Spec: lullv1alpha1.DisruptionPolicySpec{Rules: []lullv1alpha1.DisruptionRule{
		{Name: "kernel", Class: "kernel-update", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.ActionDrain},
			{Type: lullv1alpha1.StepReboot, Timeout: &lullv1alpha1.Duration{Duration: 2 * time.Second}}}},
	}}}
	require.NoError(t, e.c.Create(e.ctx, p))
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), p) })
	maxSeen := e.maxDisrupting()
	e.start(nil)
	// a1's machine does not come back by itself: NotReady under a new boot
	// ID for an hour (a bad kernel). a2's reboots in 50ms.
	e.startAgent(e.newAgent("a1", &agent.SimulatedPower{Client: cp.Client, Node: "a1", BootTime: time.Hour, Clock: clock.RealClock{},
		Commands: &agent.Commands{HostRoot: "/"}}))
	e.startAgent(e.newAgent("a2", &agent.SimulatedPower{Client: cp.Client, Node: "a2", BootTime: 50 * time.Millisecond, Clock: clock.RealClock{},
		Commands: &agent.Commands{HostRoot: "/"}}))
	e.label("a1", ptr.To("kernel-update"))
	e.waitNM("a1", "Acting", phaseIs(lullv1alpha1.PhaseActing))
	e.label("a2", ptr.To("kernel-update"))
	e.clock.Step(3 * time.Second) // past the reboot's timeout

	nm := e.waitNM("a1", "NodeUnwell", func(nm *lullv1alpha1.NodeMaintenance) bool {
		return nmCond(nm, maintenance.ConditionNodeUnwell) == metav1.ConditionTrue
	})
	require.Equal(t, lullv1alpha1.PhaseActing, nm.Status.Phase, "held, not failed")
	require.Equal(t, lullv1alpha1.ActionTimedOut, nm.Status.Actions[0].State)
	require.Regexp(t, `not seen back \((boot ID unchanged|not Ready)`, nm.Status.WaitingFor, "says what is missing")
	require.Contains(t, nm.Status.WaitingFor, "keeps its cordon, lease and budget slot")
	require.Never(t, func() bool {
		var cur lullv1alpha1.NodeMaintenance
		if err := e.c.Get(e.ctx, client.ObjectKey{Name: "a2"}, &cur); err != nil {
			return false
		}
		return cur.Status.Phase.Disrupting() || !e.nodeObj("a1").Spec.Unschedulable || e.leaseHolder("a1") == ""
	}, 4*time.Second, 100*time.Millisecond, "a2 started, or a1 was given back, while a1 is down")
	require.Equal(t, lullv1alpha1.PhaseWaitingForBudget, e.waitNM("a2", "a phase", func(*lullv1alpha1.NodeMaintenance) bool { return true }).Status.Phase)

	// The machine comes back (by hand, say): a1 completes, a2 goes.
	e.readyNode("a1", "boot-2")
	nm = e.waitNM("a1", "Completed", phaseIs(lullv1alpha1.PhaseCompleted))
	require.Equal(t, lullv1alpha1.ActionSucceeded, nm.Status.Actions[0].State)
	require.Contains(t, nm.Status.Actions[0].Message, "after it timed out")
	require.False(t, e.nodeObj("a1").Spec.Unschedulable)
	e.waitNM("a2", "Completed", phaseIs(lullv1alpha1.PhaseCompleted))
	require.Equal(t, 1, maxSeen(), "never two nodes of the window down at once")
}
