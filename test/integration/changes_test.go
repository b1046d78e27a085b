package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"lull.dev/lull/agent"
	"lull.dev/lull/agent/agenttest"
	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/hostfiles"
	"lull.dev/lull/internal/policy"
)

// changeEnv is a drainer, a policy deciding the changes of these tests, a
// host root with the old /etc/chrony.conf, and a NodeConfig writing the
// new one and a drop-in of tour.service.
type changeEnv struct {
	*drainEnv
	root string
	unit agenttest.Unit
}

func newChangeEnv(t *testing.T) *changeEnv {
	e := &changeEnv{drainEnv: newDrainEnv(t), root: t.TempDir(), unit: agenttest.NewUnit(t.TempDir())}
	e.node("n1", nil)
	e.readyNode("n1", "boot-1")
	e.pods("n1", "web", 1)
	p := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "changes"}, Spec: lullv1alpha1.DisruptionPolicySpec{Rules: []lullv1alpha1.DisruptionRule{
		{Name: "chrony", Files: []string{"/etc/chrony.conf"}, Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepRestartService, Unit: "chronyd"}}},
		{Name: "units", Units: []string{"*"}, Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepDaemonReload}, {Type: lullv1alpha1.StepRestartService}}},
	}}}
	require.NoError(t, e.c.Create(e.ctx, p))
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), p) })
	for _, ns := range []string{lullv1alpha1.ConfigNamespace, "lull-system"} {
		if err := e.c.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err)
		}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "lull-admission", Namespace: "lull-system"},
		Data: map[string]string{"writablePaths": "/etc/**", "protectedPaths": "/etc/kubernetes/**"}}
	if err := e.c.Create(e.ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	require.NoError(t, os.MkdirAll(filepath.Join(e.root, "etc"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(e.root, "etc/chrony.conf"), []byte("pool a\n"), 0o644))
	return e
}

// config makes the NodeConfig name and the request for it.
func (e *changeEnv) request(name string) {
	e.t.Helper()
	nc := &lullv1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: lullv1alpha1.ConfigNamespace},
		Spec: lullv1alpha1.NodeConfigSpec{Files: []lullv1alpha1.ConfigFile{
			{Path: "/etc/chrony.conf", Previous: hostfiles.SHA256([]byte("pool a\n")), Contents: []byte("pool b\n")},
			{Path: "/etc/systemd/system/tour.service.d/10-lull.conf", Contents: []byte("[Service]\nEnvironment=GREETING=hello\n")},
		}}}
	require.NoError(e.t, e.c.Create(e.ctx, nc))
	e.t.Cleanup(func() { _ = e.c.Delete(context.Background(), nc) })
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1",
		Changes: &lullv1alpha1.Changes{Files: []string{"/etc/chrony.conf"}, Units: []string{"tour.service"}, Config: name}}}
	require.NoError(e.t, e.c.Create(e.ctx, nm))
}

// startAgent runs lull-agent on n1 with the stand-in unit, writing under
// the env's host root.
func (e *changeEnv) startAgent(c *agent.Commands) {
	e.t.Helper()
	c.HostRoot = "/"
	c.Restart, c.DaemonReload, c.UnitState, c.ManagerState = e.unit.Restart, e.unit.DaemonReload, e.unit.State, e.unit.ManagerState
	a := e.newAgent("n1", &agent.SimulatedPower{Client: cp.Client, Node: "n1", BootTime: 50 * time.Millisecond, Clock: clock.RealClock{}, Commands: c})
	a.Files = &agent.Files{Live: cp.Client, HostRoot: e.root, ConfigNamespace: lullv1alpha1.ConfigNamespace,
		Admission: types.NamespacedName{Namespace: "lull-system", Name: "lull-admission"}}
	e.drainEnv.startAgent(a)
}

