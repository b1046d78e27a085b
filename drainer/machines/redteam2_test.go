package machines

// Red-team round 2 on skip-remediation (syncSkipRemediation, heldDown),
// the before-upgrade hold (ClusterReconciler) and the guard's policies
// lull-cluster-api-writes and lull-emergency-options. Each test names an
// attack on a promise of docs/cluster-api.md: a MachineHealthCheck never
// remediates a node lull holds down on purpose, and lull never leaves a
// skip it set once it lets go; lull removes only what it set; a governed
// Cluster's topology upgrade does not start while lull has work in
// progress on its nodes; lull-drainer's writes to Cluster API objects
// change only lull's annotations; the remediation deadline is for a
// remediation, made by lull-drainer, and nothing else.

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/capi"
)

const (
	redteam2Drainer = "system:serviceaccount:lull-system:lull-drainer"
)

var (
	redteam2SAGroups         = []string{"system:serviceaccounts", "system:serviceaccounts:lull-system", "system:authenticated"}
	redteam2MaintainerGroups = []string{"lull:maintainers", "system:authenticated"}
)

// heldDownRequest is a hardware request on node n1 whose plan is steps,
// in phase, with the host steps' record actions.
func heldDownRequest(phase lullv1alpha1.MaintenancePhase, steps []lullv1alpha1.PlannedStep, actions []lullv1alpha1.ActionStatus) *lullv1alpha1.NodeMaintenance {
	started := metav1.NewTime(deletedAt)
	return &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"hardware"}},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: phase, CordonedByLull: true, StartedAt: &started,
			Decision: &lullv1alpha1.Decision{Action: steps[len(steps)-1].Type, Rule: "r", Steps: steps},
			Actions:  actions}}
}

func skipOf(t *testing.T, m *unstructured.Unstructured) (bool, bool) {
	t.Helper()
	_, skipped := m.GetAnnotations()[capi.SkipRemediationAnnotation]
	_, recorded := m.GetAnnotations()[capi.SkipRemediationByLull]
	return skipped, recorded
}

// --- skip-remediation -------------------------------------------------------

// TestRedteam2SkipRemediationCoversFallbackReboot: a request's plan only
// restarts a unit (RestartService chronyd). The restart fails, and the
// drainer falls back to a Reboot (act.go failed: a Reboot with Fallback
// is appended to status.actions, the node is cordoned and drained, and the
// request is Acting again). heldDown reads only status.decision.steps,
// which has no Reboot: no skip-remediation is set, the node reboots, a
// MachineHealthCheck sees it NotReady and replaces the Machine — a node
// lull took down on purpose. (status.actions "may hold a fallback Reboot
// the plan does not", lifecycle.go HasHostSteps.)
func TestRedteam2SkipRemediationCoversFallbackReboot(t *testing.T) {
	nm := heldDownRequest(lullv1alpha1.PhaseActing,
		[]lullv1alpha1.PlannedStep{{Type: lullv1alpha1.StepRestartService, Unit: "chronyd"}},
		[]lullv1alpha1.ActionStatus{
			{Type: lullv1alpha1.StepRestartService, Unit: "chronyd", State: lullv1alpha1.ActionFailed, Message: "exit 1"},
			{Type: lullv1alpha1.StepReboot, Fallback: true, State: lullv1alpha1.ActionRunning, BootID: "boot-1"},
		})
	r, c := newFixture(t, newTestMachine("m", governed, hooked, onNode("n1")), node("n1"), nm)
	reconcileMachine(t, r, "m")
	skipped, recorded := skipOf(t, get(t, c, "m"))
	require.True(t, skipped && recorded,
		"lull reboots node n1 (a fallback Reboot in status.actions): MachineHealthChecks must stand down, and lull record that it made them")
}

