package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/capi"
	"lull.dev/lull/lease"
	"lull.dev/lull/test/framework"
)

// capiTaint keeps the other scenarios' pods off the Cluster API nodes.
var capiTaint = corev1.Taint{Key: "e2e.lull.dev/capi", Value: "true", Effect: corev1.TaintEffectNoSchedule}

// machineDeployment makes a MachineDeployment of replicas kwok Machines
// from template; governed labels its Machines for lull. Cluster API's
// defaulting webhooks do not run here, so every field is given.
func (e *capiEnv) machineDeployment(t *testing.T, name string, replicas int, template string, governed bool) {
	t.Helper()
	labels := map[string]any{"cluster.x-k8s.io/cluster-name": capiCluster, "e2e.lull.dev/md": name}
	if governed {
		labels[capi.GovernedLabel] = "true"
	}
	spec := machineSpec(template, "KwokMachineTemplate")
	md := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": capiGroup + "/v1beta2", "kind": "MachineDeployment",
		"metadata": map[string]any{"name": name, "namespace": capiNamespace},
		"spec": map[string]any{
			"clusterName": capiCluster,
			"replicas":    int64(replicas),
			"selector":    map[string]any{"matchLabels": map[string]any{"e2e.lull.dev/md": name}},
			// Cluster API alone would take three at a time.
			"rollout": map[string]any{"strategy": map[string]any{"type": "RollingUpdate",
				"rollingUpdate": map[string]any{"maxSurge": int64(3), "maxUnavailable": int64(3)}}},
			"template": map[string]any{"metadata": map[string]any{"labels": labels}, "spec": spec},
		},
	}}
	_, err := e.dyn.Resource(gvrMD).Namespace(capiNamespace).Create(t.Context(), md, metav1.CreateOptions{})
	require.NoError(t, err)
}

// machines lists the MachineDeployment's Machines.
func (e *capiEnv) machines(ctx context.Context, md string) ([]unstructured.Unstructured, error) {
	list, err := e.dyn.Resource(gvrMachine).Namespace(capiNamespace).List(ctx, metav1.ListOptions{LabelSelector: "e2e.lull.dev/md=" + md})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// waitMachines waits until the MachineDeployment has want Machines, none
// being deleted, each with its node, all from template; it returns their
// nodes.
func (e *capiEnv) waitMachines(t *testing.T, md string, want int, template string, timeout time.Duration) []string {
	t.Helper()
	var nodes []string
	last := ""
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ms, err := e.machines(ctx, md)
		if err != nil {
			return false, nil
		}
		nodes = nodes[:0]
		var states []string
		for i := range ms {
			m := &ms[i]
			phase, _, _ := unstructured.NestedString(m.Object, "status", "phase")
			states = append(states, fmt.Sprintf("%s(%s,node=%s,deleting=%v)", m.GetName(), phase, capi.NodeName(m), capi.Deleting(m)))
			if capi.Deleting(m) || capi.NodeName(m) == "" {
				continue
			}
			nodes = append(nodes, capi.NodeName(m))
		}
		last = strings.Join(states, " ")
		if len(ms) != want || len(nodes) != want {
			return false, nil
		}
		// Every Machine from the template: its infrastructure was cloned
		// from it (KwokMachine spec.image says which).
		for _, n := range nodes {
			km, err := e.dyn.Resource(gvrKM).Namespace(capiNamespace).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			if img, _, _ := unstructured.NestedString(km.Object, "spec", "image"); "pool-"+img != template {
				return false, nil
			}
		}
		return true, nil
	})
	require.NoError(t, err, "MachineDeployment %s never had %d Machines from %s with nodes; last: %s; %s", md, want, template, last, cluster.LogsHint())
	sort.Strings(nodes)
	return nodes
}

// rollOut points the MachineDeployment at another infrastructure
// template: Cluster API replaces every Machine.
func (e *capiEnv) rollOut(t *testing.T, md, template string) {
	t.Helper()
	_, err := e.dyn.Resource(gvrMD).Namespace(capiNamespace).Patch(t.Context(), md, types.MergePatchType,
		[]byte(fmt.Sprintf(`{"spec":{"template":{"spec":{"infrastructureRef":{"name":%q}}}}}`, template)), metav1.PatchOptions{})
	require.NoError(t, err)
}

