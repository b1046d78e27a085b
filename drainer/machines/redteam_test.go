package machines

// Red team of commit ad187ff (Cluster API: a governed Machine's deletion
// waits for lull's drain). Each test names an attack on the promise of
// docs/cluster-api.md: a governed Machine is never drained or deleted by
// Cluster API before lull's own drain (windows, budget, gates, lease);
// lull removes only its own hook; the lease and budget slot are held until
// the node is gone and never left behind; lull never acts on a node for a
// Machine that is not its request's Machine.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/yaml"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/capi"
	"lull.dev/lull/internal/lullscheme"
)

// ourRequest is the request lull-drainer made for Machine ns/<machine>
// (uid-<machine>) on node, in phase.
func ourRequest(node, machine string, phase lullv1alpha1.MaintenancePhase) *lullv1alpha1.NodeMaintenance {
	return &lullv1alpha1.NodeMaintenance{
		ObjectMeta: metav1.ObjectMeta{Name: node, UID: types.UID("req-" + node), Finalizers: []string{lullv1alpha1.DrainerFinalizer},
			Annotations: map[string]string{
				lullv1alpha1.RequestedByAnnotation: capi.RequestedBy,
				capi.MachineAnnotation:             "ns/" + machine,
				capi.MachineUIDAnnotation:          "uid-" + machine,
			}},
		Spec:   lullv1alpha1.NodeMaintenanceSpec{NodeName: node, Classes: []string{string(capi.CauseRollout)}},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: phase},
	}
}

// --- The guard refuses lull-drainer's remediation requests -----------------

// vap is the part of a ValidatingAdmissionPolicy the guard test evaluates.
type vap struct {
	Kind     string
	Metadata struct{ Name string }
	Spec     struct {
		MatchConstraints struct {
			ResourceRules []struct {
				Operations []string
				Resources  []string
			}
		}
		MatchConditions []struct{ Name, Expression string }
		Variables       []struct{ Name, Expression string }
		Validations     []struct{ Expression string }
	}
}

func (p vap) matches(op, resource string) bool {
	for _, r := range p.Spec.MatchConstraints.ResourceRules {
		opOK, resOK := false, false
		for _, o := range r.Operations {
			opOK = opOK || o == op || o == "*"
		}
		for _, x := range r.Resources {
			resOK = resOK || x == resource || x == "*"
		}
		if opOK && resOK {
			return true
		}
	}
	return false
}

// guardAdmits evaluates every ValidatingAdmissionPolicy of
// manifests/admission that matches a CREATE of nodemaintenances, with the
// shipped parameters (params.yaml), as the API server would: it returns
// the names of the policies that refuse obj created by user.
func guardAdmits(t *testing.T, obj map[string]any, username string, groups []string) []string {
	t.Helper()
	return guardVerdict(t, "CREATE", "nodemaintenances", "NodeMaintenance", obj, nil, username, groups)
}

// guardVerdict evaluates every ValidatingAdmissionPolicy of
// manifests/admission that matches operation on resource (kind) for obj
// (and oldObject old) as username, and returns the validations that fail.
func guardVerdict(t *testing.T, operation, resource, kind string, obj, old map[string]any, username string, groups []string) []string {
	t.Helper()
	dir := "../../manifests/admission"
	pb, err := os.ReadFile(filepath.Join(dir, "params.yaml"))
	require.NoError(t, err)
	var params map[string]any
	require.NoError(t, yaml.Unmarshal(pb, &params))

	env, err := cel.NewEnv(cel.OptionalTypes(), ext.Strings(), ext.Lists(), ext.Sets(),
		cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType),
		cel.Variable("request", cel.DynType), cel.Variable("params", cel.DynType),
		cel.Variable("variables", cel.DynType))
	require.NoError(t, err)
	eval := func(expr string, act map[string]any) any {
		ast, iss := env.Compile(expr)
		require.NoError(t, iss.Err(), expr)
		prg, err := env.Program(ast)
		require.NoError(t, err)
		out, _, err := prg.Eval(act)
		require.NoError(t, err, expr)
		return out.Value()
	}
	gs := make([]any, len(groups))
	for i, g := range groups {
		gs[i] = g
	}
	request := map[string]any{"operation": operation, "name": obj["metadata"].(map[string]any)["name"],
		"kind": map[string]any{"kind": kind}, "userInfo": map[string]any{"username": username, "groups": gs}}

	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	var refused []string
	seen := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, doc := range strings.Split(string(b), "\n---") {
			var p vap
			if yaml.Unmarshal([]byte(doc), &p) != nil || p.Kind != "ValidatingAdmissionPolicy" || !p.matches(operation, resource) {
				continue
			}
			seen++
			vars := map[string]any{}
			var oldObject any
			if old != nil {
				oldObject = old
			}
			act := map[string]any{"object": obj, "oldObject": oldObject, "request": request, "params": params, "variables": vars}
			matched := true
			for _, mc := range p.Spec.MatchConditions {
				if eval(mc.Expression, act) != true {
					matched = false
				}
			}
			if !matched {
				continue
			}
			for _, v := range p.Spec.Variables {
				vars[v.Name] = eval(v.Expression, act)
			}
			for _, v := range p.Spec.Validations {
				if eval(v.Expression, act) != true {
					refused = append(refused, p.Metadata.Name+": "+strings.TrimSpace(v.Expression))
				}
			}
		}
	}
	require.NotZero(t, seen, "no policy of the guard matched %s", resource)
	return refused
}