// TestRedteam2SkipRemediationKeptWhileLeaseLostOnDownNode: lull powered
// node n1 off (PoweredOff, skip set and recorded), or is rebooting it.
// Its renewal of the node's lease fails (another actor took the lease
// after a drainer outage longer than the lease): the request goes to
// WaitingForLease (lease.go), keeping its cordon, its budget slot and
// the node as it is — off, or mid-reboot. It has not let go: once it has
// the lease again it goes on (PoweredOff again, or the reboot verified).
// heldDown is false for WaitingForLease, so lull removes the skip and a
// MachineHealthCheck remediates the node lull holds down on purpose: the
// Machine's deletion is then irrevocable, and the node is replaced once
// the hardware work ends.
func TestRedteam2SkipRemediationKeptWhileLeaseLostOnDownNode(t *testing.T) {
	for name, nm := range map[string]*lullv1alpha1.NodeMaintenance{
		"powered off": heldDownRequest(lullv1alpha1.PhaseWaitingForLease,
			[]lullv1alpha1.PlannedStep{{Type: lullv1alpha1.ActionCordon}, {Type: lullv1alpha1.ActionDrain}, {Type: lullv1alpha1.StepPowerOff}},
			[]lullv1alpha1.ActionStatus{{Type: lullv1alpha1.StepPowerOff, State: lullv1alpha1.ActionSucceeded}}),
		"mid-reboot": heldDownRequest(lullv1alpha1.PhaseWaitingForLease,
			[]lullv1alpha1.PlannedStep{{Type: lullv1alpha1.ActionCordon}, {Type: lullv1alpha1.ActionDrain}, {Type: lullv1alpha1.StepReboot}},
			[]lullv1alpha1.ActionStatus{{Type: lullv1alpha1.StepReboot, State: lullv1alpha1.ActionRunning, BootID: "boot-1"}}),
	} {
		t.Run(name, func(t *testing.T) {
			m := newTestMachine("m", governed, hooked, onNode("n1"), func(m *unstructured.Unstructured) {
				annotate(m, capi.SkipRemediationAnnotation, "")
				annotate(m, capi.SkipRemediationByLull, "n1")
			})
			r, c := newFixture(t, m, node("n1"), nm)
			reconcileMachine(t, r, "m")
			skipped, _ := skipOf(t, get(t, c, "m"))
			require.True(t, skipped, "node n1 is still down for lull's request (%s, lease lost): lull has not let go, and a health check would replace it", name)
		})
	}
}

// TestRedteam2SkipRemediationRewrittenByOthersStays: lull set
// skip-remediation ("") with its record. While lull holds the node, an
// admin (or another controller) who wants health checks kept off this
// Machine beyond lull's work writes the skip with a value of their own
// (`kubectl annotate --overwrite machine m
// cluster.x-k8s.io/skip-remediation=rma-4711`). When lull's request ends,
// lull removes the skip anyway because its record is there: it removes
// an annotation it no longer set. The value lull wrote is the only thing
// that can tell, so lull should write a value of its own and remove the
// skip only while it still carries it (its record goes either way).
func TestRedteam2SkipRemediationRewrittenByOthersStays(t *testing.T) {
	nm := heldDownRequest(lullv1alpha1.PhaseCompleted,
		[]lullv1alpha1.PlannedStep{{Type: lullv1alpha1.ActionCordon}, {Type: lullv1alpha1.ActionDrain}, {Type: lullv1alpha1.StepPowerOff}}, nil)
	r, c := newFixture(t, newTestMachine("m", governed, hooked, onNode("n1")), node("n1"), nm)
	setPhase := func(p lullv1alpha1.MaintenancePhase) {
		t.Helper()
		nm.Status.Phase = p
		require.NoError(t, c.Status().Update(t.Context(), nm))
		reconcileMachine(t, r, "m")
	}
	setPhase(lullv1alpha1.PhasePoweredOff)
	m := get(t, c, "m")
	skipped, recorded := skipOf(t, m)
	require.True(t, skipped && recorded, "lull holds n1 powered off")
	lulls := m.GetAnnotations()[capi.SkipRemediationAnnotation]

	const admins = "rma-4711"
	require.NotEqual(t, admins, lulls)
	annotate(m, capi.SkipRemediationAnnotation, admins)
	require.NoError(t, c.Update(t.Context(), m))

	setPhase(lullv1alpha1.PhaseCompleted)
	got := get(t, c, "m").GetAnnotations()
	require.NotContains(t, got, capi.SkipRemediationByLull, "lull's record goes with its request")
	require.Equal(t, admins, got[capi.SkipRemediationAnnotation],
		"the skip was rewritten by someone else (%q, lull wrote %q): it is theirs now, and lull removes only what it set", admins, lulls)
}

