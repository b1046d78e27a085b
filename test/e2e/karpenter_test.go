package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/karpenter"
	"lull.dev/lull/drainer/maintenance"
	"lull.dev/lull/internal/disruptors"
	"lull.dev/lull/test/framework"
)

// Karpenter's real controllers (hack/build-binaries.sh karpenter-kwok,
// KARPENTER_VERSION) with its kwok cloud provider, beside lull on the
// local cluster: the provider creates each NodeClaim's Node itself (with
// kwok's annotation, so the cluster's kwok makes it Ready), and Karpenter
// provisions, consolidates and drifts them as it would cloud instances.
// It serves metrics and probes on every interface, so it runs in a
// network namespace of its own (runIsolated).

var (
	gvrNodePool  = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodepools"}
	gvrNodeClass = schema.GroupVersionResource{Group: "karpenter.kwok.sh", Version: "v1alpha1", Resource: "kwoknodeclasses"}
)

const karpenterPoolLabel = "e2e.lull.dev/karpenter"

var (
	karpenterOnce sync.Once
	karpenterErr  error
	karpenterDyn  dynamic.Interface
)

// startKarpenter brings Karpenter up once for the test binary: its CRDs,
// the kwok provider's, a KWOKNodeClass, and the controller.
func startKarpenter(t *testing.T) dynamic.Interface {
	t.Helper()
	karpenterOnce.Do(func() { karpenterDyn, karpenterErr = bringUpKarpenter() })
	require.NoError(t, karpenterErr)
	return karpenterDyn
}

func bringUpKarpenter() (dynamic.Interface, error) {
	ctx := context.Background()
	bin := filepath.Join(framework.BinDir(), "karpenter-kwok")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s: %w (hack/build-binaries.sh karpenter-kwok builds it)", bin, err)
	}
	dirs, err := framework.KarpenterCRDs()
	if err != nil {
		return nil, err
	}
	for _, dir := range dirs {
		if out, err := cluster.Kubectl(ctx, 2*time.Minute, "apply", "--server-side", "-f", dir); err != nil {
			return nil, fmt.Errorf("kubectl apply %s: %w\n%s", dir, err, out)
		}
	}
	if out, err := cluster.Kubectl(ctx, time.Minute, "wait", "--for=condition=Established", "crd", "--all", "--timeout=50s"); err != nil {
		return nil, fmt.Errorf("CRDs not established: %w\n%s", err, out)
	}
	dyn, err := dynamic.NewForConfig(cluster.Config)
	if err != nil {
		return nil, err
	}
	if _, err := dyn.Resource(gvrNodeClass).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
		"metadata": map[string]any{"name": "default"}, "spec": map[string]any{},
	}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	dir, err := os.MkdirTemp(cluster.Dir, "karpenter-")
	if err != nil {
		return nil, err
	}
	err = runIsolated(dir, "karpenter", []string{
		"KUBECONFIG=" + cluster.Kubeconfig,
		"DISABLE_LEADER_ELECTION=true",
		"LOG_LEVEL=debug",
		// Small batches: the tests' pods are few.
		"BATCH_MAX_DURATION=2s", "BATCH_IDLE_DURATION=500ms",
	}, filepath.Join(framework.BinDir(), "karpenter-kwok"))
	return dyn, err
}

