// Package machine runs lull's host steps on a real init system: real-node-1,
// a systemd-nspawn machine whose PID 1 is systemd (hack/real-node-1.sh),
// beside real-node-0 and kwok nodes, with lull installed as pods and
// lull-agent running its production commands there. Each step is judged by
// its effect: a unit's new InvocationID, the machine's new boot ID, a
// machine that stays down. The "no host step without lull's lease" watcher
// and a PodDisruptionBudget watcher run beside every scenario.
package machine

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/lease"
	"lull.dev/lull/test/e2e"
	"lull.dev/lull/test/framework"
)

const (
	machine = "real-node-1"
	label   = "lull.dev/maintenance"
)

var (
	cluster *e2e.Cluster
	c       client.Client
)

func TestMain(m *testing.M) {
	os.Exit(e2e.RealNodeMain(m, "machine", 2, "LULL_E2E_MACHINE_PORT_BASE", "29000", []string{"LULL_REAL_NODE_1=1"}, func(cl *e2e.Cluster, _ string) (err error) {
		cluster = cl
		c, err = client.New(cl.Config, client.Options{Scheme: lullscheme.New()})
		return err
	}))
}

// shell runs a command inside the machine (hack/real-node-1.sh shell).
func shell(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(framework.RepoRoot(), "hack", "real-node-1.sh"), append([]string{"shell"}, args...)...)
	cmd.Env = append(os.Environ(), "LULL_CLUSTER_DIR="+cluster.Dir, "LULL_BIN_DIR="+framework.BinDir())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "real-node-1 shell %v: %s", args, out)
	return strings.TrimSpace(string(out))
}

// powerOn boots the machine again after a power-off.
func powerOn(t *testing.T) {
	t.Helper()
	cmd := exec.Command(filepath.Join(framework.RepoRoot(), "hack", "real-node-1.sh"), "start")
	cmd.Env = append(os.Environ(), "LULL_CLUSTER_DIR="+cluster.Dir, "LULL_BIN_DIR="+framework.BinDir())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "hack/real-node-1.sh start: %s", out)
}

// startUnit writes the unit file name (content in printf's notation,
// without single quotes) into the machine's /etc/systemd/system, has
// systemd read it and starts the unit.
func startUnit(t *testing.T, name, content string) {
	t.Helper()
	shell(t, "sh", "-c", "printf '"+content+"' >/etc/systemd/system/"+name+" && systemctl daemon-reload && systemctl start "+name)
}

func poll(t *testing.T, what string, timeout time.Duration, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	last := ""
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, seen := cond(ctx)
		last = seen
		return ok, nil
	})
	require.NoError(t, err, "%s: not after %v; last seen: %s; %s", what, timeout, last, cluster.LogsHint())
}

func node(t *testing.T) *corev1.Node {
	t.Helper()
	n, err := cluster.Clientset.CoreV1().Nodes().Get(t.Context(), machine, metav1.GetOptions{})
	require.NoError(t, err)
	return n
}

func ready(n *corev1.Node) bool {
	for _, cd := range n.Status.Conditions {
		if cd.Type == corev1.NodeReady {
			return cd.Status == corev1.ConditionTrue
		}
	}
	return false
}

func patchNode(t *testing.T, name, patch string) {
	t.Helper()
	_, err := cluster.Clientset.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
}

// request labels the machine with class and waits until its request is in
// one of the phases; it returns the request and how long that took.
func request(t *testing.T, class string, timeout time.Duration, phases ...lullv1alpha1.MaintenancePhase) (*lullv1alpha1.NodeMaintenance, time.Duration) {
	t.Helper()
	// A finished request of an earlier scenario is replaced by the label.
	start := time.Now()
	patchNode(t, machine, fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, label, class))
	var nm lullv1alpha1.NodeMaintenance
	poll(t, "request "+class+" in "+fmt.Sprint(phases), timeout, func(ctx context.Context) (bool, string) {
		if err := c.Get(ctx, client.ObjectKey{Name: machine}, &nm); err != nil {
			return false, err.Error()
		}
		// Each scenario has a class of its own: the request of this one.
		for _, p := range phases {
			if nm.Spec.HasOnlyClass(class) && nm.Status.Phase == p {
				return true, ""
			}
		}
		return false, fmt.Sprintf("class %s phase %s: %s", nm.Spec.ClassNames(), nm.Status.Phase, nm.Status.WaitingFor)
	})
	return &nm, time.Since(start)
}