// --- the before-upgrade hold ------------------------------------------------

// TestRedteam2UpgradeHeldWhileCordonOutlivesLease: lull's request on the
// Cluster's node lost the node's lease mid-work (WaitingForLease) with
// lull's cordon still in place and, here, the node powered off: it still
// holds its budget slot (HoldsSlot) and will go on once it has the lease
// again. It is "started and not finished", but holdsUpgrade counts only
// Disrupting phases, so lull releases the hold and the topology upgrade
// starts on top of lull's work.
func TestRedteam2UpgradeHeldWhileCordonOutlivesLease(t *testing.T) {
	nm := heldDownRequest(lullv1alpha1.PhaseWaitingForLease,
		[]lullv1alpha1.PlannedStep{{Type: lullv1alpha1.ActionCordon}, {Type: lullv1alpha1.ActionDrain}, {Type: lullv1alpha1.StepPowerOff}},
		[]lullv1alpha1.ActionStatus{{Type: lullv1alpha1.StepPowerOff, State: lullv1alpha1.ActionSucceeded}})
	require.True(t, nm.Status.HoldsSlot(), "the request still holds its budget slot")
	_, c := newFixture(t, testCluster(true, map[string]string{capi.BeforeUpgradeHook: "lull has 1 request(s) in progress: node n1 (hardware, PoweredOff)"}),
		newTestMachine("m", inCluster, onNode("n1")), nm)
	require.Contains(t, reconcileCluster(t, &ClusterReconciler{Client: c}).GetAnnotations(), capi.BeforeUpgradeHook,
		"lull's cordon is on node n1, which is powered off for its request: the upgrade must keep waiting")
}

// TestRedteam2ForgedClusterAPIRequestHoldsUpgrade: holdsUpgrade lets any
// request annotated lull.dev/requested-by=cluster-api go, and nothing
// reserves that annotation to lull-drainer: a maintainer's own request
// (a hardware power-off, made with `kubectl create`, or an existing one
// whose annotation they change mid-work) escapes the upgrade hold. Only
// lull-drainer should be able to make a request Cluster API's (the guard
// refuses anyone else creating one with requested-by cluster-api, or
// changing the annotation to or from it), or holdsUpgrade should count a
// request as Cluster API's own only for a Machine of this Cluster that is
// being deleted.
func TestRedteam2ForgedClusterAPIRequestHoldsUpgrade(t *testing.T) {
	forged := func() map[string]any {
		return map[string]any{"apiVersion": "lull.dev/v1alpha1", "kind": "NodeMaintenance",
			"metadata": map[string]any{"name": "n1", "annotations": map[string]any{lullv1alpha1.RequestedByAnnotation: capi.RequestedBy}},
			"spec":     map[string]any{"nodeName": "n1", "classes": []any{"hardware"}}}
	}
	t.Run("created by a maintainer", func(t *testing.T) {
		refused := guardVerdict(t, "CREATE", "nodemaintenances", "NodeMaintenance", forged(), nil, "alice", redteam2MaintainerGroups)
		require.NotEmpty(t, refused, "a maintainer's hardware request passes for Cluster API's own and escapes the upgrade hold")
	})
	t.Run("annotation changed by a maintainer mid-work", func(t *testing.T) {
		old := forged()
		old["metadata"].(map[string]any)["annotations"] = map[string]any{lullv1alpha1.RequestedByAnnotation: lullv1alpha1.RequestedByCLI}
		refused := guardVerdict(t, "UPDATE", "nodemaintenances", "NodeMaintenance", forged(), old, "alice", redteam2MaintainerGroups)
		require.NotEmpty(t, refused, "a maintainer relabels their request Cluster API's: the hold on the Cluster is released mid-work")
	})
	t.Run("lull-drainer still may", func(t *testing.T) {
		obj := forged()
		obj["metadata"].(map[string]any)["annotations"].(map[string]any)[capi.MachineAnnotation] = "ns/m"
		obj["spec"].(map[string]any)["classes"] = []any{string(capi.CauseRollout)}
		require.Empty(t, guardVerdict(t, "CREATE", "nodemaintenances", "NodeMaintenance", obj, nil, redteam2Drainer, redteam2SAGroups))
	})
}