// nodePool creates a NodePool of one-CPU kwok instances whose nodes carry
// karpenterPoolLabel=name, consolidating empty or underutilized nodes at
// once, and removes it (and its nodes) at the end of the test.
func nodePool(t *testing.T, dyn dynamic.Interface, name string) {
	t.Helper()
	ctx := t.Context()
	_, err := dyn.Resource(gvrNodePool).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{karpenterPoolLabel: name}},
				"spec": map[string]any{
					"nodeClassRef": map[string]any{"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
					"requirements": []any{
						map[string]any{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": []any{"c-1x-amd64-linux"}},
						map[string]any{"key": "karpenter.sh/capacity-type", "operator": "In", "values": []any{"on-demand"}},
					},
					"expireAfter": "Never",
				},
			},
			"disruption": map[string]any{"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
				"budgets": []any{map[string]any{"nodes": "100%"}}},
		},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx := context.Background()
		_ = dyn.Resource(gvrNodePool).Delete(ctx, name, metav1.DeleteOptions{})
		sel := metav1.ListOptions{LabelSelector: karpenterPoolLabel + "=" + name}
		_ = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			nodes, err := cluster.Clientset.CoreV1().Nodes().List(ctx, sel)
			return err == nil && len(nodes.Items) == 0, nil
		})
		// The kwok provider creates a Node after its NodeClaim's launch,
		// in the background: one whose NodeClaim went meanwhile is left
		// behind (Karpenter's kwok provider says so). Remove such orphans.
		_ = cluster.Clientset.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, sel)
	})
}

// karpenterApp runs replicas pods of 600m CPU (one per one-CPU node) on
// pool's nodes with the default scheduler, guarded by a
// PodDisruptionBudget of maxUnavailable 1.
func karpenterApp(t *testing.T, name, pool string, replicas int32) {
	t.Helper()
	cluster.GuardedApp(t, name, replicas, policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))}, func(s *corev1.PodSpec) {
		s.SchedulerName = corev1.DefaultSchedulerName
		s.NodeSelector = map[string]string{karpenterPoolLabel: pool}
		s.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("600m")}
	})
}

// stickyFinalizer keeps a pod, once evicted, until the test lets it go:
// a node it runs on stays being drained by whoever drains it.
const stickyFinalizer = "e2e.lull.dev/sticky"

// stickyPod runs a small pod on node that outlives its eviction until
// release is called (also at the end of the test).
func stickyPod(t *testing.T, name, node string) (release func()) {
	t.Helper()
	ctx := t.Context()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Finalizers: []string{stickyFinalizer}},
		Spec: corev1.PodSpec{NodeName: node,
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/sticky:1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}}}
	_, err := cluster.Clientset.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	release = func() {
		_, _ = cluster.Clientset.CoreV1().Pods("default").Patch(context.Background(), name, types.JSONPatchType,
			[]byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{})
		_ = cluster.Clientset.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
	}
	t.Cleanup(release)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cluster.Clientset.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	}), "pod %s never ran on %s", name, node)
	return release
}

// poolNodes lists pool's nodes, by name.
func poolNodes(ctx context.Context, pool string) ([]corev1.Node, error) {
	l, err := cluster.Clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: karpenterPoolLabel + "=" + pool})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(l.Items, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	return l.Items, nil
}

// lullsEntry is the budget entry lull recorded on the NodePool ("" none).
func lullsEntry(ctx context.Context, dyn dynamic.Interface, pool string) (string, []any, error) {
	np, err := dyn.Resource(gvrNodePool).Get(ctx, pool, metav1.GetOptions{})
	if err != nil {
		return "", nil, err
	}
	budgets, _, _ := unstructured.NestedSlice(np.Object, "spec", "disruption", "budgets")
	e, err := karpenter.Recorded(np)
	if err != nil || e == nil {
		return "", budgets, err
	}
	return e.Nodes, budgets, nil
}

// waitEntry waits until lull's entry on pool is want.
func waitEntry(t *testing.T, dyn dynamic.Interface, pool, want string, timeout time.Duration) {
	t.Helper()
	var got string
	var budgets []any
	require.NoError(t, wait.PollUntilContextTimeout(t.Context(), 300*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		got, budgets, err = lullsEntry(ctx, dyn, pool)
		return err == nil && got == want, nil
	}), "lull's budget entry on NodePool %s: want nodes %q, have %q (budgets %v); %s", pool, want, got, budgets, cluster.LogsHint())
	ok := slices.ContainsFunc(budgets, func(b any) bool { m, _ := b.(map[string]any); return len(m) == 1 && m["nodes"] == want })
	require.True(t, ok || want == "", "the NodePool's budgets %v carry lull's entry nodes %q", budgets, want)
}