// deleteMachineDeployment deletes it and waits (bounded) until its
// Machines are gone.
func (e *capiEnv) deleteMachineDeployment(t *testing.T, md string) {
	ctx := context.Background()
	_ = e.dyn.Resource(gvrMD).Namespace(capiNamespace).Delete(ctx, md, metav1.DeleteOptions{})
	_ = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		ms, err := e.machines(ctx, md)
		return err == nil && len(ms) == 0, nil
	})
}

// hookWatch records, for each Machine whose lull hook goes while it is
// being deleted, the pods still on its node at that moment (DaemonSets'
// aside): lull's drain is done before Cluster API's begins.
type hookWatch struct {
	mu      sync.Mutex
	removed map[string]int // node -> pods left when lull's hook went
	hooked  map[string]bool
	// lost: Machines whose hook went while they were not being deleted
	// (Cluster API's server-side apply taking back the annotation the
	// admission policy added, for one).
	lost []string
}

func (e *capiEnv) watchHooks(t *testing.T, md string) *hookWatch {
	h := &hookWatch{removed: map[string]int{}, hooked: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			ms, err := e.machines(ctx, md)
			if err == nil {
				for i := range ms {
					m := &ms[i]
					node := capi.NodeName(m)
					h.mu.Lock()
					was := h.hooked[m.GetName()]
					h.hooked[m.GetName()] = capi.HasHook(m)
					h.mu.Unlock()
					if was && !capi.HasHook(m) && !capi.Deleting(m) && capi.Governed(m) {
						h.mu.Lock()
						h.lost = append(h.lost, m.GetName())
						h.mu.Unlock()
					}
					if was && !capi.HasHook(m) && capi.Deleting(m) && node != "" {
						pods, err := cluster.Clientset.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
						left := 0
						if err == nil {
							for _, p := range pods.Items {
								if p.DeletionTimestamp == nil && !ownedByDaemonSet(&p) {
									left++
								}
							}
						}
						h.mu.Lock()
						h.removed[node] = left
						h.mu.Unlock()
					}
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return h
}

func ownedByDaemonSet(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// capiApp runs replicas pods on the Cluster API pool, tolerating its
// taint, guarded by a PodDisruptionBudget of maxUnavailable 1.
func capiApp(t *testing.T, name string, replicas int32) {
	t.Helper()
	cluster.GuardedApp(t, name, replicas, policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))}, func(s *corev1.PodSpec) {
		s.NodeSelector = map[string]string{"pool": "e2e-capi"}
		s.Tolerations = []corev1.Toleration{{Key: capiTaint.Key, Operator: corev1.TolerationOpEqual, Value: capiTaint.Value, Effect: capiTaint.Effect}}
	})
}

// Issue 42: a MachineDeployment rollout in a pool whose window is closed
// waits at lull's hook; once the window opens, lull drains at most the
// window's maxUnavailable at a time, PDB-safe, before Cluster API's own
// drain; the rollout completes and no lease is left. The control: the
// same rollout of Machines lull does not govern drains at once.
func TestClusterAPIRolloutWaitsForLull(t *testing.T) {
	e := newSysEnv(t)
	ce := startClusterAPI(t)
	ctx := t.Context()
	start := time.Now().UTC().Add(12 * time.Hour).Format("15:04")
	e.window(&lullv1alpha1.MaintenanceWindow{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-capi"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{
			NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "e2e-capi"}},
			Strategy:       lullv1alpha1.StrategySchedule,
			MaxUnavailable: ptr.To(intstr.FromInt32(2)),
			Schedule: &lullv1alpha1.Schedule{TimeZone: "UTC", StartTime: start, Duration: lullv1alpha1.Duration{Duration: time.Hour},
				Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}},
		},
	})
	t.Run("control: Machines lull does not govern are drained at once", func(t *testing.T) {
		ce.machineDeployment(t, "md-free", 2, "pool-v1", false)
		t.Cleanup(func() { ce.deleteMachineDeployment(t, "md-free") })
		old := ce.waitMachines(t, "md-free", 2, "pool-v1", 3*time.Minute)
		ce.rollOut(t, "md-free", "pool-v2")
		rolled := time.Now()
		var disrupted string
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			for _, n := range old {
				node, err := cluster.Clientset.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
				if apierrors.IsNotFound(err) || err == nil && node.Spec.Unschedulable { // deleted or cordoned; another error: ask again
					disrupted = n
					return true, nil
				}
			}
			return false, nil
		}), "Cluster API never cordoned or deleted an old node of md-free: the control case shows nothing")
		t.Logf("control: Cluster API disrupted %s %v after the rollout began, its window closed", disrupted, time.Since(rolled).Round(time.Millisecond))
		ce.waitMachines(t, "md-free", 2, "pool-v2", 3*time.Minute)
		took := time.Since(rolled)
		all, about := drainerRequests(t, rolled, time.Now())
		t.Logf("measured: without lull, rollout of 2 Machines in %v (%v per Machine); lull-drainer sent %d request(s), %d about Cluster API objects",
			took.Round(time.Millisecond), (took / 2).Round(time.Millisecond), all, about)
	})

	t.Run("governed: the rollout waits for the window, two at a time", func(t *testing.T) {
		ce.machineDeployment(t, "md-gov", 6, "pool-v1", true)
		// Cleanups run last first: the app goes before its nodes.
		t.Cleanup(func() { ce.deleteMachineDeployment(t, "md-gov") })
		old := ce.waitMachines(t, "md-gov", 6, "pool-v1", 3*time.Minute)
		capiApp(t, "capi-app", 12)
		ms, err := ce.machines(ctx, "md-gov")
		require.NoError(t, err)
		for i := range ms {
			require.Equal(t, capi.HookOwner, ms[i].GetAnnotations()[capi.PreDrainHook], "Machine %s carries lull's hook from its creation", ms[i].GetName())
		}
		byNode := waitAppRunning(ctx, t, "capi-app", 12)
		t.Logf("old nodes %v; app pods per node %v", old, byNode)
		iv := e.watchInvariants(old...)
		iv.budget("e2e-capi", 2, old...)
		for _, n := range old {
			iv.restrict(n)
		}
		hooks := ce.watchHooks(t, "md-gov")

		ce.rollOut(t, "md-gov", "pool-v2")
		rolled := time.Now()
		// Cluster API deletes three old Machines (maxUnavailable 3); each
		// becomes a request that waits for the window.
		waiting := map[string]string{}
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			for _, n := range old {
				var nm lullv1alpha1.NodeMaintenance
				if e.c.Get(ctx, types.NamespacedName{Name: n}, &nm) == nil && nm.Status.Phase == lullv1alpha1.PhaseWaitingForWindow {
					waiting[n] = nm.Spec.ClassNames()
				}
			}
			return len(waiting) >= 3, nil
		}), "three deleted Machines' nodes never waited for the window: %v; %s", waiting, cluster.LogsHint())
		for n, class := range waiting {
			require.Equal(t, string(capi.CauseRollout), class, "node %s: the request says why", n)
		}
		// Hold: the window is closed, nothing is cordoned, the Machines
		// wait at lull's hook.
		time.Sleep(15 * time.Second)
		for _, n := range old {
			node, err := cluster.Clientset.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			require.NoError(t, err, "node %s deleted while its window was closed", n)
			require.False(t, node.Spec.Unschedulable, "node %s cordoned while its window was closed", n)
		}
		ms, err = ce.machines(ctx, "md-gov")
		require.NoError(t, err)
		deleting := 0
		for i := range ms {
			if capi.Deleting(&ms[i]) {
				deleting++
				require.True(t, capi.HasHook(&ms[i]), "Machine %s waits at lull's hook", ms[i].GetName())
			}
		}
		require.GreaterOrEqual(t, deleting, 3)

		// The window opens.
		opened := time.Now()
		for _, n := range old {
			iv.permit(n, opened)
		}
		e.editWindow("e2e-capi", func(w *lullv1alpha1.MaintenanceWindow) {
			w.Spec.Override = &lullv1alpha1.Override{Strategy: lullv1alpha1.OverridePermissive,
				Until: metav1.Time{Time: time.Now().Add(time.Hour)}, Reason: "e2e: the rollout's window"}
		})
		ce.waitMachines(t, "md-gov", 6, "pool-v2", 6*time.Minute)
		took := time.Since(opened)
		all, about := drainerRequests(t, rolled, time.Now())
		t.Logf("measured: with lull, window open -> rollout of 6 Machines done in %v (%v per Machine); lull-drainer sent %d request(s) from the rollout's start (%d per Machine), %d about Cluster API objects",
			took.Round(time.Millisecond), (took / 6).Round(time.Millisecond), all, all/6, about)

		iv.check()
		require.LessOrEqual(t, iv.maxDisrupting("e2e-capi"), 2, "never more than the window's maxUnavailable")
		require.Positive(t, iv.maxDisrupting("e2e-capi"))
		hooks.mu.Lock()
		defer hooks.mu.Unlock()
		require.Empty(t, hooks.lost, "a governed Machine lost lull's hook while not being deleted")
		for _, n := range old {
			left, ok := hooks.removed[n]
			require.True(t, ok, "lull's hook on %s's Machine was removed by lull while it was deleted", n)
			require.Zero(t, left, "node %s had pods left when lull removed its hook: Cluster API's drain found work", n)
		}
		// No lease left, no request unfinished: the old nodes are gone.
		for _, n := range old {
			_, err := cluster.Clientset.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			require.Error(t, err, "old node %s is gone", n)
			l, err := cluster.Clientset.CoordinationV1().Leases(lease.DefaultNamespace).Get(ctx, "node-"+n, metav1.GetOptions{})
			if err == nil {
				require.Empty(t, ptr.Deref(l.Spec.HolderIdentity, ""), "lease of %s left behind", n)
			}
		}
		require.Eventually(t, func() bool {
			var list lullv1alpha1.NodeMaintenanceList
			if e.c.List(ctx, &list) != nil {
				return false
			}
			return !slices.ContainsFunc(list.Items, func(nm lullv1alpha1.NodeMaintenance) bool { return slices.Contains(old, nm.Name) })
		}, time.Minute, 500*time.Millisecond, "the requests of the deleted Machines are removed")
	})
}