// --- the guard: lull-cluster-api-writes --------------------------------------

func redteam2Machine(annotations map[string]any) map[string]any {
	return map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
		"metadata": map[string]any{"name": "m", "namespace": "ns", "labels": map[string]any{capi.GovernedLabel: "true"}, "annotations": annotations},
		"spec":     map[string]any{"clusterName": "c1"}}
}

// TestRedteam2GuardSkipRemediationNeedsLullsRecord: the guard lets
// lull-drainer add or remove cluster.x-k8s.io/skip-remediation freely,
// record or no record. A compromised drainer (the guard's whole reason)
// removes an admin's skip from a Machine whose node the admin keeps down
// (health checks then replace it), or adds a skip no record names (lull
// never removes it: health checks stay off that Machine for good, and no
// pager learns of its dead node). lull itself only adds the skip with its
// record and only removes it where its record is: the guard should hold
// lull-drainer to the same.
func TestRedteam2GuardSkipRemediationNeedsLullsRecord(t *testing.T) {
	for _, tc := range []struct {
		name     string
		old, new map[string]any
		ok       bool
	}{
		{"lull sets its skip with its record", map[string]any{capi.PreDrainHook: capi.HookOwner},
			map[string]any{capi.PreDrainHook: capi.HookOwner, capi.SkipRemediationAnnotation: "", capi.SkipRemediationByLull: "n1"}, true},
		{"lull removes its skip and its record", map[string]any{capi.PreDrainHook: capi.HookOwner, capi.SkipRemediationAnnotation: "", capi.SkipRemediationByLull: "n1"},
			map[string]any{capi.PreDrainHook: capi.HookOwner}, true},
		{"an admin's skip removed", map[string]any{capi.PreDrainHook: capi.HookOwner, capi.SkipRemediationAnnotation: ""},
			map[string]any{capi.PreDrainHook: capi.HookOwner}, false},
		{"a skip without lull's record", map[string]any{capi.PreDrainHook: capi.HookOwner},
			map[string]any{capi.PreDrainHook: capi.HookOwner, capi.SkipRemediationAnnotation: ""}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refused := guardVerdict(t, "UPDATE", "machines", "Machine", redteam2Machine(tc.new), redteam2Machine(tc.old), redteam2Drainer, redteam2SAGroups)
			if tc.ok {
				require.Empty(t, refused)
			} else {
				require.NotEmpty(t, refused, "lull-drainer changed a skip-remediation that is not lull's (no record of it)")
			}
		})
	}
}

