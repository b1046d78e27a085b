package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/pkg/cli"
	"lull.dev/lull/pkg/lease"
	"lull.dev/lull/pkg/plan"
)

// planOf previews a request of class for node with the real binary.
func planOf(t *testing.T, class, node string) plan.Node {
	t.Helper()
	out, code := lullctl(t, "plan", node, "--class", class, "-o", "json")
	require.Equal(t, 0, code, out)
	var res plan.Result
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Len(t, res.Nodes, 1)
	return res.Nodes[0]
}

// kubectl lull against the running system: plan and request warn about a
// node leased by another actor, request refuses without --force and
// proceeds with it; status, why, windows and complete show and end the
// request; a None class completes at once.
func TestCLIRequestWarnsThenForce(t *testing.T) {
	e := newSysEnv(t)
	ctx := t.Context()
	node := e.pickNodes("e2e-cli", 1)[0]
	out, code := lullctl(t, "lease", "acquire", node, "--holder", "fw-updater", "--operation", "reboot", "--reason", "firmware 2.1", "--duration", "10m")
	require.Equal(t, 0, code, out)
	t.Cleanup(func() {
		_ = lease.New(cluster.Clientset, lease.Options{}).Release(context.Background(), node, "fw-updater")
		_ = e.c.Delete(context.Background(), &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})

	// The preview, as JSON: the shipped policy drains kernel updates; the
	// request would wait for the holder.
	p := planOf(t, "kernel-update", node)
	require.Equal(t, lullv1alpha1.ActionDrain, p.Action)
	require.Equal(t, "default/kernel-update", p.Rule)
	require.Equal(t, plan.StartHolder, p.Start)

	// Without --force: warned, nothing requested, exit 4.
	out, code = lullctl(t, "request", node, "--class", "kernel-update", "--reason", "CVE-2026-1234")
	require.Equal(t, cli.ExitNeedsForce, code, out)
	require.Contains(t, out, "Warning: "+node+": node is leased by fw-updater for reboot (firmware 2.1)")
	require.Contains(t, out, "use --force")
	err := e.c.Get(ctx, client.ObjectKey{Name: node}, &lullv1alpha1.NodeMaintenance{})
	require.True(t, err != nil && strings.Contains(err.Error(), "not found"), "nothing requested without --force: %v", err)

	// With --force: requested; the drainer waits for the holder.
	out, code = lullctl(t, "request", node, "--class", "kernel-update", "--reason", "CVE-2026-1234", "--force")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "nodemaintenance/"+node+" requested: Drain (rule default/kernel-update)")
	e.waitNM(node, "WaitingForLease", time.Minute, inPhase(lullv1alpha1.PhaseWaitingForLease))
	out, code = lullctl(t, "status", node)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "WaitingForLease")
	require.Contains(t, out, "fw-updater/reboot")

	// A second request for the node is refused as well.
	out, code = lullctl(t, "request", node, "--class", "hardware", "--reason", "disk")
	require.Equal(t, cli.ExitNeedsForce, code, out)
	require.Contains(t, out, "node is already under maintenance: NodeMaintenance "+node+" (class kernel-update, phase WaitingForLease)")

	// why: a lull-scheduled pod that can only go to the leased node.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "why-" + node, Namespace: "default"},
		Spec: corev1.PodSpec{SchedulerName: "lull-scheduler", NodeSelector: map[string]string{"kubernetes.io/hostname": node},
			Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}}}}},
	}
	require.NoError(t, e.c.Create(ctx, pod))
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), pod, client.GracePeriodSeconds(0)) })
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		out, code = lullctl(t, "why", pod.Name, "-n", "default")
		return code == 0 && strings.Contains(out, "Scheduler:"), nil
	}), "the scheduler reports the pod unschedulable: %s", out)
	require.Contains(t, out, node)
	require.Contains(t, out, `node is leased for disruption by "fw-updater" for reboot`)

	out, code = lullctl(t, "windows")
	require.Equal(t, 0, code, out)

	// The holder releases: the drain runs; complete ends it.
	out, code = lullctl(t, "lease", "release", node, "--holder", "fw-updater")
	require.Equal(t, 0, code, out)
	e.waitNM(node, "Drained", 2*time.Minute, inPhase(lullv1alpha1.PhaseDrained))
	out, code = lullctl(t, "complete", node)
	require.Equal(t, 0, code, out)
	e.waitNM(node, "Completed", time.Minute, inPhase(lullv1alpha1.PhaseCompleted))
	require.NoError(t, e.c.Delete(ctx, pod, client.GracePeriodSeconds(0)))

	// A class the policy says needs nothing: recorded, completed at once,
	// the node never cordoned.
	out, code = lullctl(t, "request", node, "--class", "ssh-keys", "--reason", "rotate keys")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "None (rule default/ssh-keys), completes at once")
	nm := e.waitNM(node, "Completed", time.Minute, inPhase(lullv1alpha1.PhaseCompleted))
	require.Equal(t, lullv1alpha1.ActionNone, nm.Status.Decision.Action)
	require.Nil(t, nm.Status.StartedAt)
	var n corev1.Node
	require.NoError(t, e.c.Get(ctx, client.ObjectKey{Name: node}, &n))
	require.False(t, n.Spec.Unschedulable)

	out, code = lullctl(t, "cancel", node)
	require.Equal(t, 1, code, "nothing active to cancel: %s", out)
	require.Contains(t, out, "no active maintenance request for node(s) "+node)
}
