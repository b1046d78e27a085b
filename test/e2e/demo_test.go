package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/lease"
	"lull.dev/lull/test/framework"
)

// demoOwner is the label hack/demo.sh puts on everything it creates.
const demoOwner = "app.kubernetes.io/managed-by=lull-demo"

// runDemo runs hack/demo.sh against the e2e cluster and returns its output.
func runDemo(t *testing.T) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(framework.RepoRoot(), "hack", "demo.sh"))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cluster.Kubeconfig, "LULL_DEMO_KEEP=0",
		"LULL_LEASE_NAMESPACE="+lease.DefaultNamespace, "PATH="+framework.BinDir()+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	t.Logf("hack/demo.sh:\n%s", out)
	return string(out), err
}

// userWalkthrough does what the README walkthrough tells a user to do, on
// nodes of this test: the sample windows, a canary node drained, a general
// node requested and the weekend window opened by an emergency override.
// The maintenance stays in place, as a user in the middle of it leaves it.
func userWalkthrough(t *testing.T, e *sysEnv) (canary, general string) {
	t.Helper()
	ctx := t.Context()
	canary, general = e.pickNodes("canary", 1)[0], e.pickNodes("general", 1)[0]
	out, err := cluster.Kubectl(ctx, time.Minute, "apply", "-f", filepath.Join(framework.RepoRoot(), "manifests", "samples", "windows.yaml"))
	require.NoError(t, err, out)
	t.Cleanup(func() {
		for _, n := range []string{canary, general} {
			e.patchNodeBg(n, `{"metadata":{"labels":{"lull.dev/maintenance":null}}}`)
		}
		for _, n := range []string{canary, general} {
			// The test's context is done by now: wait on a fresh one.
			_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				var nm lullv1alpha1.NodeMaintenance
				err := e.c.Get(ctx, client.ObjectKey{Name: n}, &nm)
				return err == nil && nm.Status.Phase == lullv1alpha1.PhaseCompleted, nil
			})
			_ = e.c.Delete(context.Background(), &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: n}})
		}
		_, _ = cluster.Kubectl(context.Background(), time.Minute, "delete", "--ignore-not-found", "maintenancewindow", "weekend", "canary")
	})
	for _, n := range []string{canary, general} {
		out, err = cluster.Kubectl(ctx, time.Minute, "label", "node", n, "lull.dev/maintenance=kernel-update")
		require.NoError(t, err, out)
	}
	e.waitNM(canary, "Drained", 2*time.Minute, inPhase(lullv1alpha1.PhaseDrained))
	until := time.Now().UTC().Add(time.Hour).Format(time.RFC3339)
	out, err = cluster.Kubectl(ctx, time.Minute, "patch", "mw", "weekend", "--type", "merge", "-p",
		`{"spec":{"override":{"strategy":"Permissive","until":"`+until+`","reason":"CVE fix"}}}`)
	require.NoError(t, err, out)
	e.waitNM(general, "Drained", 2*time.Minute, inPhase(lullv1alpha1.PhaseDrained))
	return canary, general
}

// userSnapshot is what of the user's objects the demo must not change:
// identity, generation, spec and metadata (status is lull's to update),
// each as JSON so a difference shows as text.
func userSnapshot(t *testing.T, e *sysEnv, nodes ...string) map[string]string {
	t.Helper()
	ctx := t.Context()
	snap := map[string]string{}
	add := func(key string, v any) {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		snap[key] = string(b)
	}
	for _, name := range []string{"weekend", "canary"} {
		var w lullv1alpha1.MaintenanceWindow
		require.NoError(t, e.c.Get(ctx, client.ObjectKey{Name: name}, &w))
		add("window/"+name, []any{w.UID, w.Generation, w.Labels, w.Annotations, w.Spec})
	}
	var dp lullv1alpha1.DisruptionPolicy
	require.NoError(t, e.c.Get(ctx, client.ObjectKey{Name: "default"}, &dp))
	add("policy/default", []any{dp.UID, dp.Generation, dp.Labels, dp.Spec})
	for _, n := range nodes {
		var nm lullv1alpha1.NodeMaintenance
		require.NoError(t, e.c.Get(ctx, client.ObjectKey{Name: n}, &nm))
		add("nm/"+n, []any{nm.UID, nm.Generation, nm.Labels, nm.Spec, nm.Status.Phase})
		node, err := cluster.Clientset.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		require.NoError(t, err)
		add("node/"+n, []any{node.UID, node.Labels, node.Spec.Unschedulable, node.Spec.Taints})
		l, err := cluster.Clientset.CoordinationV1().Leases(lease.DefaultNamespace).Get(ctx, lease.Name(n), metav1.GetOptions{})
		require.NoError(t, err)
		add("lease/"+n, []any{l.UID, l.Annotations, l.Spec.HolderIdentity, l.Spec.LeaseTransitions, l.Spec.AcquireTime})
	}
	return snap
}

// demoSeen records, from a watch, the phases and evictions of the demo's
// NodeMaintenances.
type demoSeen struct {
	mu      sync.Mutex
	phases  map[string][]lullv1alpha1.MaintenancePhase
	evicted map[string]int32
}