// TestRedteam2GuardFollowsConfiguredDrainer: params.yaml says lull-drainer
// may authenticate as another user (data.drainer), and every other
// policy reads its name from there — lull-emergency-options grants that
// user the remediation deadline. lull-cluster-api-writes instead matches
// only a ServiceAccount named lull-drainer: with data.drainer set, the
// drainer's writes to Machines and Clusters are not restricted at all,
// and it may upgrade a Cluster or rewrite a Machine (fails open).
func TestRedteam2GuardFollowsConfiguredDrainer(t *testing.T) {
	const configured = "system:serviceaccount:ops:lull-controller"
	// The guard's manifests with params naming the drainer, where
	// guardVerdict reads them (../../manifests/admission).
	root := t.TempDir()
	dir := filepath.Join(root, "manifests", "admission")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	files, err := filepath.Glob("../../manifests/admission/*.yaml")
	require.NoError(t, err)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		if filepath.Base(f) == "params.yaml" {
			b = append(b, []byte("  drainer: "+configured+"\n")...)
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644))
	}
	work := filepath.Join(root, "drainer", "machines")
	require.NoError(t, os.MkdirAll(work, 0o755))
	t.Chdir(work)

	// The control: the other policies know it as lull-drainer (it makes a
	// remediation's request with its deadline).
	remediation := map[string]any{"apiVersion": "lull.dev/v1alpha1", "kind": "NodeMaintenance",
		"metadata": map[string]any{"name": "n1", "annotations": map[string]any{lullv1alpha1.RequestedByAnnotation: capi.RequestedBy}},
		"spec":     map[string]any{"nodeName": "n1", "classes": []any{string(capi.CauseRemediation)}, "deadline": "2026-11-27T14:00:00Z"}}
	sa := []string{"system:serviceaccounts", "system:serviceaccounts:ops", "system:authenticated"}
	require.Empty(t, guardAdmits(t, remediation, configured, sa), "the configured drainer is lull-drainer to the other policies")

	base := func() map[string]any {
		return map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
			"metadata": map[string]any{"name": "c1", "namespace": "ns"}, "spec": map[string]any{"topology": map[string]any{"version": "v1.37.0"}}}
	}
	upgraded := base()
	upgraded["spec"].(map[string]any)["topology"].(map[string]any)["version"] = "v1.38.0"
	require.NotEmpty(t, guardVerdict(t, "UPDATE", "clusters", "Cluster", upgraded, base(), configured, sa),
		"the drainer named in lull-admission (%s) upgrades a Cluster: the guard does not know it is lull-drainer", configured)
}

// --- the remediation deadline -----------------------------------------------

// TestRedteam2RemediationDeadlineNotReusedForOtherClasses: lull-drainer
// makes a remediation's request with spec.deadline (the guard's one
// exception). A maintainer then edits that request: other classes
// (kernel-update, hardware) or host changes, keeping the deadline.
// lull-emergency-options sees no deadline "added or changed" and admits
// it: a maintainer's reboot or power-off runs outside the node's windows
// on a deadline they could not have set, which is what the exception
// promises not to allow. A request whose deadline came from the exception
// must not be given other work without the emergency group.
func TestRedteam2RemediationDeadlineNotReusedForOtherClasses(t *testing.T) {
	request := func(mutate func(spec map[string]any)) map[string]any {
		spec := map[string]any{"nodeName": "n1", "classes": []any{string(capi.CauseRemediation)},
			"deadline": "2026-11-27T14:00:00Z", "reason": "Cluster API deletes Machine ns/m: the Machine is marked unhealthy"}
		if mutate != nil {
			mutate(spec)
		}
		return map[string]any{"apiVersion": "lull.dev/v1alpha1", "kind": "NodeMaintenance",
			"metadata": map[string]any{"name": "n1", "finalizers": []any{lullv1alpha1.DrainerFinalizer}, "annotations": map[string]any{
				lullv1alpha1.RequestedByAnnotation: capi.RequestedBy, capi.MachineAnnotation: "ns/m", capi.MachineUIDAnnotation: "uid-m"}},
			"spec": spec}
	}
	// The control: what a maintainer may do to it (a reason) passes.
	require.Empty(t, guardVerdict(t, "UPDATE", "nodemaintenances", "NodeMaintenance",
		request(func(s map[string]any) { s["reason"] = "looked at by alice" }), request(nil), "alice", redteam2MaintainerGroups))
	for name, mutate := range map[string]func(map[string]any){
		"a class added":  func(s map[string]any) { s["classes"] = []any{string(capi.CauseRemediation), "kernel-update"} },
		"class replaced": func(s map[string]any) { s["classes"] = []any{"hardware"} },
		"changes added":  func(s map[string]any) { s["changes"] = map[string]any{"units": []any{"chronyd"}} },
	} {
		t.Run(name, func(t *testing.T) {
			refused := guardVerdict(t, "UPDATE", "nodemaintenances", "NodeMaintenance", request(mutate), request(nil), "alice", redteam2MaintainerGroups)
			require.NotEmpty(t, refused, "a maintainer gives lull-drainer's remediation request (deadline: not held by windows) other work (%s)", name)
		})
	}
}