// A request planned from a change and carrying its configuration: the
// files are written and verified under the lease, then systemd reloads its
// units and the units restart. A unit's drop-in is among the files, so the
// node is drained first: a unit runs anything as root.
func TestChangesWrittenUnderTheLease(t *testing.T) {
	e := newChangeEnv(t)
	violations := e.fencedWatcher("n1")
	e.start(nil)
	e.startAgent(&agent.Commands{})
	e.request("c1")
	nm := e.waitNM("n1", "Completed", phaseIs(lullv1alpha1.PhaseCompleted))
	require.Equal(t, "Cordon, Drain, WriteFiles, DaemonReload, RestartService chronyd, RestartService tour.service", policy.StepsLine(nm.Status.Decision.Steps))
	require.Equal(t, lullv1alpha1.ActionDrain, nm.Status.Decision.Action, "the plan's most disruptive step")
	require.Equal(t, "c1", nm.Status.Decision.Config)
	require.Len(t, nm.Status.Decision.Changes, 2)
	require.Equal(t, "changes/chrony", nm.Status.Decision.Changes[0].RuleRef())
	require.Len(t, nm.Status.Actions, 4)
	for _, a := range nm.Status.Actions {
		require.Equal(t, lullv1alpha1.ActionSucceeded, a.State, "%s: %s", a.Label(), a.Message)
	}
	require.Contains(t, nm.Status.Actions[0].Message, "2 files written and verified")
	b, err := os.ReadFile(filepath.Join(e.root, "etc/chrony.conf"))
	require.NoError(t, err)
	require.Equal(t, "pool b\n", string(b))
	require.FileExists(t, filepath.Join(e.root, "etc/systemd/system/tour.service.d/10-lull.conf"))
	require.NotNil(t, nm.Status.DrainedAt, "drained before the unit was written")
	require.Empty(t, e.leaseHolder("n1"), "lease released")
	require.Empty(t, violations())
}

// A file changed by hand since the configuration the request was planned
// from: the request fails with the path and both hashes, nothing written,
// no fallback reboot.
func TestChangesDriftFailsTheRequest(t *testing.T) {
	e := newChangeEnv(t)
	require.NoError(t, os.WriteFile(filepath.Join(e.root, "etc/chrony.conf"), []byte("pool edited-by-hand\n"), 0o644))
	e.start(nil)
	e.startAgent(&agent.Commands{})
	e.request("c2")
	nm := e.waitNM("n1", "Failed", phaseIs(lullv1alpha1.PhaseFailed))
	require.Len(t, nm.Status.Actions, 4, "no fallback reboot")
	w := nm.Status.Actions[0]
	require.Equal(t, lullv1alpha1.StepWriteFiles, w.Type)
	require.Equal(t, lullv1alpha1.ActionFailed, w.State)
	require.Contains(t, w.Message, "/etc/chrony.conf")
	require.Contains(t, w.Message, hostfiles.SHA256([]byte("pool a\n")))
	require.Contains(t, w.Message, hostfiles.SHA256([]byte("pool edited-by-hand\n")))
	b, err := os.ReadFile(filepath.Join(e.root, "etc/chrony.conf"))
	require.NoError(t, err)
	require.Equal(t, "pool edited-by-hand\n", string(b), "nothing written")
	require.NoFileExists(t, filepath.Join(e.root, "etc/systemd/system/tour.service.d/10-lull.conf"))
	require.Empty(t, e.leaseHolder("n1"), "lease released")
	require.Equal(t, "boot-1", e.nodeObj("n1").Status.NodeInfo.BootID, "not rebooted")
}

// A daemon-reload that fails falls back to a reboot, draining first.
func TestChangesDaemonReloadFailsFallsBackToReboot(t *testing.T) {
	e := newChangeEnv(t)
	e.start(nil)
	c := &agent.Commands{}
	e.startAgent(c)
	c.DaemonReload = `echo "Failed to reload daemon: Access denied"; exit 1`
	e.request("c3")
	nm := e.waitNM("n1", "Completed", phaseIs(lullv1alpha1.PhaseCompleted))
	require.Equal(t, lullv1alpha1.ActionSucceeded, nm.Status.Actions[0].State, "the files were written")
	require.Equal(t, lullv1alpha1.ActionFailed, nm.Status.Actions[1].State)
	require.Contains(t, nm.Status.Actions[1].Message, "Access denied")
	last := nm.Status.Actions[len(nm.Status.Actions)-1]
	require.True(t, last.Fallback)
	require.Equal(t, lullv1alpha1.ActionSucceeded, last.State)
	require.Equal(t, metav1.ConditionTrue, nmCond(nm, "FellBack"))
	require.Zero(t, e.podsOn("n1"), "the fallback reboot drained first")
	require.NotEqual(t, "boot-1", e.nodeObj("n1").Status.NodeInfo.BootID)
}