// fenced starts the "no host step without lull's lease" watcher.
func fenced(t *testing.T) *e2e.StepFencing {
	t.Helper()
	return e2e.WatchStepFencing(t, cluster.Config, machine)
}

// policy maps the scenarios' classes to their steps on the machine.
func policy(t *testing.T) {
	t.Helper()
	p := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "e2e-machine"}, Spec: lullv1alpha1.DisruptionPolicySpec{
		Priority: 100,
		Rules: []lullv1alpha1.DisruptionRule{
			{Name: "tour", Class: "e2e-tour", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepRestartService, Unit: "lull-tour.service"}}},
			{Name: "missing", Class: "e2e-missing", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepRestartService, Unit: "lull-missing.service"}}},
			// Issue 43: a unit whose name says nothing, whose settings
			// reboot the machine when it stops cleanly.
			{Name: "sneaky", Class: "e2e-sneaky", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepRestartService, Unit: "lull-sneaky"}}},
			// Issue 44: a oneshot service is inactive once it has run.
			{Name: "once", Class: "e2e-once", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepRestartService, Unit: "lull-once.service"}}},
			{Name: "reboot", Class: "e2e-reboot", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.ActionDrain}, {Type: lullv1alpha1.StepReboot}}},
			{Name: "power", Class: "e2e-power", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepPowerOff}}},
			// Issue 41, finding 6: a reboot with a short timeout, and a
			// drain for the window's other node.
			{Name: "short-reboot", Class: "e2e-short-reboot", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.ActionDrain},
				{Type: lullv1alpha1.StepReboot, Timeout: &lullv1alpha1.Duration{Duration: 45 * time.Second}}}},
			{Name: "drain-only", Class: "e2e-drain-only", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.ActionDrain}}},
			// Issue 30: a change of the tour's configuration restarts the
			// tour (the shipped policy decides the kernel arguments).
			{Name: "tour-files", Files: []string{"/etc/lull-tour/**"}, Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepRestartService, Unit: "lull-tour.service"}}},
		}}}
	err := c.Create(t.Context(), p)
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		require.NoError(t, err)
	}
}

