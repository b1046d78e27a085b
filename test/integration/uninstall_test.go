package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"lull.dev/lull/agent"
	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/app"
	"lull.dev/lull/drainer/maintenance"
	"lull.dev/lull/internal/settings"
	"lull.dev/lull/lease"
)

// drainerDeployment stands for the installed Deployment lull-drainer (no
// controller runs it here): deleting it is what helm uninstall does first.
func (e *drainEnv) drainerDeployment() *appsv1.Deployment {
	e.t.Helper()
	lbl := map[string]string{"app": "lull-drainer"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "lull-drainer", Namespace: "lull-system"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: lbl}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "d", Image: "lull-drainer"}}}}}}
	_, err := e.cs.AppsV1().Deployments("lull-system").Create(e.ctx, d, metav1.CreateOptions{})
	require.NoError(e.t, err)
	e.t.Cleanup(func() {
		_ = e.cs.AppsV1().Deployments("lull-system").Delete(context.Background(), "lull-drainer", metav1.DeleteOptions{})
	})
	return d
}

func endOnUninstall(o *app.Options) {
	o.EndOnUninstall, o.LeaderElectionNamespace, o.UninstallPoll = true, "lull-system", 100*time.Millisecond
}

// uninstallScene has three requests as an uninstall finds them: n1
// draining, held by a PodDisruptionBudget; n2 acting, its reboot running;
// n3 waiting for a window. It returns the drainer's stop function.
func (e *drainEnv) uninstallScene() context.CancelFunc {
	e.t.Helper()
	e.node("n1", map[string]string{"pool": "a"})
	e.pods("n1", "db", 2)
	e.pdb("db", "db", 0)
	e.node("n2", map[string]string{"pool": "b"})
	e.readyNode("n2", "boot-1")
	e.pods("n2", "web", 1)
	e.node("n3", map[string]string{"pool": "c"})
	e.actionsPolicy()
	e.noonWindow("c")                         // opens at 12:00 UTC; the fake clock stays at 10:00
	for _, pool := range []string{"a", "b"} { // a budget slot each
		e.window(pool, func(w *lullv1alpha1.MaintenanceWindow) {
			w.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": pool}}
		})
	}
	e.drainerDeployment()
	stop := e.start(endOnUninstall)
	// A reboot that takes an hour: still running when lull goes.
	a := e.newAgent("n2", &agent.SimulatedPower{Client: cp.Client, Node: "n2", BootTime: time.Hour, Clock: clock.RealClock{},
		Commands: &agent.Commands{HostRoot: "/"}})
	e.startAgent(a)
	e.label("n1", ptr.To("os-patch"))
	e.label("n3", ptr.To("os-patch"))
	require.NoError(e.t, e.c.Create(e.ctx, &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n2"},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n2", Classes: []string{"kernel-update"}}}))
	e.waitNM("n1", "blocked by its budget", func(nm *lullv1alpha1.NodeMaintenance) bool { return len(nm.Status.Blockers) > 0 })
	e.waitNM("n2", "rebooting", func(nm *lullv1alpha1.NodeMaintenance) bool {
		return nm.Status.Phase == lullv1alpha1.PhaseActing && len(nm.Status.Actions) > 0 && nm.Status.Actions[0].State == lullv1alpha1.ActionRunning
	})
	e.waitNM("n3", "waiting for its window", phaseIs(lullv1alpha1.PhaseWaitingForWindow))
	return stop
}

// requireEndedByUninstall checks what an uninstall leaves: every request
// Failed/Uninstalled without lull's finalizer, lull's cordons undone, no
// node lease, the labels as their users set them, the budget's pods not
// evicted, the running reboot said to be unobserved.
func (e *drainEnv) requireEndedByUninstall(deleted func() []string) {
	e.t.Helper()
	for _, n := range []string{"n1", "n2", "n3"} {
		nm := e.waitNM(n, "ended by the uninstall, its finalizer gone", func(nm *lullv1alpha1.NodeMaintenance) bool {
			return nm.Status.Phase == lullv1alpha1.PhaseFailed && !controllerutil.ContainsFinalizer(nm, maintenance.Finalizer)
		})
		c := findCond(nm, maintenance.ConditionCordoned)
		require.NotNil(e.t, c, n)
		require.Equal(e.t, maintenance.ReasonUninstalled, c.Reason, n)
		require.Contains(e.t, c.Message, "lull was uninstalled", n)
		require.False(e.t, e.nodeObj(n).Spec.Unschedulable, "%s: lull's cordon undone", n)
		require.Empty(e.t, e.leaseHolder(n), "%s: lease released", n)
		if n == "n2" {
			require.Contains(e.t, c.Message, "lull-agent was running Reboot, whose outcome was not observed")
		}
	}
	for _, n := range []string{"n1", "n3"} {
		require.Equal(e.t, "os-patch", e.nodeObj(n).Labels["lull.dev/maintenance"], "%s: the label stays", n)
	}
	for _, name := range deleted() {
		require.NotContains(e.t, name, "db-", "a pod protected by an exhausted budget was evicted")
	}
}