// TestRedteamRemediationRequestPassesTheGuard: a MachineHealthCheck
// remediates a governed Machine. lull-drainer makes its request with
// spec.deadline (RemediationDeadline >= 0, the default 0), but the guard's
// policy lull-emergency-options reserves spec.deadline to lull:emergency
// with "no exception for lull-drainer: it never sets them". In a guarded
// install the Create is Forbidden on every retry: the unhealthy Machine
// waits at lull's hook forever and the remediation never happens.
func TestRedteamRemediationRequestPassesTheGuard(t *testing.T) {
	r, c := newFixture(t, newTestMachine("m", governed, hooked, deleting, onNode("n1"), func(m *unstructured.Unstructured) {
		_ = unstructured.SetNestedSlice(m.Object, []any{map[string]any{"type": capi.OwnerRemediatedCondition, "status": "False"}}, "status", "conditions")
	}), node("n1"))
	reconcileMachine(t, r, "m")
	var nm lullv1alpha1.NodeMaintenance
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "n1"}, &nm))
	require.Equal(t, []string{string(capi.CauseRemediation)}, nm.Spec.Classes)
	// What lull-drainer sends: the request as created, before the server
	// fills in anything.
	nm.ResourceVersion, nm.UID = "", ""
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&nm)
	require.NoError(t, err)
	refused := guardAdmits(t, obj, "system:serviceaccount:lull-system:lull-drainer",
		[]string{"system:serviceaccounts", "system:serviceaccounts:lull-system", "system:authenticated"})
	require.Empty(t, refused, "the guard refuses lull-drainer's request for a remediated Machine: the Machine waits at lull's hook forever")
}

// --- The hook goes for a request that did not drain -----------------------

// TestRedteamUnfinishedDrainKeepsTheHook: the hook is removed when the
// Machine's request is Completed or NodeNotFound, but with the node still
// there neither means lull drained it: a maintainer set spec.complete on
// the request while it waited for its window (it ends Completed having
// done nothing), or the Node object was deleted and re-registered by its
// kubelet while the request waited (Completed, NodeDeleted; or
// NodeNotFound). In both the node is uncordoned and unleased, and lull
// lets Cluster API drain and delete it at once, outside its windows and
// budget.
func TestRedteamUnfinishedDrainKeepsTheHook(t *testing.T) {
	for _, phase := range []lullv1alpha1.MaintenancePhase{lullv1alpha1.PhaseCompleted, lullv1alpha1.PhaseNodeNotFound} {
		t.Run(string(phase), func(t *testing.T) {
			nm := ourRequest("n1", "m", phase)
			nm.Spec.Complete = phase == lullv1alpha1.PhaseCompleted // completed by a maintainer while WaitingForWindow
			nm.Finalizers = nil                                     // a finished request has none
			r, c := newFixture(t, newTestMachine("m", governed, hooked, deleting, onNode("n1")), node("n1"), nm)
			reconcileMachine(t, r, "m")
			reconcileMachine(t, r, "m")
			require.True(t, capi.HasHook(get(t, c, "m")),
				"the request ended %s without lull draining node n1, which is still there and uncordoned: Cluster API would drain it at once", phase)
		})
	}
}

// TestRedteamRequestDeletedMidDrainKeepsTheHook: docs/cluster-api.md says
// "Delete the NodeMaintenance to ask again". A maintainer deletes the
// Machine's request: until lull-drainer's finalizer goes, the request is
// still there, Drained (before the finalizer runs) or Completed (after it
// uncordoned the node and released the lease, before the finalizer is
// removed). The Machine controller takes either for "drained by lull" and
// removes its hook: nothing is asked again, and Cluster API drains a node
// lull has uncordoned and released.
func TestRedteamRequestDeletedMidDrainKeepsTheHook(t *testing.T) {
	for _, phase := range []lullv1alpha1.MaintenancePhase{lullv1alpha1.PhaseDrained, lullv1alpha1.PhaseCompleted} {
		t.Run(string(phase), func(t *testing.T) {
			nm := ourRequest("n1", "m", phase)
			nm.DeletionTimestamp = &metav1.Time{Time: deletedAt}
			r, c := newFixture(t, newTestMachine("m", governed, hooked, deleting, onNode("n1")), node("n1"), nm)
			reconcileMachine(t, r, "m")
			require.True(t, capi.HasHook(get(t, c, "m")),
				"a request being deleted (phase %s) is being given back, not holding the node: the Machine must wait and be asked again", phase)
		})
	}
}