// The acceptance of issue 29, in order on one machine: a service restart
// seen by its new InvocationID (no cordon); a drain and a real reboot with
// a PodDisruptionBudget-guarded workload; a restart that fails and falls
// back to a real reboot; a power-off that leaves the machine off until an
// admin powers it on and completes the request.
func TestHostStepsOnSystemd(t *testing.T) {
	policy(t)
	f := fenced(t)
	summary := map[string]time.Duration{}

	t.Run("RestartService: a new InvocationID, nothing cordoned", func(t *testing.T) {
		before := shell(t, "systemctl", "show", "-p", "InvocationID", "--value", "lull-tour.service")
		starts := strings.Count(shell(t, "cat", "/var/lib/lull-tour/starts"), "\n")
		nm, took := request(t, "e2e-tour", 2*time.Minute, lullv1alpha1.PhaseCompleted)
		summary["restart"] = took
		after := shell(t, "systemctl", "show", "-p", "InvocationID", "--value", "lull-tour.service")
		require.NotEqual(t, before, after, "the unit was restarted")
		require.Len(t, nm.Status.Actions, 1)
		require.Equal(t, lullv1alpha1.ActionSucceeded, nm.Status.Actions[0].State)
		require.Contains(t, nm.Status.Actions[0].Message, "InvocationID "+after+", was "+before)
		require.Equal(t, starts+1, strings.Count(shell(t, "cat", "/var/lib/lull-tour/starts"), "\n"), "restarted once")
		require.False(t, nm.Status.CordonedByLull, "no cordon")
		require.False(t, node(t).Spec.Unschedulable)
	})

	t.Run("Drain + Reboot: PDB kept, a new boot ID, uncordoned", func(t *testing.T) {
		patchNode(t, machine, `{"metadata":{"labels":{"e2e-target":"yes"}}}`)
		t.Cleanup(func() { patchNode(t, machine, `{"metadata":{"labels":{"e2e-target":null}}}`) })
		cluster.GuardedApp(t, "e2e-machine", 2, policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1))}, func(s *corev1.PodSpec) {
			s.Containers[0].Image = "lull.dev/pause:3.10-lull"
			s.Containers[0].ImagePullPolicy = corev1.PullNever
			s.Tolerations = []corev1.Toleration{{Key: "lull.dev/local-real-node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
			s.NodeSelector = map[string]string{"e2e-target": "yes"}
		})
		poll(t, "the workload Running on "+machine, 2*time.Minute, func(ctx context.Context) (bool, string) {
			pods, err := cluster.Clientset.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=e2e-machine"})
			if err != nil {
				return false, err.Error()
			}
			n := 0
			for _, p := range pods.Items {
				if p.Spec.NodeName == machine && p.Status.Phase == corev1.PodRunning {
					n++
				}
			}
			return n == 2, fmt.Sprintf("%d of 2 running there", n)
		})
		// Somewhere for the replacements to go: a simulated node.
		patchNode(t, "kwok-node-1", `{"metadata":{"labels":{"e2e-target":"yes"}}}`)
		t.Cleanup(func() { patchNode(t, "kwok-node-1", `{"metadata":{"labels":{"e2e-target":null}}}`) })
		low := watchHealthy(t, "e2e-machine")
		boot := node(t).Status.NodeInfo.BootID
		nm, took := request(t, "e2e-reboot", 5*time.Minute, lullv1alpha1.PhaseCompleted)
		summary["drain+reboot"] = took
		require.Len(t, nm.Status.Actions, 1)
		require.Equal(t, lullv1alpha1.ActionSucceeded, nm.Status.Actions[0].State, nm.Status.Actions[0].Message)
		require.Equal(t, boot, nm.Status.Actions[0].BootID)
		n := node(t)
		require.NotEqual(t, boot, n.Status.NodeInfo.BootID, "the machine rebooted")
		require.True(t, ready(n))
		require.False(t, n.Spec.Unschedulable, "uncordoned")
		require.GreaterOrEqual(t, low(), 1, "PodDisruptionBudget minAvailable 1 kept")
	})

	t.Run("a failing restart falls back to a real reboot", func(t *testing.T) {
		boot := node(t).Status.NodeInfo.BootID
		nm, took := request(t, "e2e-missing", 5*time.Minute, lullv1alpha1.PhaseCompleted)
		summary["failed restart, fallback"] = took
		require.Len(t, nm.Status.Actions, 2, "%+v", nm.Status.Actions)
		require.Equal(t, lullv1alpha1.ActionFailed, nm.Status.Actions[0].State)
		require.Contains(t, nm.Status.Actions[0].Message, "lull-missing.service")
		require.True(t, nm.Status.Actions[1].Fallback)
		require.Equal(t, lullv1alpha1.ActionSucceeded, nm.Status.Actions[1].State)
		require.True(t, meta.IsStatusConditionTrue(nm.Status.Conditions, "FellBack"))
		require.NotEqual(t, boot, node(t).Status.NodeInfo.BootID, "the machine rebooted")
	})

	// Issue 43: restarting a unit with SuccessAction=reboot-force stops it
	// cleanly and reboots the machine at once, undrained. lull-agent reads
	// what systemd says of the unit before it acts, refuses, and the
	// drainer falls back to a reboot with the node drained first.
	t.Run("a unit that reboots when restarted: refused on the node, a drained reboot instead", func(t *testing.T) {
		startUnit(t, "lull-sneaky.service", `[Unit]\nSuccessAction=reboot-force\n[Service]\nExecStart=/bin/sleep infinity\n`)
		boot := node(t).Status.NodeInfo.BootID
		nm, took := request(t, "e2e-sneaky", 5*time.Minute, lullv1alpha1.PhaseCompleted)
		summary["a rebooting unit refused, drained reboot"] = took
		require.Len(t, nm.Status.Actions, 2, "%+v", nm.Status.Actions)
		require.Equal(t, lullv1alpha1.ActionFailed, nm.Status.Actions[0].State)
		require.Contains(t, nm.Status.Actions[0].Message, "SuccessAction is reboot-force")
		require.True(t, nm.Status.Actions[1].Fallback)
		require.Equal(t, lullv1alpha1.ActionSucceeded, nm.Status.Actions[1].State, nm.Status.Actions[1].Message)
		require.True(t, meta.IsStatusConditionTrue(nm.Status.Conditions, "FellBack"), "fell back to a reboot, drained first")
		require.NotEqual(t, boot, node(t).Status.NodeInfo.BootID, "the machine rebooted, through lull's Reboot")
	})

	// Issue 44: "restarted" for a oneshot service is "ran again and
	// succeeded" (it is inactive after it ran): no fallback reboot.
	// Nothing references lull-once.service, so systemd unloads it once it
	// ran and its run is seen in the journal only.
	t.Run("a oneshot service: ran again, no reboot", func(t *testing.T) {
		startUnit(t, "lull-once.service", `[Service]\nType=oneshot\nExecStart=/bin/sh -c "date >>/var/lib/lull-once"\n`)
		boot := node(t).Status.NodeInfo.BootID
		nm, took := request(t, "e2e-once", 2*time.Minute, lullv1alpha1.PhaseCompleted)
		summary["oneshot restart"] = took
		require.Len(t, nm.Status.Actions, 1, "%+v", nm.Status.Actions)
		require.Equal(t, lullv1alpha1.ActionSucceeded, nm.Status.Actions[0].State, nm.Status.Actions[0].Message)
		require.Contains(t, nm.Status.Actions[0].Message, "oneshot unit lull-once.service ran again (invocation ")
		require.Equal(t, "2", shell(t, "sh", "-c", "wc -l </var/lib/lull-once"), "it ran twice: once by hand, once by lull")
		require.Equal(t, boot, node(t).Status.NodeInfo.BootID, "no reboot")
	})

	// Issue 44: "restarted" for a unit the change removed is "stopped and
	// gone": its file is removed and systemd reloaded (by the admin's own
	// tooling here; the request declares the change, it does not write
	// it), and RestartService of it succeeds without a fallback reboot.
	t.Run("a removed unit: stopped and gone, no reboot", func(t *testing.T) {
		const unit = "[Service]\nExecStart=/bin/sleep infinity\n"
		startUnit(t, "lull-gone.service", strings.ReplaceAll(unit, "\n", `\n`))
		shell(t, "sh", "-c", "systemctl stop lull-gone.service && rm /etc/systemd/system/lull-gone.service && systemctl daemon-reload")
		require.Equal(t, "not-found inactive", shell(t, "sh", "-c", "systemctl show -p LoadState -p ActiveState --value lull-gone.service | paste -sd' '"))
		boot := node(t).Status.NodeInfo.BootID
		old := tree(t, map[string]string{"etc/systemd/system/lull-gone.service": unit, "etc/hostname": "real-node-1\n"})
		next := tree(t, map[string]string{"etc/hostname": "real-node-1\n"})
		nm, took := lullRequest(t, lullv1alpha1.PhaseCompleted, "--from", old, "--to", next)
		summary["removed unit"] = took
		require.Equal(t, "DaemonReload, RestartService lull-gone.service", stepsLine(nm.Status.Actions))
		for _, a := range nm.Status.Actions {
			require.Equal(t, lullv1alpha1.ActionSucceeded, a.State, "%s: %s", a.Label(), a.Message)
		}
		require.Contains(t, nm.Status.Actions[1].Message, "unit lull-gone.service is gone (LoadState=not-found) and not running: nothing to restart")
		require.Equal(t, boot, node(t).Status.NodeInfo.BootID, "no reboot")
		require.False(t, meta.IsStatusConditionTrue(nm.Status.Conditions, "FellBack"))
	})

	// Issue 30: planned from two configurations, the change written by
	// lull-agent under the lease and verified on disk, then applied.
	t.Run("a changed configuration file: written, verified, its unit restarted, no cordon", func(t *testing.T) {
		shell(t, "sh", "-c", "mkdir -p /etc/lull-tour && printf 'hello\\n' >/etc/lull-tour/greeting && chmod 0644 /etc/lull-tour/greeting")
		old := tree(t, map[string]string{"etc/lull-tour/greeting": "hello\n"})
		next := tree(t, map[string]string{"etc/lull-tour/greeting": "hello, lull\n"})
		before := shell(t, "systemctl", "show", "-p", "InvocationID", "--value", "lull-tour.service")
		out := lullctl(t, "plan", machine, "--from", old, "--to", next)
		require.Contains(t, out, "file /etc/lull-tour/greeting (rule e2e-machine/tour-files): RestartService lull-tour.service")
		nm, took := lullRequest(t, lullv1alpha1.PhaseCompleted, "--from", old, "--to", next, "--write")
		summary["write + restart"] = took
		require.Equal(t, "WriteFiles, RestartService lull-tour.service", stepsLine(nm.Status.Actions))
		for _, a := range nm.Status.Actions {
			require.Equal(t, lullv1alpha1.ActionSucceeded, a.State, "%s: %s", a.Label(), a.Message)
		}
		require.Contains(t, nm.Status.Actions[0].Message, "1 file written and verified: /etc/lull-tour/greeting")
		require.Equal(t, "hello, lull", shell(t, "cat", "/etc/lull-tour/greeting"), "the new content on the machine's disk")
		require.Equal(t, "644 root root", shell(t, "stat", "-c", "%a %U %G", "/etc/lull-tour/greeting"))
		after := shell(t, "systemctl", "show", "-p", "InvocationID", "--value", "lull-tour.service")
		require.NotEqual(t, before, after, "the unit was restarted")
		require.False(t, nm.Status.CordonedByLull, "no cordon")
		require.False(t, node(t).Spec.Unschedulable)
	})

	t.Run("a kernel argument change: Drain + Reboot", func(t *testing.T) {
		boot := node(t).Status.NodeInfo.BootID
		old := tree(t, map[string]string{"etc/kernel/cmdline": "quiet\n"})
		next := tree(t, map[string]string{"etc/kernel/cmdline": "quiet lull.e2e=1\n"})
		nm, took := lullRequest(t, lullv1alpha1.PhaseCompleted, "--from", old, "--to", next)
		summary["kernel argument: drain + reboot"] = took
		require.Equal(t, "Cordon, Drain, Reboot", policySteps(nm))
		require.Equal(t, "default/kernel-arguments", nm.Status.Decision.Changes[0].RuleRef())
		require.Equal(t, lullv1alpha1.ActionSucceeded, nm.Status.Actions[len(nm.Status.Actions)-1].State)
		require.NotEqual(t, boot, node(t).Status.NodeInfo.BootID, "the machine rebooted")
		require.False(t, node(t).Spec.Unschedulable, "uncordoned")
	})

	// Issue 31: the node says it needs a reboot (the package manager's
	// sentinel); lull-agent requests it, lull drains and reboots the
	// machine, and the sentinel, on /run, is gone after the boot.
	t.Run("a reboot sentinel on the machine: requested, drained, rebooted, cleared", func(t *testing.T) {
		boot := node(t).Status.NodeInfo.BootID
		start := time.Now()
		shell(t, "sh", "-c", "echo '*** System restart required ***' >/var/run/reboot-required && echo linux-image-e2e >/var/run/reboot-required.pkgs")
		var nm lullv1alpha1.NodeMaintenance
		poll(t, "the sentinel's request Completed", 4*time.Minute, func(ctx context.Context) (bool, string) {
			if err := c.Get(ctx, client.ObjectKey{Name: machine}, &nm); err != nil {
				return false, err.Error()
			}
			return nm.Annotations[lullv1alpha1.RequestedByAnnotation] == lullv1alpha1.RequestedBySentinel && nm.Status.Phase == lullv1alpha1.PhaseCompleted,
				fmt.Sprintf("%s %s: %s", nm.Spec.ClassNames(), nm.Status.Phase, nm.Status.WaitingFor)
		})
		summary["reboot sentinel: request, drain, reboot"] = time.Since(start)
		require.Equal(t, []string{lullv1alpha1.DefaultSentinelClass}, nm.Spec.Classes)
		require.Equal(t, "reboot required: /var/run/reboot-required (packages: linux-image-e2e)", nm.Spec.Reason)
		require.Equal(t, "Cordon, Drain, Reboot", policySteps(&nm))
		require.NotEqual(t, boot, node(t).Status.NodeInfo.BootID, "the machine rebooted")
		require.False(t, node(t).Spec.Unschedulable, "uncordoned")
		poll(t, "the sentinel recorded as cleared", time.Minute, func(ctx context.Context) (bool, string) {
			if err := c.Get(ctx, client.ObjectKey{Name: machine}, &nm); err != nil {
				return false, err.Error()
			}
			cd := meta.FindStatusCondition(nm.Status.Conditions, lullv1alpha1.ConditionRebootSentinel)
			return cd != nil && cd.Status == metav1.ConditionFalse, fmt.Sprint(cd)
		})
		require.Equal(t, "absent", shell(t, "sh", "-c", "test -e /var/run/reboot-required && echo present || echo absent"), "/run is new after the boot")
	})

	// Issue 41, finding 6: a reboot that does not come back within its
	// timeout (the machine boots, its kubelet does not start: the node
	// stays NotReady with the old boot ID) keeps lull's cordon, lease and
	// budget slot, so the window's next node never starts until the node
	// is seen back — a bad kernel stops after maxUnavailable nodes.
	t.Run("a reboot that does not come back keeps the budget slot", func(t *testing.T) {
		const other = "kwok-node-0"
		for _, n := range []string{machine, other} {
			patchNode(t, n, `{"metadata":{"labels":{"e2e-kept":"yes"}}}`)
		}
		w := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "e2e-kept"}, Spec: lullv1alpha1.MaintenanceWindowSpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"e2e-kept": "yes"}},
			Strategy:     lullv1alpha1.StrategyPermissive, MaxUnavailable: ptr.To(intstr.FromInt32(1))}}
		require.NoError(t, c.Create(t.Context(), w))
		t.Cleanup(func() {
			_ = c.Delete(context.Background(), w)
			for _, n := range []string{machine, other} {
				patchNode(t, n, fmt.Sprintf(`{"metadata":{"labels":{"e2e-kept":null,%q:null}}}`, label))
			}
		})
		// The next boot skips the kubelet.
		shell(t, "sh", "-c", "mkdir -p /etc/systemd/system/kubelet.service.d && "+
			"printf '[Unit]\\nConditionPathExists=/var/lib/lull-e2e-no-such-file\\n' >/etc/systemd/system/kubelet.service.d/90-e2e-kept-down.conf && "+
			"systemctl daemon-reload")
		boot := node(t).Status.NodeInfo.BootID
		nm, _ := request(t, "e2e-short-reboot", 4*time.Minute, lullv1alpha1.PhaseActing)
		poll(t, "the reboot timed out and the node held unwell", 4*time.Minute, func(ctx context.Context) (bool, string) {
			if err := c.Get(ctx, client.ObjectKey{Name: machine}, nm); err != nil {
				return false, err.Error()
			}
			return meta.IsStatusConditionTrue(nm.Status.Conditions, "NodeUnwell"), fmt.Sprintf("phase %s: %s", nm.Status.Phase, nm.Status.WaitingFor)
		})
		require.Equal(t, lullv1alpha1.PhaseActing, nm.Status.Phase, "held, not ended")
		last := nm.Status.Actions[len(nm.Status.Actions)-1]
		require.Equal(t, lullv1alpha1.ActionTimedOut, last.State, last.Message)
		require.True(t, node(t).Spec.Unschedulable, "still cordoned")
		l, err := cluster.Clientset.CoordinationV1().Leases(lease.DefaultNamespace).Get(t.Context(), lease.Name(machine), metav1.GetOptions{})
		require.NoError(t, err)
		require.True(t, lease.SameFamily(ptr.Deref(l.Spec.HolderIdentity, ""), "lull-drainer"), "still leased to lull")

		// The window's other node is requested: it waits for the slot the
		// unwell node keeps, and never starts meanwhile.
		patchNode(t, other, fmt.Sprintf(`{"metadata":{"labels":{%q:"e2e-drain-only"}}}`, label))
		var waiting lullv1alpha1.NodeMaintenance
		poll(t, other+" waiting for the budget", time.Minute, func(ctx context.Context) (bool, string) {
			if err := c.Get(ctx, client.ObjectKey{Name: other}, &waiting); err != nil {
				return false, err.Error()
			}
			return waiting.Status.Phase == lullv1alpha1.PhaseWaitingForBudget, fmt.Sprintf("phase %s: %s", waiting.Status.Phase, waiting.Status.WaitingFor)
		})
		// Who holds the slot, as kubectl lull status reads it: the node
		// that is down.
		var all lullv1alpha1.NodeMaintenanceList
		require.NoError(t, c.List(t.Context(), &all))
		require.Equal(t, []string{machine}, budget.Holders(budget.Recorded(&waiting.Status), func(yield func(*lullv1alpha1.NodeMaintenance) bool) {
			for i := range all.Items {
				if !yield(&all.Items[i]) {
					return
				}
			}
		}), "the unwell node holds the slot %s waits for: %s", other, waiting.Status.WaitingFor)
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: other}, &waiting))
			require.False(t, waiting.Status.Phase.Disrupting(), "%s started while %s is down: %s", other, machine, waiting.Status.Phase)
			require.False(t, waiting.Status.CordonedByLull, "%s cordoned while %s is down", other, machine)
			time.Sleep(time.Second)
		}
		t.Logf("%s waits: %s", other, waiting.Status.WaitingFor)

		// The node comes back: seen back, the request ends, the slot
		// goes to the next node.
		shell(t, "sh", "-c", "rm /etc/systemd/system/kubelet.service.d/90-e2e-kept-down.conf && systemctl daemon-reload && systemctl start kubelet")
		poll(t, "the request completed once the node is back", 4*time.Minute, func(ctx context.Context) (bool, string) {
			var cur lullv1alpha1.NodeMaintenance
			err := c.Get(ctx, client.ObjectKey{Name: machine}, &cur)
			return err == nil && cur.Status.Phase == lullv1alpha1.PhaseCompleted, fmt.Sprint(err, cur.Status.Phase, cur.Status.WaitingFor)
		})
		n := node(t)
		require.NotEqual(t, boot, n.Status.NodeInfo.BootID, "it rebooted")
		require.False(t, n.Spec.Unschedulable, "uncordoned")
		poll(t, other+" starts once the slot is free", 2*time.Minute, func(ctx context.Context) (bool, string) {
			err := c.Get(ctx, client.ObjectKey{Name: other}, &waiting)
			return err == nil && waiting.Status.Phase == lullv1alpha1.PhaseDrained, fmt.Sprint(err, waiting.Status.Phase, waiting.Status.WaitingFor)
		})
	})

	t.Run("PowerOff: the machine stays off, cordoned and leased, until completed", func(t *testing.T) {
		nm, took := request(t, "e2e-power", 4*time.Minute, lullv1alpha1.PhasePoweredOff)
		summary["power-off"] = took
		require.Equal(t, lullv1alpha1.ActionSucceeded, nm.Status.Actions[len(nm.Status.Actions)-1].State)
		n := node(t)
		require.False(t, ready(n), "NotReady")
		require.True(t, n.Spec.Unschedulable, "cordoned")
		l, err := cluster.Clientset.CoordinationV1().Leases(lease.DefaultNamespace).Get(t.Context(), lease.Name(machine), metav1.GetOptions{})
		require.NoError(t, err)
		require.True(t, lease.SameFamily(ptr.Deref(l.Spec.HolderIdentity, ""), "lull-drainer"), "leased to lull")
		powerOn(t)
		poll(t, machine+" Ready again", 3*time.Minute, func(ctx context.Context) (bool, string) {
			return ready(node(t)), "NotReady"
		})
		patchNode(t, machine, fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, label))
		poll(t, "the request completed", 2*time.Minute, func(ctx context.Context) (bool, string) {
			var cur lullv1alpha1.NodeMaintenance
			err := c.Get(ctx, client.ObjectKey{Name: machine}, &cur)
			return err == nil && cur.Status.Phase == lullv1alpha1.PhaseCompleted, fmt.Sprint(err, cur.Status.Phase)
		})
		require.False(t, node(t).Spec.Unschedulable, "uncordoned")
	})

	require.Greater(t, f.Starts(), 0, "the watcher saw the host steps start")
	require.Empty(t, f.Violations(), "host steps without lull's lease")
	for what, d := range summary {
		fmt.Printf("machine: %s on %s: request -> end %v\n", what, machine, d.Round(100*time.Millisecond))
	}
}