func watchDemo(t *testing.T, e *sysEnv) *demoSeen {
	t.Helper()
	w, err := e.c.Watch(t.Context(), &lullv1alpha1.NodeMaintenanceList{})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	s := &demoSeen{phases: map[string][]lullv1alpha1.MaintenancePhase{}, evicted: map[string]int32{}}
	go func() {
		for ev := range w.ResultChan() {
			nm, ok := ev.Object.(*lullv1alpha1.NodeMaintenance)
			if !ok || !strings.HasPrefix(nm.Name, "lull-demo-") {
				continue
			}
			s.mu.Lock()
			if p := s.phases[nm.Name]; nm.Status.Phase != "" && (len(p) == 0 || p[len(p)-1] != nm.Status.Phase) {
				s.phases[nm.Name] = append(p, nm.Status.Phase)
			}
			if nm.Status.Pods != nil {
				s.evicted[nm.Name] = max(s.evicted[nm.Name], nm.Status.Pods.Evicted)
			}
			s.mu.Unlock()
		}
	}()
	return s
}

// requireNoDemoObjects: nothing the demo creates is left in the cluster.
func requireNoDemoObjects(t *testing.T, e *sysEnv) {
	t.Helper()
	ctx := t.Context()
	out, err := cluster.Kubectl(ctx, time.Minute, "get", "nodes,maintenancewindows,disruptionpolicies,namespaces", "-l", demoOwner, "-o", "name")
	require.NoError(t, err, out)
	require.Empty(t, strings.TrimSpace(out), "objects the demo created are left behind")
	var nms lullv1alpha1.NodeMaintenanceList
	require.NoError(t, e.c.List(ctx, &nms))
	for _, nm := range nms.Items {
		require.False(t, strings.HasPrefix(nm.Name, "lull-demo-"), "NodeMaintenance %s left behind", nm.Name)
	}
	leases, err := cluster.Clientset.CoordinationV1().Leases(lease.DefaultNamespace).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, l := range leases.Items {
		require.False(t, strings.HasPrefix(l.Name, "node-lull-demo-"), "lease %s left behind", l.Name)
	}
}

// make demo run after the README walkthrough: it brings its own nodes,
// windows, policy and workload, shows a node waiting for its closed window
// and pods evicted, and leaves the user's windows, override, maintenance
// requests, nodes and leases exactly as they were, removing all it made.
func TestDemoAfterWalkthrough(t *testing.T) {
	e := newSysEnv(t)
	canary, general := userWalkthrough(t, e)
	before := userSnapshot(t, e, canary, general)
	seen := watchDemo(t, e)

	out, err := runDemo(t)
	require.NoError(t, err, "hack/demo.sh failed; %s", cluster.LogsHint())
	require.Contains(t, out, "lull-demo-closed: WaitingForWindow  window(s) lull-demo-closed closed; next opens at")
	require.Contains(t, out, "demo finished: every step happened")

	seen.mu.Lock()
	closedPhases, evicted := slices.Clone(seen.phases["lull-demo-closed"]), seen.evicted
	seen.mu.Unlock()
	waited := slices.Index(closedPhases, lullv1alpha1.PhaseWaitingForWindow)
	require.GreaterOrEqual(t, waited, 0, "lull-demo-closed never waited for its window: %v", closedPhases)
	require.Greater(t, slices.Index(closedPhases, lullv1alpha1.PhaseDrained), waited, "lull-demo-closed drained after waiting: %v", closedPhases)
	require.GreaterOrEqual(t, evicted["lull-demo-canary"], int32(1), "the canary drain evicted a pod")
	require.GreaterOrEqual(t, evicted["lull-demo-closed"], int32(1), "the drain after the override evicted a pod")

	require.Equal(t, before, userSnapshot(t, e, canary, general), "the demo changed the user's objects")
	requireNoDemoObjects(t, e)
}

// The demo does not touch an object of the user's that has one of its
// names: it refuses to start and creates nothing.
func TestDemoRefusesTakenName(t *testing.T) {
	e := newSysEnv(t)
	ctx := t.Context()
	w := &lullv1alpha1.MaintenanceWindow{
		ObjectMeta: metav1.ObjectMeta{Name: "lull-demo-closed"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "no-such-pool"}},
			Strategy:     lullv1alpha1.StrategyRestrictive,
		},
	}
	e.window(w)
	require.NoError(t, e.c.Get(ctx, client.ObjectKeyFromObject(w), w))

	out, err := runDemo(t)
	require.Error(t, err, "the demo must refuse to run")
	require.Contains(t, out, "MaintenanceWindow lull-demo-closed exists and is not the demo's; the demo leaves it alone")

	var after lullv1alpha1.MaintenanceWindow
	require.NoError(t, e.c.Get(ctx, client.ObjectKeyFromObject(w), &after))
	require.Equal(t, w.UID, after.UID)
	require.Equal(t, w.Generation, after.Generation)
	require.Equal(t, w.Spec, after.Spec)
	require.Empty(t, after.Labels)
	requireNoDemoObjects(t, e)
	_, err = cluster.Clientset.CoreV1().Namespaces().Get(ctx, "lull-demo", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "namespace lull-demo: %v", err)
}
