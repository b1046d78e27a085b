package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/test/framework"
)

// previousRelease builds (once per commit, hack/previous-release.sh) the
// release upgrades are tested from and returns its worktree, its version
// and its image archives.
func previousRelease(t *testing.T) (src, version string, images []string) {
	t.Helper()
	start := time.Now()
	out, err := exec.Command(filepath.Join(framework.RepoRoot(), "hack", "previous-release.sh")).Output()
	var stderr string
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		stderr = string(ee.Stderr)
	}
	require.NoError(t, err, "hack/previous-release.sh: %s", stderr)
	src = strings.TrimSpace(string(out))
	version = framework.PinnedVersion("LULL_PREVIOUS_VERSION")
	require.NotEmpty(t, version, "LULL_PREVIOUS_VERSION in hack/versions.env")
	for _, i := range []string{"lull-scheduler", "lull-drainer", "lull-agent"} {
		images = append(images, filepath.Join(filepath.Dir(src), "images", i+"-"+version+".tar"))
	}
	t.Logf("previous release %s at %s (ready in %v)", version, src, time.Since(start).Round(time.Second))
	return src, version, images
}

// installOverlay applies the local overlay of the checkout root with lull's
// images tagged tag, as hack/local-up.d/10-lull.sh does, waits until lull
// runs from them, and returns the rendered install.
func installOverlay(t *testing.T, root, tag string) string {
	t.Helper()
	dir := t.TempDir()
	base, err := filepath.Rel(dir, filepath.Join(root, "hack", "local-overlay"))
	require.NoError(t, err)
	kust := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- %s\nimages:\n", base)
	for _, i := range []string{"lull-scheduler", "lull-drainer", "lull-agent"} {
		kust += fmt.Sprintf("- name: lull.dev/%s\n  newTag: %q\n", i, tag)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kust), 0o644))
	rendered := kubectl(t, "kustomize", dir)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rendered.yaml"), []byte(rendered), 0o644))
	kubectl(t, "apply", "--server-side", "-f", filepath.Join(dir, "rendered.yaml"))
	rolledOut(t)
	return filepath.Join(dir, "rendered.yaml")
}

// rolledOut waits until every lull component runs its current spec.
func rolledOut(t *testing.T) {
	t.Helper()
	for _, w := range []string{"deployment/lull-scheduler", "deployment/lull-drainer", "daemonset/lull-agent"} {
		kubectl(t, "-n", "lull-system", "rollout", "status", w, "--timeout=3m")
	}
}

// leaseState is what must hold of a node lease across the upgrade: the
// same object (never released and taken again), held by a replica of
// lull-drainer (the new leader takes it over from the old: a transition
// within the family), renewed within its duration.
type leaseState struct {
	uid     types.UID
	holder  string
	expires time.Time
}

func nodeLease(ctx context.Context, node string) (leaseState, error) {
	l, err := cluster.Clientset.CoordinationV1().Leases("lull-leases").Get(ctx, "node-"+node, metav1.GetOptions{})
	if err != nil {
		return leaseState{}, err
	}
	st := leaseState{uid: l.UID, holder: ptr.Deref(l.Spec.HolderIdentity, "")}
	if l.Spec.RenewTime != nil {
		st.expires = l.Spec.RenewTime.Add(time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second)
	}
	return st, nil
}

