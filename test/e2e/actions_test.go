package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"lull.dev/lull/agent"
	"lull.dev/lull/agent/agenttest"
	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/policy"
	"lull.dev/lull/lease"
	"lull.dev/lull/test/framework"
)

// simAgentRestart is the RestartService command of the simulated agents:
// unit "flaky" fails, unit "hang" never finishes, any other is restarted
// by bump, a stand-in unit's restart (agenttest.FakeUnit: kwok nodes have
// no systemd), whose InvocationID the agent checks as it checks a real
// unit's. It runs on this machine without chroot.
func simAgentRestart(bump string) string {
	return `case "$LULL_UNIT" in flaky) echo "unit flaky failed to start"; exit 3;; hang) sleep 300;; *) ` + bump + `; echo "restarted $LULL_UNIT (simulated)";; esac`
}

// startSimAgent runs lull-agent for a kwok node as a host process, the way
// docs/agent.md says simulated nodes get one: the production binary and
// reconciler, with reboots and power-offs done at the API level
// (--simulate-power: NotReady, a new boot ID, Ready again), as lull-agent's
// user with a token bound to the node (simAgentKubeconfig). It stops at the
// end of the test; hack/local-down.sh stops it too (pids/).
func startSimAgent(t *testing.T, node string) *proc {
	t.Helper()
	return startSimAgentBooting(t, node, 2*time.Second)
}

// startSimAgentBooting is startSimAgent whose simulated reboots keep the
// node down for boot.
func startSimAgentBooting(t *testing.T, node string, boot time.Duration) *proc {
	t.Helper()
	// The node's units and systemd are stand-ins (agenttest.Unit): a
	// restart, reload or daemon-reload is seen to happen as on a real node.
	u := agenttest.NewUnit(t.TempDir())
	p := &proc{name: "lull-agent-" + node, env: append(os.Environ(), "KUBECONFIG="+simAgentKubeconfig(t, node)), args: []string{
		filepath.Join(framework.BinDir(), "lull-agent"), "--node-name=" + node, "--namespace=lull-system",
		"--lease-namespace=" + lease.DefaultNamespace, "--drainer-identity=lull-drainer", "--host-root=/",
		"--simulate-power", "--simulated-boot-time=" + boot.String(), "--restart-command=" + simAgentRestart(u.Restart),
		"--reload-command=" + u.Reload, "--daemon-reload-command=" + u.DaemonReload,
		"--unit-state-command=" + u.State, "--manager-state-command=" + u.ManagerState,
		"--metrics-bind-address=0", "--health-probe-bind-address=0",
	}}
	require.NoError(t, p.start())
	t.Cleanup(func() {
		_ = p.kill(context.Background())
		_ = cluster.Clientset.CoordinationV1().Leases("lull-system").Delete(context.Background(), "lull-agent-"+node, metav1.DeleteOptions{})
	})
	return p
}

// actionsPolicy is the scenario's DisruptionPolicy, above the shipped one:
// the acceptance classes (ssh-keys nothing, chrony-config a restart of
// chronyd, kernel-update a drain and a reboot) and three of the test's own.
func (e *sysEnv) actionsPolicy() {
	e.t.Helper()
	p := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "e2e-actions"}, Spec: lullv1alpha1.DisruptionPolicySpec{
		Priority: 100,
		Rules: []lullv1alpha1.DisruptionRule{
			{Name: "ssh", Class: "ssh-keys", Action: lullv1alpha1.ActionNone},
			{Name: "chrony", Class: "chrony-config", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepRestartService, Unit: "chronyd"}}},
			{Name: "kernel", Class: "kernel-update", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.ActionDrain}, {Type: lullv1alpha1.StepReboot}}},
			{Name: "flaky", Class: "e2e-flaky", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepRestartService, Unit: "flaky"}}},
			{Name: "hang", Class: "e2e-hang", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepRestartService, Unit: "hang",
				Timeout: &lullv1alpha1.Duration{Duration: 3 * time.Second}}}},
			{Name: "hardware", Class: "e2e-hardware", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepPowerOff}}},
		}}}
	require.NoError(e.t, e.c.Create(e.t.Context(), p))
	e.t.Cleanup(func() { _ = e.c.Delete(context.Background(), p) })
}

// readyAgain powers on a node a simulated agent powered off: Ready again,
// and no longer marked off (agent.ConditionSimulatedPowerOff), so kwok
// plays its kubelet again and later scenarios find it as they expect.
func (e *sysEnv) readyAgain(node string) {
	n, err := cluster.Clientset.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		return
	}
	for i := range n.Status.Conditions {
		switch n.Status.Conditions[i].Type {
		case corev1.NodeReady:
			n.Status.Conditions[i].Status, n.Status.Conditions[i].Reason = corev1.ConditionTrue, "KubeletReady"
		case agent.ConditionSimulatedPowerOff:
			n.Status.Conditions[i].Status = corev1.ConditionFalse
		}
	}
	_, _ = cluster.Clientset.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{})
}

