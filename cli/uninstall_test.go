package cli

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/internal/settings"
)

func uninstallScene(ready int32) client.WithWatch {
	held := func(name string, st lullv1alpha1.NodeMaintenanceStatus) *lullv1alpha1.NodeMaintenance {
		return &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Finalizers: []string{lullv1alpha1.DrainerFinalizer}},
			Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: name}, Status: st}
	}
	return fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "lull-drainer", Namespace: "lull-system"}, Status: appsv1.DeploymentStatus{ReadyReplicas: ready}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{lullv1alpha1.MaintenanceLabel: "kernel-update"},
			Annotations: map[string]string{lullv1alpha1.CordonedByAnnotation: "uid-n1"}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2", Annotations: map[string]string{lullv1alpha1.CordonedByAnnotation: "uid-n2"}}},
		held("n1", lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDraining, CordonedByLull: true, WasUnschedulable: ptr.To(false), LeaseHolder: "lull-drainer/a"}),
		held("n2", lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseActing, CordonedByLull: true, WasUnschedulable: ptr.To(false), LeaseHolder: "lull-drainer/a",
			Actions: []lullv1alpha1.ActionStatus{{Type: lullv1alpha1.StepRestartService, Unit: "chronyd", State: lullv1alpha1.ActionRunning},
				{Type: lullv1alpha1.StepReboot, State: lullv1alpha1.ActionPending}}}),
		&lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n3"}, Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n3"},
			Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseCompleted}},
	).Build()
}

func uninstallOptions(out *bytes.Buffer) *options {
	return &options{out: out, errOut: out, settings: settings.Defaults(), clock: clocktesting.NewFakeClock(now)}
}

// The preview says what ending each held request does and changes nothing.
func TestUninstallPreview(t *testing.T) {
	c := uninstallScene(2)
	var out bytes.Buffer
	require.NoError(t, uninstallOptions(&out).uninstall(t.Context(), c, "lull-system", false, time.Second))
	require.Contains(t, out.String(), "Ending 2 request(s):")
	require.Contains(t, out.String(), "n1    Draining  uncordon (lull's cordon); release the node's lease; keep the label lull.dev/maintenance=kernel-update; record it Failed/Uninstalled")
	require.Contains(t, out.String(), "n2    Acting    uncordon (lull's cordon); release the node's lease; RestartService chronyd runs on in the host, its outcome not observed; skip Reboot;")
	require.NotContains(t, out.String(), "n3", "a finished request holds nothing")
	require.Contains(t, out.String(), "This is a preview; nothing was changed.")
	var d appsv1.Deployment
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Namespace: "lull-system", Name: "lull-drainer"}, &d))
	require.Empty(t, d.Annotations)
}

// --yes marks the Deployment and waits until lull-drainer has ended every
// request (played here by removing the finalizers), then says how to
// delete the install.
func TestUninstallYes(t *testing.T) {
	c := uninstallScene(1)
	var out bytes.Buffer
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { // lull-drainer, once marked
		for ctx.Err() == nil {
			var d appsv1.Deployment
			if c.Get(ctx, client.ObjectKey{Namespace: "lull-system", Name: "lull-drainer"}, &d) == nil && d.Annotations[lullv1alpha1.UninstallAnnotation] != "" {
				for _, n := range []string{"n1", "n2"} {
					var nm lullv1alpha1.NodeMaintenance
					if c.Get(ctx, client.ObjectKey{Name: n}, &nm) == nil {
						nm.Finalizers = nil
						_ = c.Update(ctx, &nm)
					}
				}
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	require.NoError(t, uninstallOptions(&out).uninstall(t.Context(), c, "lull-system", true, 10*time.Second))
	require.Contains(t, out.String(), "deployment.apps/lull-drainer annotated lull.dev/uninstall")
	require.Contains(t, out.String(), "Every request has ended (2). Now delete the install:\n  kubectl delete -k manifests/install")
	var d appsv1.Deployment
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Namespace: "lull-system", Name: "lull-drainer"}, &d))
	require.Equal(t, now.UTC().Format(time.RFC3339), d.Annotations[lullv1alpha1.UninstallAnnotation])
}

// Without a ready lull-drainer nothing would end the requests: --yes
// refuses and marks nothing; no Deployment at all says so.
func TestUninstallWithoutDrainer(t *testing.T) {
	var out bytes.Buffer
	c := uninstallScene(0)
	err := uninstallOptions(&out).uninstall(t.Context(), c, "lull-system", true, time.Second)
	require.ErrorContains(t, err, "lull-drainer has no ready replica")
	var d appsv1.Deployment
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Namespace: "lull-system", Name: "lull-drainer"}, &d))
	require.Empty(t, d.Annotations)
	err = uninstallOptions(&out).uninstall(t.Context(), c, "elsewhere", true, time.Second)
	require.ErrorContains(t, err, "no Deployment elsewhere/lull-drainer")
}

// A cordon that no longer carries lull's mark is left in place, and the
// preview says so.
func TestUninstallPreviewLeavesAnUnmarkedCordon(t *testing.T) {
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1"},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseUncordoning, CordonedByLull: true, CordonMarked: true, WasUnschedulable: ptr.To(false)}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Unschedulable: true}}
	require.Equal(t, "leave the cordon (it no longer carries lull's mark lull.dev/cordoned-by); record it Failed/Uninstalled", endingIt(nm, node, true, lullv1alpha1.MaintenanceLabel))
	node.Annotations = map[string]string{lullv1alpha1.CordonedByAnnotation: "uid-n1"}
	require.Equal(t, "uncordon (lull's cordon); record it Failed/Uninstalled", endingIt(nm, node, true, lullv1alpha1.MaintenanceLabel))
	// A request started by a lull from before the mark: its recorded
	// cordon is undone.
	nm.Status.CordonMarked, node.Annotations = false, nil
	require.Equal(t, "uncordon (lull's cordon); record it Failed/Uninstalled", endingIt(nm, node, true, lullv1alpha1.MaintenanceLabel))
}