// TestUpgradeFromPreviousRelease installs the previous release
// (LULL_PREVIOUS_COMMIT, built from its own worktree), starts requests in
// several phases — one waiting for its window, one draining a node its
// PodDisruptionBudget holds, one held drained — upgrades to this commit,
// and shows nothing is lost: the same requests (no restart), the nodes
// cordoned throughout, the same leases (never released or taken again), no
// PodDisruptionBudget violated, no pod evicted; then the new drainer
// finishes them. Once installed and upgraded with kubectl apply of the
// install, once with helm install and helm upgrade.
func TestUpgradeFromPreviousRelease(t *testing.T) {
	src, prev, images := previousRelease(t)
	for _, archive := range images {
		out, err := exec.Command(filepath.Join(framework.BinDir(), "ctr"),
			"--address", filepath.Join(cluster.Dir, "node", "containerd", "containerd.sock"), "-n", "k8s.io",
			"images", "import", "--no-unpack=false", archive).CombinedOutput()
		require.NoError(t, err, "importing %s: %s", archive, out)
	}
	t.Run("kustomize", func(t *testing.T) {
		rendered := installOverlay(t, src, prev)
		upgraded := ""
		upgradeWithWorkInFlight(t, prev, "kustomize", func() { upgraded = installOverlay(t, framework.RepoRoot(), version) })
		// Uninstall what is installed (this commit's objects, some of
		// which the previous release did not have), then what only the
		// previous release had.
		kubectl(t, "delete", "--ignore-not-found", "--wait=true", "--timeout=3m", "-f", upgraded)
		kubectl(t, "delete", "--ignore-not-found", "--wait=true", "--timeout=3m", "-f", rendered)
	})
	t.Run("helm", func(t *testing.T) {
		set := helmLocalValues()
		helmRun(t, append([]string{"install", "lull", packageChart(t, filepath.Join(src, "charts", "lull"), prev),
			"--namespace", "default", "--wait", "--timeout", "3m"}, set...)...)
		rolledOut(t)
		upgradeWithWorkInFlight(t, prev, "helm", func() {
			// helm upgrade never touches crds/: apply them first, as
			// docs/install.md#upgrading says.
			kubectl(t, "apply", "--server-side", "--force-conflicts", "-f", filepath.Join(framework.RepoRoot(), "charts", "lull", "crds"))
			helmRun(t, append([]string{"upgrade", "lull", packageChart(t, filepath.Join(framework.RepoRoot(), "charts", "lull"), version),
				"--namespace", "default", "--wait", "--timeout", "3m"}, set...)...)
			rolledOut(t)
		})
		helmRun(t, "uninstall", "lull", "--namespace", "default", "--wait", "--timeout", "3m")
		kubectl(t, "delete", "crd", "nodemaintenances.lull.dev", "maintenancewindows.lull.dev", "disruptionpolicies.lull.dev", "nodeconfigs.lull.dev", "--wait=true", "--timeout=2m")
	})
}

