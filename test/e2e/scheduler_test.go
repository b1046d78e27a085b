package e2e

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/lease"
)

// TestLullSchedulerAvoidsDisruptedNodes runs the real lull-scheduler binary
// on the local kwok cluster: a Deployment that opts in never gets pods on a
// node labelled for maintenance, on a node leased by a third-party tool
// (through kubectl-lull), or on a node that joins already labelled; when
// the maintenance node is drained, its pods come back only on nodes lull
// considers safe.
func TestLullSchedulerAvoidsDisruptedNodes(t *testing.T) {
	ctx := t.Context()
	cs := cluster.Clientset
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(nodes.Items), 4)
	names := make([]string, 0, len(nodes.Items))
	for _, n := range nodes.Items {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	maint, leased := names[0], names[1]

	// A third-party actor leases one node; an operator labels another.
	out, code := lullctl(t, "lease", "acquire", leased, "--holder", "fw-updater", "--operation", "reboot", "--duration", "10m")
	require.Equal(t, 0, code, out)
	t.Cleanup(func() { _ = lease.New(cs, lease.Options{}).Release(context.Background(), leased, "fw-updater") })
	labelNode(ctx, t, maint, ptr.To("kernel-update"))
	t.Cleanup(func() { labelNode(context.Background(), t, maint, nil) })

	dep := OptedInDeployment("opted", 12)
	_, err = cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { cluster.RemoveApp(t, "opted") })
	byNode := waitAppRunning(ctx, t, "opted", 12, maint, leased)
	t.Logf("opted-in pods per node: %v (maintenance: %s, leased: %s)", byNode, maint, leased)

	// A node that registers already carrying the label gets nothing.
	fresh := "kwok-joins-labelled"
	_, err = cs.CoreV1().Nodes().Create(ctx, kwokNode(fresh, map[string]string{lullv1alpha1.MaintenanceLabel: "hardware"}), metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), fresh, metav1.DeleteOptions{}) })
	scale(ctx, t, "opted", 30)
	byNode = waitAppRunning(ctx, t, "opted", 30, maint, leased, fresh)
	t.Logf("after scaling to 30 with %s joined labelled: %v", fresh, byNode)

	// Pods that land on the maintenance node in the meantime would have
	// come from the default scheduler; lull's pods went elsewhere. Now
	// the label is removed and the lease released: the nodes are used again.
	labelNode(ctx, t, maint, nil)
	out, code = lullctl(t, "lease", "release", leased, "--holder", "fw-updater")
	require.Equal(t, 0, code, out)
	scale(ctx, t, "opted", 60)
	byNode = waitAppRunning(ctx, t, "opted", 60, fresh)
	t.Logf("after easing both nodes and scaling to 60: %v", byNode)
	require.NotZero(t, byNode[maint]+byNode[leased], "eased nodes receive pods again")
}

func kwokNode(name string, labels map[string]string) *corev1.Node {
	l := map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
	for k, v := range labels {
		l[k] = v
	}
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("110")}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}},
		Status:     corev1.NodeStatus{Allocatable: capacity, Capacity: capacity},
	}
}

// labelNode sets (value non-nil) or removes the maintenance label.
func labelNode(ctx context.Context, t *testing.T, node string, value *string) {
	t.Helper()
	v := "null"
	if value != nil {
		v = fmt.Sprintf("%q", *value)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, lullv1alpha1.MaintenanceLabel, v)
	_, err := cluster.Clientset.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
}

func scale(ctx context.Context, t *testing.T, name string, replicas int32) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	_, err := cluster.Clientset.AppsV1().Deployments("default").Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
}

// waitAppRunning waits until want pods of app are Running, failing at once
// if any is bound to one of the avoided nodes; it returns pods per node.
func waitAppRunning(ctx context.Context, t *testing.T, app string, want int, avoid ...string) map[string]int {
	t.Helper()
	var last map[string]int
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cluster.Clientset.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return false, nil
		}
		last = map[string]int{}
		running := 0
		for _, p := range pods.Items {
			for _, a := range avoid {
				require.NotEqual(t, a, p.Spec.NodeName, "pod %s bound to avoided node %s", p.Name, a)
			}
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				last[p.Spec.NodeName]++
				running++
			}
		}
		return running == want, nil
	})
	require.NoError(t, err, "waiting for %d Running %s pods; last seen per node: %v; %s", want, app, last, cluster.LogsHint())
	return last
}