// watchHealthy records the fewest ready pods of app seen at once from now
// on; the returned function reads it.
func watchHealthy(t *testing.T, app string) func() int {
	t.Helper()
	w, err := cluster.Clientset.CoreV1().Pods("default").Watch(t.Context(), metav1.ListOptions{LabelSelector: "app=" + app})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	var mu sync.Mutex
	low := 1 << 30
	pods := map[types.UID]*corev1.Pod{}
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			mu.Lock()
			if ev.Type == watch.Deleted {
				delete(pods, p.UID)
			} else {
				pods[p.UID] = p
			}
			n := 0
			for _, q := range pods {
				if q.DeletionTimestamp == nil && q.Status.Phase == corev1.PodRunning && podReady(q) {
					n++
				}
			}
			if len(pods) > 0 && n < low {
				low = n
			}
			mu.Unlock()
		}
	}()
	return func() int { mu.Lock(); defer mu.Unlock(); return low }
}

func podReady(p *corev1.Pod) bool {
	for _, cd := range p.Status.Conditions {
		if cd.Type == corev1.PodReady {
			return cd.Status == corev1.ConditionTrue
		}
	}
	return false
}

// tree writes files (path → content) under a new directory standing for
// a node's /.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
	}
	return root
}

// lullctl runs kubectl-lull as the cluster's admin (a maintainer).
func lullctl(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), filepath.Join(framework.BinDir(), "kubectl-lull"), append([]string{"--kubeconfig", cluster.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "kubectl lull %v: %s", args, out)
	return string(out)
}