// deleteNM deletes node's request, if any, and waits until it is gone.
func (e *sysEnv) deleteNM(node string) {
	ctx := context.Background()
	_ = e.c.Delete(ctx, &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: node}})
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := e.c.Get(ctx, client.ObjectKey{Name: node}, &lullv1alpha1.NodeMaintenance{})
		return apierrors.IsNotFound(err), nil
	})
}

func (e *sysEnv) bootID(node string) string {
	e.t.Helper()
	n, err := cluster.Clientset.CoreV1().Nodes().Get(e.t.Context(), node, metav1.GetOptions{})
	require.NoError(e.t, err)
	return n.Status.NodeInfo.BootID
}

// Host actions on kwok nodes, with lull-drainer and simulated lull-agents
// as processes, the invariant watchers beside them (no host step starts
// without lull's current lease): the acceptance request (cordon, drain,
// reboot — planned before anything starts, and waiting for an agent until
// one runs), a failing and a hanging service restart that both end in a
// reboot, and a power-off that stays off until an admin completes it.
func TestSystemHostActions(t *testing.T) {
	e := newSysEnv(t)
	ctx := t.Context()
	nodes := e.pickNodes("e2e-actions", 4)
	accept, flaky, hang, off := nodes[0], nodes[1], nodes[2], nodes[3]
	e.window(&lullv1alpha1.MaintenanceWindow{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-actions"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{
			NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "e2e-actions"}},
			Strategy:       lullv1alpha1.StrategyPermissive,
			MaxUnavailable: ptr.To(intstr.FromInt32(4)),
		},
	})
	e.actionsPolicy()
	t.Cleanup(func() {
		e.readyAgain(off)
		// Later scenarios create requests for these nodes again.
		for _, n := range nodes {
			e.deleteNM(n)
		}
	})
	iv := e.watchInvariants(nodes...)
	iv.budget("e2e-actions", 4, nodes...)
	deployOn(t, "e2e-actions", accept, 2)

	// The acceptance request: the plan is there before anything starts,
	// and without an agent nothing is taken.
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: accept}, Spec: lullv1alpha1.NodeMaintenanceSpec{
		NodeName: accept, Classes: []string{"ssh-keys", "chrony-config", "kernel-update"}, Reason: "e2e acceptance"}}
	require.NoError(t, e.c.Create(ctx, nm))
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), nm) })
	got := e.waitNM(accept, "WaitingForAgent", time.Minute, inPhase(lullv1alpha1.PhaseWaitingForAgent))
	require.Equal(t, "Cordon, Drain, Reboot", policy.StepsLine(got.Status.Decision.Steps), "planned before it started")
	require.Equal(t, []string{"RestartService chronyd (chrony-config)"}, got.Status.Decision.Steps[2].Covers)
	require.Contains(t, got.Status.WaitingFor, "lull-agent")
	n, err := cluster.Clientset.CoreV1().Nodes().Get(ctx, accept, metav1.GetOptions{})
	require.NoError(t, err)
	require.False(t, n.Spec.Unschedulable, "nothing is done without an agent")
	_, err = cluster.Clientset.CoordinationV1().Leases(lease.DefaultNamespace).Get(ctx, lease.Name(accept), metav1.GetOptions{})
	require.Error(t, err, "no lease is taken without an agent")

	// A simulated agent gives its kwok node a boot ID, as a kubelet
	// reports one: the reboots are judged by its change.
	// The first boot ID each node shows is the one before any reboot: the
	// acceptance request starts as soon as its agent runs, and may have
	// rebooted the node before a poll would read it.
	firstBoot := watchFirstBootIDs(t, nodes...)
	for _, n := range nodes {
		startSimAgent(t, n)
	}
	boot := map[string]string{}
	for _, n := range nodes {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			boot[n] = firstBoot(n)
			return boot[n] != "", nil
		})
		require.NoError(t, err, "the simulated agent of %s gave it no boot ID", n)
	}
	e.patchNode(flaky, `{"metadata":{"labels":{"lull.dev/maintenance":"e2e-flaky"}}}`)
	e.patchNode(hang, `{"metadata":{"labels":{"lull.dev/maintenance":"e2e-hang"}}}`)
	e.patchNode(off, `{"metadata":{"labels":{"lull.dev/maintenance":"e2e-hardware"}}}`)

	t.Run("acceptance: cordon, drain, reboot", func(t *testing.T) {
		got := e.waitNM(accept, "Completed", 3*time.Minute, inPhase(lullv1alpha1.PhaseCompleted))
		require.Len(t, got.Status.Actions, 1, "only the reboot is a host step: %+v", got.Status.Actions)
		a := got.Status.Actions[0]
		require.Equal(t, lullv1alpha1.StepReboot, a.Type)
		require.Equal(t, lullv1alpha1.ActionSucceeded, a.State)
		require.Equal(t, boot[accept], a.BootID, "the boot ID before the reboot")
		require.NotEqual(t, boot[accept], e.bootID(accept), "the node came back with a new boot ID")
		require.Greater(t, iv.evictions(accept), 0, "drained before the reboot")
	})
	for _, tc := range []struct{ name, node, state, message string }{
		{"a failing restart falls back to a reboot", flaky, string(lullv1alpha1.ActionFailed), "unit flaky failed to start"},
		{"a hanging restart falls back to a reboot", hang, string(lullv1alpha1.ActionTimedOut), "did not finish within"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := e.waitNM(tc.node, "Completed", 3*time.Minute, inPhase(lullv1alpha1.PhaseCompleted))
			require.Len(t, got.Status.Actions, 2, "%+v", got.Status.Actions)
			restart, reboot := got.Status.Actions[0], got.Status.Actions[1]
			require.Equal(t, lullv1alpha1.StepRestartService, restart.Type)
			require.Equal(t, tc.state, string(restart.State))
			require.Contains(t, restart.Message, tc.message)
			require.Equal(t, lullv1alpha1.StepReboot, reboot.Type)
			require.True(t, reboot.Fallback, "the reboot is the fallback")
			require.Equal(t, lullv1alpha1.ActionSucceeded, reboot.State)
			require.True(t, meta.IsStatusConditionTrue(got.Status.Conditions, "FellBack"))
			require.NotEqual(t, boot[tc.node], e.bootID(tc.node), "rebooted")
		})
	}
	t.Run("a power-off stays off until completed", func(t *testing.T) {
		got := e.waitNM(off, "PoweredOff", 2*time.Minute, inPhase(lullv1alpha1.PhasePoweredOff))
		require.Equal(t, lullv1alpha1.ActionSucceeded, got.Status.Actions[0].State)
		require.Contains(t, got.Status.Actions[0].Message, "heartbeat has stopped", "done when the machine is seen down")
		// Nothing lets it go while the admin works: for 5 s the request
		// stays PoweredOff, the node NotReady (kwok leaves a simulated
		// power-off alone), cordoned and leased to lull.
		// The reads use the test's context: the poll's own ends at 5 s,
		// which is the expected outcome, not a failed read.
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			var cur lullv1alpha1.NodeMaintenance
			if err := e.c.Get(ctx, client.ObjectKey{Name: off}, &cur); err != nil || cur.Status.Phase != lullv1alpha1.PhasePoweredOff {
				return false, fmt.Errorf("request: %v, phase %s", err, cur.Status.Phase) //nolint:errorlint // err is nil when only the phase is wrong: %w would print %!w(<nil>)
			}
			n, err := cluster.Clientset.CoreV1().Nodes().Get(ctx, off, metav1.GetOptions{})
			if err != nil || !n.Spec.Unschedulable {
				return false, fmt.Errorf("node: %v, uncordoned", err) //nolint:errorlint // err is nil when the node is only uncordoned: %w would print %!w(<nil>)
			}
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					return false, fmt.Errorf("node %s Ready again while powered off", off)
				}
			}
			l, err := cluster.Clientset.CoordinationV1().Leases(lease.DefaultNamespace).Get(ctx, lease.Name(off), metav1.GetOptions{})
			if err != nil || !lease.SameFamily(ptr.Deref(l.Spec.HolderIdentity, ""), "lull-drainer") {
				return false, fmt.Errorf("lease: %v", err) //nolint:errorlint // err is nil when another holds the lease: %w would print %!w(<nil>)
			}
			return false, nil
		})
		require.True(t, wait.Interrupted(err), "a powered-off node's request changed: %v", err)
		e.complete(off)
	})
	require.Greater(t, iv.hostSteps(), 0, "the watchers saw the host steps start")
	iv.check()
	summary("host-actions", map[string]any{"hostSteps": iv.hostSteps(), "violations": 0})
}

// deployOn runs replicas pods of an opted-in Deployment on node (no
// PodDisruptionBudget: their replacements wait Pending, as pods of a
// rebooting single-node app would).
func deployOn(t *testing.T, name, node string, replicas int32) {
	t.Helper()
	dep := OptedInDeployment(name, replicas)
	dep.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	_, err := cluster.Clientset.AppsV1().Deployments("default").Create(t.Context(), dep, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { cluster.RemoveApp(t, name) })
	waitAppRunning(t.Context(), t, name, int(replicas))
}

// watchFirstBootIDs records, from now on, the first boot ID each of nodes
// reports; the returned function reads it ("" while none).
func watchFirstBootIDs(t *testing.T, nodes ...string) func(node string) string {
	t.Helper()
	w, err := cluster.Clientset.CoreV1().Nodes().Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	var mu sync.Mutex
	first := map[string]string{}
	go func() {
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || !slices.Contains(nodes, n.Name) || n.Status.NodeInfo.BootID == "" {
				continue
			}
			mu.Lock()
			if first[n.Name] == "" {
				first[n.Name] = n.Status.NodeInfo.BootID
			}
			mu.Unlock()
		}
	}()
	return func(node string) string { mu.Lock(); defer mu.Unlock(); return first[node] }
}