func findCond(nm *lullv1alpha1.NodeMaintenance, t string) *metav1.Condition {
	for i := range nm.Status.Conditions {
		if nm.Status.Conditions[i].Type == t {
			return &nm.Status.Conditions[i]
		}
	}
	return nil
}

// Helm deletes the Deployment first: the running drainer sees it and ends
// every request, and makes none from a label left on a node.
func TestUninstallEndsRequestsWhileRunning(t *testing.T) {
	e := newDrainEnv(t)
	deleted := e.deletions()
	e.uninstallScene()
	require.NoError(t, e.cs.AppsV1().Deployments("lull-system").Delete(e.ctx, "lull-drainer", metav1.DeleteOptions{}))
	e.requireEndedByUninstall(deleted)

	// A finished record deleted, its label still set: no new request.
	require.NoError(t, e.c.Delete(e.ctx, &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}))
	e.waitGone("n1")
	e.clock.Step(time.Minute)
	time.Sleep(time.Second) // an absence: give the drainer its chance to get it wrong
	err := e.c.Get(e.ctx, client.ObjectKey{Name: "n1"}, &lullv1alpha1.NodeMaintenance{})
	require.True(t, apierrors.IsNotFound(err), "a request made from a label during an uninstall: %v", err)
}

// kubectl lull uninstall marks the Deployment: the running drainer ends
// every request before anything is deleted.
func TestUninstallMarkEndsRequests(t *testing.T) {
	e := newDrainEnv(t)
	deleted := e.deletions()
	e.uninstallScene()
	in := maintenance.Install{Namespace: "lull-system"}
	uninstalling, _, err := in.Uninstalling(e.ctx, cp.Client)
	require.NoError(t, err)
	require.False(t, uninstalling, "the Deployment is there, unmarked: a restart is not an uninstall")
	patch := []byte(`{"metadata":{"annotations":{"` + lullv1alpha1.UninstallAnnotation + `":"2026-11-21T10:00:00Z"}}}`)
	_, err = e.cs.AppsV1().Deployments("lull-system").Patch(e.ctx, "lull-drainer", types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
	e.requireEndedByUninstall(deleted)
	uninstalling, why, err := in.Uninstalling(e.ctx, cp.Client)
	require.NoError(t, err)
	require.True(t, uninstalling)
	require.Contains(t, why, "marked lull.dev/uninstall")

	// The mark removed (keep lull after all): the label still on n1 asks
	// again, and a new request replaces the ended one.
	ended := e.waitNM("n1", "ended", phaseIs(lullv1alpha1.PhaseFailed))
	patch = []byte(`{"metadata":{"annotations":{"` + lullv1alpha1.UninstallAnnotation + `":null}}}`)
	_, err = e.cs.AppsV1().Deployments("lull-system").Patch(e.ctx, "lull-drainer", types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
	e.waitNM("n1", "a new request from the label", func(nm *lullv1alpha1.NodeMaintenance) bool {
		return nm.UID != ended.UID && nm.Status.Phase == lullv1alpha1.PhaseDraining
	})
}

// The drainer stopped before it ended the requests (helm uninstall
// deletes the Deployment, and its pods stop at once): WindDown, run after
// the signal with a direct client, ends them.
func TestUninstallWindDownAfterSignal(t *testing.T) {
	e := newDrainEnv(t)
	deleted := e.deletions()
	stop := e.uninstallScene()
	stop()
	require.NoError(t, e.cs.AppsV1().Deployments("lull-system").Delete(e.ctx, "lull-drainer", metav1.DeleteOptions{}))
	uninstalling, why, err := maintenance.Install{Namespace: "lull-system"}.Uninstalling(e.ctx, cp.Client)
	require.NoError(t, err)
	require.True(t, uninstalling)
	require.Contains(t, why, "Deployment lull-system/lull-drainer was deleted")

	r := &maintenance.Reconciler{Client: cp.Client, APIReader: cp.Client, Kube: e.cs, Clock: e.clock,
		Leases:  lease.New(e.cs, lease.Options{Namespace: lease.DefaultNamespace, Clock: e.clock}),
		Options: maintenance.Options{Settings: settings.Defaults()}}
	n, err := r.WindDown(e.ctx)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	e.requireEndedByUninstall(deleted)
	// Once more (the other replica): nothing left to do, nothing fails.
	n, err = r.WindDown(e.ctx)
	require.NoError(t, err)
	require.Zero(t, n)
}

func (e *drainEnv) waitGone(name string) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		err := e.c.Get(e.ctx, client.ObjectKey{Name: name}, &lullv1alpha1.NodeMaintenance{})
		return apierrors.IsNotFound(err)
	}, 10*time.Second, 50*time.Millisecond, "%s still there", name)
}