// otherDisruptions records, for the nodes of a pool, every node another
// tool was seen disrupting (internal/disruptors), from a Node informer.
type otherDisruptions struct {
	mu   sync.Mutex
	seen map[string]disruptors.Disruption
}

func watchOtherDisruptions(t *testing.T, pool string) *otherDisruptions {
	od := &otherDisruptions{seen: map[string]disruptors.Disruption{}}
	note := func(o any) {
		n, ok := o.(*corev1.Node)
		if !ok || n.Labels[karpenterPoolLabel] != pool {
			return
		}
		if d, ok := disruptors.Of(n); ok {
			od.mu.Lock()
			if _, was := od.seen[n.Name]; !was {
				od.seen[n.Name] = d
			}
			od.mu.Unlock()
		}
	}
	Watch(t, cluster.Config, map[client.Object]toolscache.ResourceEventHandler{
		&corev1.Node{}: toolscache.ResourceEventHandlerFuncs{AddFunc: note, UpdateFunc: func(_, o any) { note(o) }},
	})
	return od
}

func (od *otherDisruptions) nodes() []string {
	od.mu.Lock()
	defer od.mu.Unlock()
	var out []string
	for n := range od.seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// poolWindow is an always-open window of maxUnavailable over pool's
// nodes, governing Karpenter or not.
func poolWindow(e *sysEnv, window, pool string, maxUnavailable int32, govern bool) {
	w := &lullv1alpha1.MaintenanceWindow{
		ObjectMeta: metav1.ObjectMeta{Name: window},
		Spec: lullv1alpha1.MaintenanceWindowSpec{
			NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{karpenterPoolLabel: pool}},
			Strategy:       lullv1alpha1.StrategyPermissive,
			MaxUnavailable: ptr.To(intstr.FromInt32(maxUnavailable)),
		},
	}
	if govern {
		w.Spec.Karpenter = &lullv1alpha1.KarpenterGovernance{GovernDisruption: true}
	}
	e.window(w)
}