// A finished request, whoever made it, makes way for the label: labelling
// the node after a kubectl lull request (here, one planned from a change)
// completed makes a new request. Found by the systemd machine's scenarios,
// where a label after a CLI request asked for nothing.
func TestLabelReplacesFinishedRequestOfAnyOrigin(t *testing.T) {
	e := newChangeEnv(t)
	e.start(nil)
	e.startAgent(&agent.Commands{})
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1",
		Annotations: map[string]string{lullv1alpha1.RequestedByAnnotation: lullv1alpha1.RequestedByCLI}},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Changes: &lullv1alpha1.Changes{SSHKeys: []string{"core"}}}}
	require.NoError(t, e.c.Create(e.ctx, nm))
	old := e.waitNM("n1", "Completed", phaseIs(lullv1alpha1.PhaseCompleted))
	e.label("n1", ptr.To("kernel-update"))
	e.waitNM("n1", "a new request from the label", func(nm *lullv1alpha1.NodeMaintenance) bool {
		return nm.UID != old.UID && nm.Spec.HasOnlyClass("kernel-update")
	})
}

// The reboot sentinel end to end on a real API server: the file appears,
// lull-agent requests a reboot of its node, the drainer drains it and the
// agent reboots it, and the request completes; a sentinel still there
// after the reboot is reported on the request and requests nothing more;
// gone, it is recorded as cleared.
func TestSentinelDrivesAReboot(t *testing.T) {
	e := newDrainEnv(t)
	e.node("n1", nil)
	e.readyNode("n1", "boot-1")
	e.pods("n1", "web", 1)
	e.installDefaultPolicy()
	violations := e.fencedWatcher("n1")
	e.start(nil)
	e.startAgent(e.newAgent("n1", &agent.SimulatedPower{Client: cp.Client, Node: "n1", BootTime: 50 * time.Millisecond, Clock: clock.RealClock{},
		Commands: &agent.Commands{HostRoot: "/"}}))
	file := filepath.Join(t.TempDir(), "reboot-required")
	s := &agent.Sentinel{Live: cp.Client, Client: cp.Client, Node: "n1", Commands: &agent.Commands{HostRoot: "/"}, File: file,
		Class: lullv1alpha1.DefaultSentinelClass, Period: time.Second, Clock: e.clock}
	require.NoError(t, s.Check(e.ctx))
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	require.NoError(t, os.WriteFile(file+".pkgs", []byte("linux-image-amd64\n"), 0o644))
	require.NoError(t, s.Check(e.ctx))
	nm := e.waitNM("n1", "Completed", phaseIs(lullv1alpha1.PhaseCompleted))
	require.Equal(t, "reboot required: "+file+" (packages: linux-image-amd64)", nm.Spec.Reason)
	require.Equal(t, "Cordon, Drain, Reboot", policy.StepsLine(nm.Status.Decision.Steps))
	require.Equal(t, "default/reboot-required", nm.Status.Decision.RuleRef())
	require.NotEqual(t, "boot-1", e.nodeObj("n1").Status.NodeInfo.BootID, "rebooted")
	require.Zero(t, e.podsOn("n1"), "drained first")

	// The sentinel checks every period, as it does on a node: a status
	// write that meets the drainer's last one (a conflict) is made again
	// at the next check, which a single Check here would not do.
	checking := func(cond func(*lullv1alpha1.NodeMaintenance) bool) func(*lullv1alpha1.NodeMaintenance) bool {
		return func(nm *lullv1alpha1.NodeMaintenance) bool {
			if cond(nm) {
				return true
			}
			require.NoError(t, s.Check(e.ctx))
			return false
		}
	}
	nm = e.waitNM("n1", "the sentinel reported", checking(func(nm *lullv1alpha1.NodeMaintenance) bool {
		c := meta.FindStatusCondition(nm.Status.Conditions, lullv1alpha1.ConditionRebootSentinel)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == "StillPresent"
	}))
	uid := nm.UID
	require.NoError(t, s.Check(e.ctx))
	require.Equal(t, uid, e.waitNM("n1", "the same request", phaseIs(lullv1alpha1.PhaseCompleted)).UID, "no second reboot")
	require.NoError(t, os.Remove(file))
	e.waitNM("n1", "the sentinel cleared", checking(func(nm *lullv1alpha1.NodeMaintenance) bool {
		c := meta.FindStatusCondition(nm.Status.Conditions, lullv1alpha1.ConditionRebootSentinel)
		return c != nil && c.Status == metav1.ConditionFalse
	}))
	require.Empty(t, violations())
}