// drainerRequests counts lull-drainer's requests to the API server between
// from and to (loggedDrainerRequests), and those about Cluster API's objects.
func drainerRequests(t *testing.T, from, to time.Time) (all, capiObjects int) {
	t.Helper()
	requests, err := loggedDrainerRequests()
	require.NoError(t, err)
	for _, a := range requests {
		if a.RequestReceivedTimestamp.Before(from) || a.RequestReceivedTimestamp.After(to) {
			continue
		}
		all++
		if strings.Contains(a.RequestURI, "/apis/"+capiGroup+"/") {
			capiObjects++
		}
	}
	return all, capiObjects
}

// lull-drainer's rights on Cluster API's objects are what docs/install.md
// says, asked as an admin would once Cluster API is installed.
func TestClusterAPIRights(t *testing.T) {
	startClusterAPI(t)
	for _, r := range framework.ClusterAPIRights {
		out, _ := cluster.Kubectl(t.Context(), time.Minute, r.CanI()...) // exit 1 means "no"
		if answer, got := framework.CanIAnswer(out); got != r.Want {
			t.Errorf("%s %s %s (namespace %q): can-i says %q, docs/install.md says %v", r.Account, r.Verb, r.Resource, r.Namespace, answer, r.Want)
		}
	}
	// What RBAC's patch allows, the guard narrows to lull's annotations
	// (server-side dry runs: admission runs, nothing is stored).
	asDrainer := func(patch string) (string, error) {
		return cluster.Kubectl(t.Context(), time.Minute, "-n", capiNamespace, "patch", "machine", "capi-cp-0", "--type=merge", "-p", patch,
			"--dry-run=server", "--as=system:serviceaccount:lull-system:lull-drainer")
	}
	out, err := asDrainer(`{"metadata":{"annotations":{"cluster.x-k8s.io/skip-remediation":"","lull.dev/skip-remediation":"capi-cp-0"}}}`)
	require.NoError(t, err, "lull's own annotations: %s", out)
	for _, patch := range []string{`{"metadata":{"labels":{"e2e":"x"}}}`, `{"spec":{"version":"v1.38.0"}}`, `{"metadata":{"annotations":{"other":"x"}}}`} {
		out, err := asDrainer(patch)
		require.Error(t, err, "lull-drainer changed a Machine beyond its annotations: %s", patch)
		require.Contains(t, out, "lull-cluster-api-writes", patch)
	}
}