// --- A Machine waiting for another request is never asked again -----------

// TestRedteamHeldByAnotherRequestIsAskedAgain: the Machine's node has
// another lull request (an admin's, a label's) or one the cache does not
// show yet (Create: AlreadyExists). "The Machine waits until it ends, and
// is requested then" — but nothing brings it back: the NodeMaintenance
// watch maps only requests annotated lull.dev/machine, and Reconcile
// returns no requeue. When the admin's request ends, the Machine waits at
// the hook until the next resync (about 10 hours) or an unrelated Machine
// update.
func TestRedteamHeldByAnotherRequestIsAskedAgain(t *testing.T) {
	requeued := func(res reconcile.Result) bool {
		return res.RequeueAfter > 0 || res.Requeue //nolint:staticcheck // either way of asking again
	}
	t.Run("an admin's request", func(t *testing.T) {
		admin := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "admins"},
			Spec:   lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"hardware"}},
			Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseDraining}}
		r, _ := newFixture(t, newTestMachine("m", governed, hooked, deleting, onNode("n1")), node("n1"), admin)
		res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "m"}})
		require.NoError(t, err)
		require.True(t, requeued(res), "nothing else wakes the Machine when the admin's request ends")
	})
	t.Run("a request the cache does not show yet", func(t *testing.T) {
		admin := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "admins"},
			Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"hardware"}}}
		s := lullscheme.New()
		for _, k := range []string{"Machine", "MachineSet", "MachineDeployment"} {
			s.AddKnownTypeWithName(capi.MachineKind.GroupVersion().WithKind(k), &unstructured.Unstructured{})
			s.AddKnownTypeWithName(capi.MachineKind.GroupVersion().WithKind(k+"List"), &unstructured.UnstructuredList{})
		}
		c := fake.NewClientBuilder().WithScheme(s).
			WithObjects(newTestMachine("m", governed, hooked, deleting, onNode("n1")), node("n1"), admin).
			WithStatusSubresource(&lullv1alpha1.NodeMaintenance{}).
			WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*lullv1alpha1.NodeMaintenance); ok {
					return apierrors.NewNotFound(lullv1alpha1.GroupVersion.WithResource("nodemaintenances").GroupResource(), key.Name)
				}
				return c.Get(ctx, key, obj, opts...)
			}}).Build()
		r := &Reconciler{Client: c, Finalizer: lullv1alpha1.DrainerFinalizer}
		res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "m"}})
		require.NoError(t, err)
		require.True(t, requeued(res), "AlreadyExists of a request that is not the Machine's: its events never bring the Machine back")
	})
}

// --- A Machine recreated under the same name --------------------------------

// TestRedteamRecreatedMachineEndsTheOldRequest: Machine ns/m (uid-old) is
// deleted; lull drained its node n1 and holds it (Drained: cordon, lease,
// budget slot) until the node is gone. Its node outlives it (Cluster API's
// node deletion timed out), and Machine ns/m is created again (a user's
// Machine, a provider that names nodes after Machines) before lull saw it
// gone. machineGone runs only when Get(ns/m) is NotFound, so the old
// request is never completed: n1 stays cordoned and leased and its slot
// taken forever. And should the new ns/m be deleted on the same node, it
// waits for that request forever (NodeHeldByAnotherRequest).
func TestRedteamRecreatedMachineEndsTheOldRequest(t *testing.T) {
	for _, newNode := range []string{"n2", "n1"} {
		t.Run("new Machine on "+newNode, func(t *testing.T) {
			old := ourRequest("n1", "m", lullv1alpha1.PhaseDrained)
			old.Annotations[capi.MachineUIDAnnotation] = "uid-old"
			opts := []machineOpt{governed, hooked, onNode(newNode)}
			if newNode == "n1" {
				opts = append(opts, deleting)
			}
			r, c := newFixture(t, newTestMachine("m", opts...), node("n1"), node("n2"), old)
			reconcileMachine(t, r, "m")
			reconcileMachine(t, r, "m")
			var nm lullv1alpha1.NodeMaintenance
			err := c.Get(context.Background(), client.ObjectKey{Name: "n1"}, &nm)
			if apierrors.IsNotFound(err) {
				return
			}
			require.NoError(t, err)
			ended := nm.Spec.Complete || nm.DeletionTimestamp != nil || nm.Annotations[capi.MachineUIDAnnotation] == "uid-m"
			require.True(t, ended, "the request of the deleted Machine ns/m (uid-old) still holds node n1 (%s): lease and slot left behind", nm.Status.Phase)
		})
	}
}