// lullRequest requests maintenance of the machine with kubectl lull
// request and waits until its request is in phase; it returns the request
// and how long that took.
func lullRequest(t *testing.T, phase lullv1alpha1.MaintenancePhase, args ...string) (*lullv1alpha1.NodeMaintenance, time.Duration) {
	t.Helper()
	start := time.Now()
	out := lullctl(t, append([]string{"request", machine, "--reason", "e2e " + t.Name()}, args...)...)
	t.Logf("kubectl lull request: %s", out)
	var nm lullv1alpha1.NodeMaintenance
	poll(t, "request in "+string(phase), 4*time.Minute, func(ctx context.Context) (bool, string) {
		if err := c.Get(ctx, client.ObjectKey{Name: machine}, &nm); err != nil {
			return false, err.Error()
		}
		return nm.Status.Phase == phase && nm.Spec.Changes != nil && nm.CreationTimestamp.After(start.Add(-time.Second)),
			fmt.Sprintf("phase %s: %s", nm.Status.Phase, nm.Status.WaitingFor)
	})
	return &nm, time.Since(start)
}

func stepsLine(as []lullv1alpha1.ActionStatus) string {
	parts := make([]string, len(as))
	for i := range as {
		parts[i] = as[i].Label()
	}
	return strings.Join(parts, ", ")
}

func policySteps(nm *lullv1alpha1.NodeMaintenance) string {
	parts := make([]string, len(nm.Status.Decision.Steps))
	for i, st := range nm.Status.Decision.Steps {
		parts[i] = lullv1alpha1.StepLabel(st.Type, st.Unit)
	}
	return strings.Join(parts, ", ")
}