// drift changes pool's template: every node of it drifts.
func drift(t *testing.T, dyn dynamic.Interface, pool string) {
	t.Helper()
	_, err := dyn.Resource(gvrNodePool).Patch(t.Context(), pool, types.MergePatchType,
		[]byte(`{"spec":{"template":{"metadata":{"labels":{"e2e.lull.dev/generation":"2"}}}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
}

// Issue 45: Karpenter and lull on one pool, the window (maxUnavailable
// 2) governing Karpenter. lull holds a drained, empty node: Karpenter's
// drift and consolidation never take it, while Karpenter does drift the
// pool's other nodes; lull's request for a node Karpenter is draining
// waits, naming Karpenter; lull's node and Karpenter's count together
// against the window (Karpenter takes no third); once lull lets its node
// go, Karpenter drifts it too (the control: the hold was all that kept
// it). Then the window closes: lull's entry holds Karpenter's
// consolidation of an empty node off, until the window opens again.
func TestKarpenterAndLullShareTheWindow(t *testing.T) {
	e := newSysEnv(t)
	dyn := startKarpenter(t)
	ctx := t.Context()
	const pool, window, app = "kp-e2e", "e2e-karpenter", "kp-app"
	poolWindow(e, window, pool, 2, true)
	nodePool(t, dyn, pool)
	// lull's entry appears with the room the window leaves: 2.
	waitEntry(t, dyn, pool, "2", 2*time.Minute)
	karpenterApp(t, app, pool, 2)
	byNode := waitAppRunning(ctx, t, app, 2)
	nodes, err := poolNodes(ctx, pool)
	require.NoError(t, err)
	require.Len(t, nodes, 2, "Karpenter launched one node per pod: %v", byNode)
	held, target := nodes[0].Name, nodes[1].Name
	t.Logf("Karpenter's nodes: %s (lull holds it), %s", held, target)
	od := watchOtherDisruptions(t, pool)
	iv := e.watchInvariants(held, target)
	iv.budgetSelecting(window, 2, map[string]string{karpenterPoolLabel: pool})
	// Once Karpenter drains target, it keeps at it until this pod goes.
	releaseSticky := stickyPod(t, "kp-sticky", target)

	// lull holds one node: drained (its pod moves to a node Karpenter
	// launches), empty, kept until its label goes.
	e.requestAll([]string{held})
	e.waitNM(held, "Drained", 2*time.Minute, inPhase(lullv1alpha1.PhaseDrained))
	n, err := cluster.Clientset.CoreV1().Nodes().Get(ctx, held, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "true", n.Annotations[maintenance.AnnotationDoNotDisrupt], "lull tells Karpenter to keep off the node it holds")
	// The window's room: 2 - 1 held by lull.
	waitEntry(t, dyn, pool, "1", time.Minute)
	waitAppRunning(ctx, t, app, 2)

	// Drift: no node of the pool matches its template any more.
	drift(t, dyn, pool)
	drifted := time.Now()
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 4*time.Minute, true, func(context.Context) (bool, error) {
		return slices.Contains(od.nodes(), target), nil
	}), "Karpenter never disrupted %s, drifted and not held by lull: the test shows nothing (disrupted: %v); %s", target, od.nodes(), cluster.LogsHint())
	t.Logf("Karpenter disrupted %v, %v after the drift (%s)", od.nodes(), time.Since(drifted).Round(time.Millisecond), od.seen[target].What)

	// lull's request for the node Karpenter is draining waits, naming it.
	e.requestAll([]string{target})
	nm := e.waitNM(target, "WaitingForLease", time.Minute, inPhase(lullv1alpha1.PhaseWaitingForLease))
	require.Equal(t, disruptors.Karpenter, nm.Status.LeaseHolder)
	require.Contains(t, nm.Status.WaitingFor, "karpenter")
	t.Logf("lull's request for %s: %s", target, nm.Status.WaitingFor)
	// Both count against the window: no room left. Karpenter subtracts
	// its own node itself, so lull's entry is 0 + 1, and Karpenter takes
	// no third node meanwhile.
	waitEntry(t, dyn, pool, "1", time.Minute)
	time.Sleep(15 * time.Second)
	require.NotContains(t, od.nodes(), held, "Karpenter disrupted the node lull holds")
	require.LessOrEqual(t, len(od.nodes()), 2, "Karpenter took a third node of a full window: %v", od.nodes())

	// Karpenter finishes; lull lets its node go, and Karpenter, no longer
	// kept off, drifts it (the control).
	releaseSticky()
	e.waitNM(target, "NodeNotFound or Completed", 3*time.Minute, func(nm *lullv1alpha1.NodeMaintenance) bool { return nm.Status.Phase.Finished() })
	e.deleteNM(target)
	e.complete(held)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 4*time.Minute, true, func(context.Context) (bool, error) {
		return slices.Contains(od.nodes(), held), nil
	}), "Karpenter never drifted %s once lull let it go: the hold was not what kept it; %s", held, cluster.LogsHint())
	t.Logf("control: once lull let %s go, Karpenter disrupted it (%s)", held, od.seen[held].What)
	iv.check()
	require.LessOrEqual(t, iv.maxDisrupting(window), 2, "never more than the window's maxUnavailable, lull and Karpenter together")
	t.Logf("at most %d of the window's nodes disrupting at once (lull and Karpenter)", iv.maxDisrupting(window))

	// The window closes: lull's entry is 0; an empty node is not
	// consolidated until the window opens again.
	require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		ns, err := poolNodes(ctx, pool)
		if err != nil {
			return false, nil
		}
		for i := range ns {
			if _, ok := disruptors.Of(&ns[i]); ok {
				return false, nil
			}
		}
		return len(ns) == 2, nil
	}), "the drift never settled on two new nodes; %s", cluster.LogsHint())
	start := time.Now().UTC().Add(12 * time.Hour).Format("15:04")
	e.editWindow(window, func(w *lullv1alpha1.MaintenanceWindow) {
		w.Spec.Strategy = lullv1alpha1.StrategySchedule
		w.Spec.Schedule = &lullv1alpha1.Schedule{TimeZone: "UTC", StartTime: start, Duration: lullv1alpha1.Duration{Duration: time.Hour},
			Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}}
	})
	waitEntry(t, dyn, pool, "0", time.Minute)
	settled, err := poolNodes(ctx, pool)
	require.NoError(t, err)
	closedOD := watchOtherDisruptions(t, pool)
	scale(ctx, t, app, 1)
	// Open, Karpenter consolidates an empty node within about 20 s (the
	// end of this test): twice that shows the closed window held it.
	time.Sleep(40 * time.Second)
	require.Empty(t, closedOD.nodes(), "Karpenter consolidated a node of the window while it was closed")
	t.Logf("window closed: no consolidation of %v in 40 s with one node empty", names(settled))
	opened := time.Now()
	e.editWindow(window, func(w *lullv1alpha1.MaintenanceWindow) {
		w.Spec.Override = &lullv1alpha1.Override{Strategy: lullv1alpha1.OverridePermissive,
			Until: metav1.Time{Time: time.Now().Add(time.Hour)}, Reason: "e2e: Karpenter's window"}
	})
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return len(closedOD.nodes()) > 0, nil
	}), "Karpenter never consolidated the empty node once the window opened: the closed case shows nothing; %s", cluster.LogsHint())
	t.Logf("window open: Karpenter consolidated %v %v later", closedOD.nodes(), time.Since(opened).Round(time.Millisecond))
	iv.check()
}

func names(ns []corev1.Node) []string {
	out := make([]string, len(ns))
	for i := range ns {
		out[i] = ns[i].Name
	}
	return out
}

// Issue 45, the control: the same pool without governDisruption. lull
// holds a node of a window of maxUnavailable 1 and Karpenter's drift
// disrupts another at once: lull writes no entry, Karpenter does not read
// lull's windows, and the watcher, which counts Karpenter's disruptions,
// sees the window exceeded. What the governed test keeps is the window's
// opt-in, not luck.
func TestKarpenterWithoutGovernanceExceedsTheWindow(t *testing.T) {
	e := newSysEnv(t)
	dyn := startKarpenter(t)
	ctx := t.Context()
	const pool, window, app = "kp-free", "e2e-karpenter-free", "kp-free-app"
	poolWindow(e, window, pool, 1, false)
	nodePool(t, dyn, pool)
	karpenterApp(t, app, pool, 2)
	waitAppRunning(ctx, t, app, 2)
	nodes, err := poolNodes(ctx, pool)
	require.NoError(t, err)
	require.Len(t, nodes, 2)
	held := nodes[0].Name
	od := watchOtherDisruptions(t, pool)
	iv := e.watchInvariants(held)
	iv.budgetSelecting(window, 1, map[string]string{karpenterPoolLabel: pool})
	e.requestAll([]string{held})
	e.waitNM(held, "Drained", 2*time.Minute, inPhase(lullv1alpha1.PhaseDrained))
	waitAppRunning(ctx, t, app, 2)
	drift(t, dyn, pool)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		return len(od.nodes()) > 0, nil
	}), "Karpenter never drifted a node; %s", cluster.LogsHint())
	require.NotContains(t, od.nodes(), held, "do-not-disrupt holds without governance too")
	entry, _, err := lullsEntry(ctx, dyn, pool)
	require.NoError(t, err)
	require.Empty(t, entry, "lull writes no entry for a window that does not govern Karpenter")
	require.Eventually(t, func() bool { return iv.maxDisrupting(window) >= 2 }, 10*time.Second, 100*time.Millisecond,
		"the watcher never counted Karpenter's node beside lull's")
	t.Logf("control: without governDisruption, %d of the window's nodes disrupting at once (maxUnavailable 1): lull's %s and Karpenter's %v",
		iv.maxDisrupting(window), held, od.nodes())
	e.complete(held)
}