// upgradeWithWorkInFlight runs the scenario of TestUpgradeFromPreviousRelease
// on lull installed at prev: upgrade upgrades it to this commit.
func upgradeWithWorkInFlight(t *testing.T, prev, how string, upgrade func()) {
	ctx := t.Context()
	cs := cluster.Clientset
	d, err := cs.AppsV1().Deployments("lull-system").Get(ctx, "lull-drainer", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "lull.dev/lull-drainer:"+prev, d.Spec.Template.Spec.Containers[0].Image)
	stuck := "up-stuck-" + how

	waiting, draining, drained := "kwok-node-0", "kwok-node-1", "kwok-node-2"
	for _, n := range []string{waiting, draining, drained} {
		patchNode(t, n, `{"metadata":{"labels":{"pool":"e2e-up-`+n+`"}}}`)
		t.Cleanup(func() { patchNode(t, n, `{"metadata":{"labels":{"pool":null,"lull.dev/maintenance":null}}}`) })
	}
	// The waiting node's window opens in six hours; the others have no
	// window (the default budget: one at a time), so give them one each.
	later := time.Now().UTC().Add(6 * time.Hour)
	windows := map[string]*lullv1alpha1.Schedule{
		waiting: {TimeZone: "UTC", StartTime: later.Format("15:04"), Duration: lullv1alpha1.Duration{Duration: time.Hour},
			Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}},
		draining: nil, drained: nil,
	}
	for n, sched := range windows {
		w := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "e2e-up-" + how + "-" + n},
			Spec: lullv1alpha1.MaintenanceWindowSpec{Strategy: lullv1alpha1.StrategyPermissive,
				NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "e2e-up-" + n}}}}
		if sched != nil {
			w.Spec.Strategy, w.Spec.Schedule = lullv1alpha1.StrategySchedule, sched
		}
		require.NoError(t, c.Create(ctx, w))
		t.Cleanup(func() { _ = c.Delete(context.Background(), w) })
	}
	app(t, stuck, 1, 1, func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"kubernetes.io/hostname": draining} })
	for _, n := range []string{waiting, draining, drained} {
		patchNode(t, n, `{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`)
	}
	nmOf := func(ctx context.Context, n string) (*lullv1alpha1.NodeMaintenance, error) {
		var nm lullv1alpha1.NodeMaintenance
		return &nm, c.Get(ctx, client.ObjectKey{Name: n}, &nm)
	}
	want := map[string]func(*lullv1alpha1.NodeMaintenance) bool{
		waiting: func(nm *lullv1alpha1.NodeMaintenance) bool {
			return nm.Status.Phase == lullv1alpha1.PhaseWaitingForWindow
		},
		draining: func(nm *lullv1alpha1.NodeMaintenance) bool {
			return nm.Status.Phase == lullv1alpha1.PhaseDraining && len(nm.Status.Blockers) > 0
		},
		drained: func(nm *lullv1alpha1.NodeMaintenance) bool { return nm.Status.Phase == lullv1alpha1.PhaseDrained },
	}
	uids := map[string]types.UID{}
	for n, ok := range want {
		poll(t, n+" in its phase under "+prev, 2*time.Minute, func(ctx context.Context) (bool, string) {
			nm, err := nmOf(ctx, n)
			if err != nil {
				return false, err.Error()
			}
			uids[n] = nm.UID
			return ok(nm), string(nm.Status.Phase)
		})
	}
	leases := map[string]leaseState{}
	for _, n := range []string{draining, drained} {
		st, err := nodeLease(ctx, n)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(st.holder, "lull-drainer/"), st.holder)
		leases[n] = st
	}
	_, err = nodeLease(ctx, waiting)
	require.Error(t, err, "a request waiting for its window holds no lease")

	// Watch the upgrade: every 100 ms, the invariants.
	stop := watchInvariants(ctx, func(ctx context.Context, violated func(string)) {
		for n, ok := range want {
			nm, err := nmOf(ctx, n)
			if ctx.Err() != nil {
				return
			}
			switch {
			case err != nil:
				violated(fmt.Sprintf("%s: request unreadable: %v", n, err))
			case nm.UID != uids[n]:
				violated(fmt.Sprintf("%s: the request was replaced (a restart)", n))
			case !ok(nm) && !(n == draining && nm.Status.Phase == lullv1alpha1.PhaseDraining):
				violated(fmt.Sprintf("%s: left its phase: %s", n, nm.Status.Phase))
			}
		}
		for n, was := range leases {
			st, err := nodeLease(ctx, n)
			if ctx.Err() != nil {
				return
			}
			if err != nil || st.uid != was.uid || !strings.HasPrefix(st.holder, "lull-drainer/") || time.Now().After(st.expires) {
				violated(fmt.Sprintf("%s: the lease did not stay held by lull: %v %+v (was %+v)", n, err, st, was))
			}
			if node, err := cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{}); err == nil && !node.Spec.Unschedulable {
				violated(n + ": uncordoned during the upgrade")
			}
		}
		ready := 0
		for _, p := range appPods(ctx, stuck) {
			if podReady(&p) {
				ready++
			}
		}
		if ctx.Err() == nil && ready < 1 {
			violated(stuck + ": no pod ready: its PodDisruptionBudget violated")
		}
	})

	start := time.Now()
	upgrade()
	t.Logf("upgraded %s -> %s with %s in %v", prev, version, how, time.Since(start).Round(100*time.Millisecond))
	poll(t, "a drainer of "+version+" leads", time.Minute, func(ctx context.Context) (bool, string) {
		return drainerLeads(ctx, "lull.dev/lull-drainer:"+version)
	})
	// The new leader has looked at every request (the drain's blockers are
	// renewed by its rounds; give it one).
	time.Sleep(5 * time.Second)
	for _, v := range stop() {
		t.Error(v)
	}
	require.Len(t, appPods(ctx, stuck), 1, "the budget's pod was not evicted")

	// The new drainer finishes what the old one started.
	_, err = cs.PolicyV1().PodDisruptionBudgets(ns).Patch(ctx, stuck, types.MergePatchType, []byte(`{"spec":{"minAvailable":0}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	waitNM(t, draining, lullv1alpha1.PhaseDrained, 2*time.Minute)
	for _, n := range []string{waiting, draining, drained} {
		patchNode(t, n, `{"metadata":{"labels":{"lull.dev/maintenance":null}}}`)
	}
	for _, n := range []string{draining, drained} {
		nm := waitNM(t, n, lullv1alpha1.PhaseCompleted, time.Minute)
		require.Equal(t, uids[n], nm.UID, "%s: the request the previous release started", n)
		node, err := cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		require.NoError(t, err)
		require.False(t, node.Spec.Unschedulable, "%s: lull's cordon undone", n)
	}
}
