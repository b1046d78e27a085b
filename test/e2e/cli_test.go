package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/cli"
	"lull.dev/lull/internal/plan"
	"lull.dev/lull/lease"
)

// planOf previews a request of class for node with the real binary.
func planOf(t *testing.T, class, node string) plan.Node {
	t.Helper()
	out, code := lullctl(t, "plan", node, "--class", class, "-o", "json")
	require.Equal(t, 0, code, out)
	// A List of NodePlan items, each the preview's plan.Node.
	var res struct {
		Kind  string      `json:"kind"`
		Items []plan.Node `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Equal(t, "List", res.Kind, out)
	require.Len(t, res.Items, 1)
	return res.Items[0]
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
	out, code = lullctl(t, "plan", node, "--class", "kernel-update", "-o", "name")
	require.Equal(t, 0, code, out)
	require.Equal(t, "nodeplan.cli.lull.dev/"+node+"\n", out)

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
	require.Contains(t, out, "None (rule default/ssh-keys); completes at once")
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

// A maintenance label that is not a valid class: the drainer refuses it
// with an InvalidMaintenanceLabel event, and status says the label is
// invalid and why (not "Pending").
func TestCLIStatusOfAnInvalidLabel(t *testing.T) {
	e := newSysEnv(t)
	ctx := t.Context()
	nodes := e.pickNodes("e2e-cli-label", 2)
	classes := map[string]string{nodes[0]: "", nodes[1]: "Kernel_Update"}
	for node, class := range classes {
		e.patchNode(node, fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, lullv1alpha1.MaintenanceLabel, class))
	}
	for node := range classes {
		var last int
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			evs, err := cluster.Clientset.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + node + ",reason=InvalidMaintenanceLabel"})
			if err != nil {
				return false, err
			}
			last = len(evs.Items)
			return last > 0, nil
		})
		require.NoError(t, err, "the drainer reports InvalidMaintenanceLabel for %s (%d events seen); %s", node, last, cluster.LogsHint())
		err = e.c.Get(ctx, client.ObjectKey{Name: node}, &lullv1alpha1.NodeMaintenance{})
		require.True(t, err != nil && strings.Contains(err.Error(), "not found"), "no request for an invalid label: %v", err)
	}

	out, code := lullctl(t, append([]string{"status", "-o", `jsonpath={range .items[*]}{.metadata.name}={.phase}{"\n"}{end}`}, nodes...)...)
	require.Equal(t, 0, code, out)
	require.Equal(t, nodes[0]+"=InvalidLabel\n"+nodes[1]+"=InvalidLabel\n", out)
	out, code = lullctl(t, "status", nodes[1])
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "InvalidLabel")
	require.Contains(t, out, `the drainer refuses the label (event InvalidMaintenanceLabel): "Kernel_Update" is not a valid maintenance class`)
	out, code = lullctl(t, "status", nodes[0], "-o", "custom-columns=NODE:.metadata.name,CLASS:.class,PHASE:.phase", "--no-headers")
	require.Equal(t, 0, code, out)
	require.Equal(t, []string{nodes[0], "<none>", "InvalidLabel"}, strings.Fields(out))
}

// kubectl lull version: the client's, the server's, and lull's components
// as their Deployments in the install namespace say.
func TestCLIVersion(t *testing.T) {
	ctx := t.Context()
	cs := cluster.Clientset
	const ns = "e2e-cli-version"
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })

	out, code := lullctl(t, "version", "--lull-namespace", ns)
	require.Equal(t, 0, code, out)
	require.Regexp(t, `^Client Version: \S+\nServer Version: v1\.\d+\.\d+\S*\nlull: not installed in namespace `+ns+` \(no Deployment lull-scheduler or lull-drainer\)`, out)
	out, code = lullctl(t, "version", "--client")
	require.Equal(t, 0, code, out)
	require.Regexp(t, `^Client Version: \S+\n$`, out)

	// Deployments as manifests/install makes them (no replicas: nothing
	// needs to run for the version to be read).
	for _, name := range []string{"lull-scheduler", "lull-drainer"} {
		labels := map[string]string{"app.kubernetes.io/name": name}
		_, err := cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "lull.dev/" + name + ":v9.8.7"}}}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	agentLabels := map[string]string{"app.kubernetes.io/name": "lull-agent"}
	_, err = cs.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "lull-agent", Namespace: ns, Labels: agentLabels},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: agentLabels},
			// Selects no node: nothing needs to run for the version to be read.
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: agentLabels},
				Spec: corev1.PodSpec{NodeSelector: map[string]string{"e2e-cli-version": "none"},
					Containers: []corev1.Container{{Name: "lull-agent", Image: "lull.dev/lull-agent:v9.8.7"}}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	out, code = lullctl(t, "version", "--lull-namespace", ns, "-o", "json")
	require.Equal(t, 0, code, out)
	var v struct {
		Kind          string `json:"kind"`
		ServerVersion struct {
			GitVersion string `json:"gitVersion"`
		} `json:"serverVersion"`
		Components []struct {
			Name, Version, Image string
			Installed            bool
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	require.Equal(t, "Version", v.Kind)
	require.NotEmpty(t, v.ServerVersion.GitVersion)
	require.Len(t, v.Components, 3, out) // lull-scheduler, lull-drainer, lull-agent
	for _, c := range v.Components {
		require.True(t, c.Installed, out)
		require.Equal(t, "v9.8.7", c.Version, out)
		require.Equal(t, "lull.dev/"+c.Name+":v9.8.7", c.Image, out)
	}
}