// Issue 42: a MachineHealthCheck stands down while lull holds a Machine's
// node down on purpose. A PowerOff by lull leaves the node NotReady; the
// real MachineHealthCheck (timeout 5 s) does not remediate it while lull
// holds it, since lull set cluster.x-k8s.io/skip-remediation. Once the
// request completes, lull's skip is gone, and the node, still off, is
// remediated: the Machine is replaced (through lull's remediation request,
// which windows do not hold).
func TestClusterAPIHealthCheckStandsDownForPowerOff(t *testing.T) {
	e := newSysEnv(t)
	ce := startClusterAPI(t)
	ctx := t.Context()
	_, err := ce.dyn.Resource(gvrKMT).Namespace(capiNamespace).Create(ctx, &unstructured.Unstructured{Object: kwokTemplate("pool-mhc", "e2e-capi-mhc", "mhc")}, metav1.CreateOptions{})
	require.NoError(t, err)
	e.window(&lullv1alpha1.MaintenanceWindow{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-capi-mhc"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{
			NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "e2e-capi-mhc"}},
			Strategy:       lullv1alpha1.StrategyPermissive,
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		},
	})
	p := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "e2e-capi-off"}, Spec: lullv1alpha1.DisruptionPolicySpec{
		Priority: 100,
		Rules:    []lullv1alpha1.DisruptionRule{{Name: "off", Class: "e2e-capi-off", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepPowerOff}}}},
	}}
	require.NoError(t, e.c.Create(ctx, p))
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), p) })

	ce.machineDeployment(t, "md-mhc", 1, "pool-mhc", true)
	t.Cleanup(func() { ce.deleteMachineDeployment(t, "md-mhc") })
	node := ce.waitMachines(t, "md-mhc", 1, "pool-mhc", 3*time.Minute)[0]
	mhc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": capiGroup + "/v1beta2", "kind": "MachineHealthCheck",
		"metadata": map[string]any{"name": "mhc", "namespace": capiNamespace},
		"spec": map[string]any{
			"clusterName": capiCluster,
			"selector":    map[string]any{"matchLabels": map[string]any{"e2e.lull.dev/md": "md-mhc"}},
			"checks": map[string]any{"unhealthyNodeConditions": []any{
				map[string]any{"type": "Ready", "status": "False", "timeoutSeconds": int64(5)},
				map[string]any{"type": "Ready", "status": "Unknown", "timeoutSeconds": int64(5)},
			}},
		},
	}}
	_, err = ce.dyn.Resource(gvrMHC).Namespace(capiNamespace).Create(ctx, mhc, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = ce.dyn.Resource(gvrMHC).Namespace(capiNamespace).Delete(context.Background(), "mhc", metav1.DeleteOptions{})
	})
	machineOf := func() *unstructured.Unstructured {
		ms, err := ce.machines(ctx, "md-mhc")
		require.NoError(t, err)
		for i := range ms {
			if capi.NodeName(&ms[i]) == node {
				return &ms[i]
			}
		}
		return nil
	}
	first := machineOf()
	require.NotNil(t, first)

	startSimAgent(t, node)
	e.patchNode(node, `{"metadata":{"labels":{"lull.dev/maintenance":"e2e-capi-off"}}}`)
	t.Cleanup(func() { e.readyAgain(node) })
	e.waitNM(node, "PoweredOff", 2*time.Minute, inPhase(lullv1alpha1.PhasePoweredOff))
	n, err := cluster.Clientset.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	require.NoError(t, err)
	require.False(t, slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
		return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	}), "the node is off")
	m := machineOf()
	require.NotNil(t, m)
	require.Contains(t, m.GetAnnotations(), capi.SkipRemediationAnnotation, "lull holds the node down: health checks stand down")
	require.Equal(t, node, m.GetAnnotations()[capi.SkipRemediationByLull])
	// Four times the health check's timeout: not remediated.
	time.Sleep(20 * time.Second)
	m = machineOf()
	require.NotNil(t, m, "the Machine is still there")
	require.False(t, capi.Deleting(m), "a node lull holds off is not remediated")
	require.Equal(t, first.GetUID(), m.GetUID())

	// lull lets go; the node stays off, and is remediated now.
	e.patchNode(node, `{"metadata":{"labels":{"lull.dev/maintenance":null}}}`)
	released := time.Now()
	var remediated time.Duration
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if m := machineOf(); m != nil && !capi.Deleting(m) {
			return false, nil
		}
		if remediated == 0 {
			remediated = time.Since(released)
		}
		return true, nil
	}), "the powered-off node was never remediated after lull let go; %s", cluster.LogsHint())
	t.Logf("released -> remediation began in %v", remediated.Round(time.Millisecond))
	replacement := ce.waitMachines(t, "md-mhc", 1, "pool-mhc", 3*time.Minute)
	require.NotEqual(t, node, replacement[0], "the Machine was replaced")
}

// Issue 42: a scale-down that picks a node an admin holds (kubectl lull
// lease acquire) waits at lull's hook, its request WaitingForLease naming
// the holder, until the admin releases it.
func TestClusterAPIScaleDownWaitsForTheAdminsLease(t *testing.T) {
	e := newSysEnv(t)
	ce := startClusterAPI(t)
	ctx := t.Context()
	e.window(&lullv1alpha1.MaintenanceWindow{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-capi-scale"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{
			NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "e2e-capi"}},
			Strategy:       lullv1alpha1.StrategyPermissive,
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		},
	})
	ce.machineDeployment(t, "md-scale", 2, "pool-v1", true)
	t.Cleanup(func() { ce.deleteMachineDeployment(t, "md-scale") })
	nodes := ce.waitMachines(t, "md-scale", 2, "pool-v1", 3*time.Minute)
	held := nodes[0]
	out, code := lullctl(t, "lease", "acquire", held, "--holder", "fw-updater", "--operation", "firmware", "--reason", "BMC update", "--duration", "10m")
	require.Equal(t, 0, code, out)
	// (Released below; on a failure before that the lease expires, and the
	// node goes with md-scale.)
	// Cluster API deletes the Machine marked for deletion first.
	ms, err := ce.machines(ctx, "md-scale")
	require.NoError(t, err)
	for i := range ms {
		if capi.NodeName(&ms[i]) == held {
			_, err := ce.dyn.Resource(gvrMachine).Namespace(capiNamespace).Patch(ctx, ms[i].GetName(), types.MergePatchType,
				[]byte(`{"metadata":{"annotations":{"cluster.x-k8s.io/delete-machine":""}}}`), metav1.PatchOptions{})
			require.NoError(t, err)
		}
	}
	_, err = ce.dyn.Resource(gvrMD).Namespace(capiNamespace).Patch(ctx, "md-scale", types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	nm := e.waitNM(held, "WaitingForLease", 2*time.Minute, inPhase(lullv1alpha1.PhaseWaitingForLease))
	require.Equal(t, []string{string(capi.CauseScaleDown)}, nm.Spec.Classes)
	require.Contains(t, nm.Status.WaitingFor, "fw-updater")
	t.Logf("waiting: %s", nm.Status.WaitingFor)
	time.Sleep(10 * time.Second)
	n, err := cluster.Clientset.CoreV1().Nodes().Get(ctx, held, metav1.GetOptions{})
	require.NoError(t, err, "the held node is not deleted")
	require.False(t, n.Spec.Unschedulable, "the held node is not cordoned")

	out, code = lullctl(t, "lease", "release", held, "--holder", "fw-updater")
	require.Equal(t, 0, code, out)
	released := time.Now()
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cluster.Clientset.CoreV1().Nodes().Get(ctx, held, metav1.GetOptions{})
		return err != nil, nil
	}), "the scale-down never went on after the admin released the lease; %s", cluster.LogsHint())
	t.Logf("lease released -> node deleted in %v", time.Since(released).Round(time.Millisecond))
	require.Equal(t, []string{nodes[1]}, ce.waitMachines(t, "md-scale", 1, "pool-v1", time.Minute), "the other Machine stays")
}

// Issue 42: a ClusterClass topology upgrade waits while lull has a request
// in progress on the Cluster's nodes. lull sets its before-upgrade hook on
// the governed Cluster (saying which request), Cluster API's real topology
// controller does not start the upgrade (the control plane keeps its
// version), and the upgrade proceeds once the request completes.
func TestClusterAPITopologyUpgradeWaitsForRequests(t *testing.T) {
	e := newSysEnv(t)
	ce := startClusterAPI(t)
	ctx := t.Context()
	const name = "e2e-topo"
	e.window(&lullv1alpha1.MaintenanceWindow{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: lullv1alpha1.MaintenanceWindowSpec{
			NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{"pool": name}},
			Strategy:       lullv1alpha1.StrategyPermissive,
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		},
	})
	kc, err := os.ReadFile(cluster.Kubeconfig)
	require.NoError(t, err)
	_, err = cluster.Clientset.CoreV1().Secrets(capiNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-kubeconfig", Labels: map[string]string{capi.ClusterNameLabel: name}},
		Type:       "cluster.x-k8s.io/secret", Data: map[string][]byte{"value": kc},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, portStr, err := net.SplitHostPort(strings.TrimPrefix(cluster.Config.Host, "https://"))
	require.NoError(t, err)
	port, err := strconv.Atoi(portStr)
	require.NoError(t, err)
	objs := []struct {
		gvr schema.GroupVersionResource
		obj map[string]any
	}{
		{gvrKCT, map[string]any{"apiVersion": infraGroup + "/v1alpha1", "kind": "KwokClusterTemplate",
			"metadata": map[string]any{"name": "kwok", "namespace": capiNamespace}, "spec": map[string]any{"template": map[string]any{"spec": map[string]any{}}}}},
		{gvrKCPT, map[string]any{"apiVersion": cpGroup + "/v1alpha1", "kind": "KwokControlPlaneTemplate",
			"metadata": map[string]any{"name": "kwok", "namespace": capiNamespace}, "spec": map[string]any{"template": map[string]any{"spec": map[string]any{}}}}},
		{gvrCC, map[string]any{"apiVersion": capiGroup + "/v1beta2", "kind": "ClusterClass",
			"metadata": map[string]any{"name": "kwok", "namespace": capiNamespace},
			"spec": map[string]any{
				"infrastructure": map[string]any{"templateRef": map[string]any{"apiVersion": infraGroup + "/v1alpha1", "kind": "KwokClusterTemplate", "name": "kwok"}},
				"controlPlane":   map[string]any{"templateRef": map[string]any{"apiVersion": cpGroup + "/v1alpha1", "kind": "KwokControlPlaneTemplate", "name": "kwok"}},
			}}},
		{gvrCluster, map[string]any{"apiVersion": capiGroup + "/v1beta2", "kind": "Cluster",
			"metadata": map[string]any{"name": name, "namespace": capiNamespace, "labels": map[string]any{capi.GovernedLabel: "true"}},
			"spec": map[string]any{
				"controlPlaneEndpoint": map[string]any{"host": "127.0.0.1", "port": int64(port)},
				"topology": map[string]any{"classRef": map[string]any{"name": "kwok"}, "version": "v1.37.0",
					"controlPlane": map[string]any{"replicas": int64(1)}},
			}}},
		{gvrKM, map[string]any{"apiVersion": infraGroup + "/v1alpha1", "kind": "KwokMachine",
			"metadata": map[string]any{"name": "topo-w0", "namespace": capiNamespace}, "spec": map[string]any{"pool": name}}},
		{gvrMachine, map[string]any{"apiVersion": capiGroup + "/v1beta2", "kind": "Machine",
			"metadata": map[string]any{"name": "topo-w0", "namespace": capiNamespace, "labels": map[string]any{capi.ClusterNameLabel: name}},
			"spec": map[string]any{"clusterName": name, "version": "v1.37.0", "bootstrap": map[string]any{"dataSecretName": "kwok-bootstrap"},
				"infrastructureRef": map[string]any{"apiGroup": infraGroup, "kind": "KwokMachine", "name": "topo-w0"}}}},
	}
	for _, o := range objs {
		_, err := ce.dyn.Resource(o.gvr).Namespace(capiNamespace).Create(ctx, &unstructured.Unstructured{Object: o.obj}, metav1.CreateOptions{})
		require.NoError(t, err, "creating %s", o.gvr.Resource)
	}
	t.Cleanup(func() {
		_ = ce.dyn.Resource(gvrCluster).Namespace(capiNamespace).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	cpVersion := func() (string, string) {
		c, err := ce.dyn.Resource(gvrCluster).Namespace(capiNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", ""
		}
		ref, _, _ := unstructured.NestedString(c.Object, "spec", "controlPlaneRef", "name")
		if ref == "" {
			return "", ""
		}
		cp, err := ce.dyn.Resource(gvrKCP).Namespace(capiNamespace).Get(ctx, ref, metav1.GetOptions{})
		if err != nil {
			return "", ""
		}
		v, _, _ := unstructured.NestedString(cp.Object, "spec", "version")
		hook := c.GetAnnotations()[capi.BeforeUpgradeHook]
		return v, hook
	}
	poll := func(what string, timeout time.Duration, cond func() bool) {
		t.Helper()
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond(), nil }),
			"%s; %s", what, cluster.LogsHint())
	}
	poll("the topology's control plane at v1.37.0", 2*time.Minute, func() bool { v, _ := cpVersion(); return v == "v1.37.0" })
	var node string
	poll("the Machine's node", 2*time.Minute, func() bool {
		m, err := ce.dyn.Resource(gvrMachine).Namespace(capiNamespace).Get(ctx, "topo-w0", metav1.GetOptions{})
		if err == nil {
			node = capi.NodeName(m)
		}
		return node != ""
	})

	// A request in progress on the Cluster's node: lull holds the upgrade.
	e.patchNode(node, `{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`)
	t.Cleanup(func() { e.patchNodeBg(node, `{"metadata":{"labels":{"lull.dev/maintenance":null}}}`) })
	e.waitNM(node, "Drained", time.Minute, inPhase(lullv1alpha1.PhaseDrained))
	var hook string
	poll("lull's before-upgrade hook on the Cluster", time.Minute, func() bool { _, hook = cpVersion(); return hook != "" })
	require.Contains(t, hook, "node "+node+" (kernel-update, Drained)", "the hook says which request holds the upgrade")
	_, err = ce.dyn.Resource(gvrCluster).Namespace(capiNamespace).Patch(ctx, name, types.MergePatchType,
		[]byte(`{"spec":{"topology":{"version":"v1.37.1"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	time.Sleep(15 * time.Second)
	v, _ := cpVersion()
	require.Equal(t, "v1.37.0", v, "the upgrade does not start while lull's request is in progress")
	c, err := ce.dyn.Resource(gvrCluster).Namespace(capiNamespace).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	conds, _, _ := unstructured.NestedSlice(c.Object, "status", "conditions")
	for _, cd := range conds {
		if m, ok := cd.(map[string]any); ok && m["type"] == "TopologyReconciled" {
			t.Logf("Cluster API says: TopologyReconciled=%v %v: %v", m["status"], m["reason"], m["message"])
		}
	}

	// The request completes: the upgrade goes on.
	e.patchNode(node, `{"metadata":{"labels":{"lull.dev/maintenance":null}}}`)
	done := time.Now()
	poll("the upgrade after the request completed", 2*time.Minute, func() bool { v, hook := cpVersion(); return v == "v1.37.1" && hook == "" })
	t.Logf("request completed -> upgrade started in %v", time.Since(done).Round(time.Millisecond))
}
