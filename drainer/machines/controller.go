// Package machines is lull-drainer's Cluster API controller: a Machine that
// lull governs (internal/capi.GovernedLabel) carries lull's pre-drain hook, and
// when Cluster API deletes it (a rollout, a scale-down, a remediation, a
// user's delete) its node becomes a lull request like any other: it waits
// for the node's windows, gates, budget and lease, lull cordons and
// drains it, and only then removes the hook, so Cluster API's own drain
// finds nothing to evict. The request keeps the lease and the budget slot
// until the node is gone. docs/cluster-api.md.
package machines

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/capi"
)

// Event reasons on Machines.
const (
	ReasonHookAdded       = "LullHookAdded"
	ReasonWaitingForLull  = "WaitingForLull"
	ReasonDrainedByLull   = "DrainedByLull"
	ReasonNodeHeldByOther = "NodeHeldByAnotherRequest"
	ReasonLullFailed      = "LullRequestFailed"
)

// recheck is how soon a Machine is looked at again when what it waits for
// is not watched (a request being deleted, a cache behind a create);
// waitOther how often a Machine whose node another request holds is.
const (
	recheck   = 2 * time.Second
	waitOther = 15 * time.Second
)

// Reconciler keeps governed Machines' hooks and requests.
type Reconciler struct {
	// Client reads and writes lull's objects and Nodes.
	Client client.Client
	// Machines reads and writes Cluster API's objects: the management
	// cluster's (--cluster-api-kubeconfig), or nil for Client's own API
	// server (a self-managed cluster).
	Machines client.Client
	// Cluster, when set, is the one Cluster (in Machines' API server)
	// whose Machines are this cluster's nodes: a management cluster's
	// other Machines are other lulls' and left alone.
	Cluster *types.NamespacedName
	// Recorder records events on Machines, in their API server.
	Recorder events.EventRecorder
	// Finalizer is the NodeMaintenance finalizer the drainer sets on the
	// requests it makes (maintenance.Finalizer).
	Finalizer string
	// RemediationDeadline: a remediation's request is not gated by
	// maintenance windows once this long has passed since the Machine's
	// deletion (its Deadline); negative: windows gate it like any other.
	RemediationDeadline time.Duration
}

func newMachine() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(capi.MachineKind)
	return u
}

// machines is the client of Cluster API's objects.
func (r *Reconciler) machines() client.Client { return cmp.Or[client.Client](r.Machines, r.Client) }

// SetupWithManager registers the controller: Machines (from capiCluster,
// the management cluster, or from mgr's own when nil), and the requests
// for their nodes (made for a Machine, by its lull.dev/machine annotation,
// or any other, by node).
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, capiCluster cluster.Cluster) error {
	var from cluster.Cluster = mgr
	if capiCluster != nil {
		from = capiCluster
	}
	if err := from.GetFieldIndexer().IndexField(ctx, newMachine(), capi.NodeIndex, NodeOf); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("cluster-api-machines").
		WatchesRawSource(source.Kind(from.GetCache(), newMachine(), &handler.TypedEnqueueRequestForObject[*unstructured.Unstructured]{})).
		Watches(&lullv1alpha1.NodeMaintenance{}, handler.EnqueueRequestsFromMapFunc(r.machinesOf)).
		Complete(r)
}

// NodeOf indexes a Machine by its node.
func NodeOf(o client.Object) []string {
	u, ok := o.(*unstructured.Unstructured)
	if !ok || capi.NodeName(u) == "" {
		return nil
	}
	return []string{capi.NodeName(u)}
}

// machinesOf are the Machines a request concerns: the one it was made for
// and those on its node.
func (r *Reconciler) machinesOf(ctx context.Context, o client.Object) []reconcile.Request {
	var out []reconcile.Request
	if ns, name, ok := strings.Cut(o.GetAnnotations()[capi.MachineAnnotation], "/"); ok && ns != "" && name != "" {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
	}
	nm, ok := o.(*lullv1alpha1.NodeMaintenance)
	if !ok {
		return out
	}
	ms, err := machinesOnNode(ctx, r.machines(), nm.Spec.NodeName)
	if err != nil {
		return out
	}
	for i := range ms {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ms[i].GetNamespace(), Name: ms[i].GetName()}})
	}
	return out
}

// Reconcile brings one Machine's hook and request to what its state asks.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	logger := klog.FromContext(ctx)
	m := newMachine()
	if err := r.machines().Get(ctx, req.NamespacedName, m); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, r.endRequestsOf(ctx, req.NamespacedName, "")
		}
		return reconcile.Result{}, err
	}
	// A Machine of the same name made again (also another cluster's):
	// the old one's requests, this cluster's, end.
	if err := r.endRequestsOf(ctx, req.NamespacedName, m.GetUID()); err != nil {
		return reconcile.Result{}, err
	}
	if !ofCluster(r.Cluster, m) {
		return reconcile.Result{}, nil // another workload cluster's
	}
	switch {
	case capi.Deleting(m) && capi.HasHook(m):
		// Being deleted with lull's hook: lull drains first, whether or
		// not the label is still there (the hook is what Cluster API
		// waits for).
		return r.deleting(ctx, m)
	case capi.Deleting(m):
		return reconcile.Result{}, nil // lull is done with it, or never had it
	case !capi.Governed(m):
		// No longer governed (its label removed): lull's hook and skip go
		// with it, and Cluster API decides alone.
		if capi.HasHook(m) {
			return reconcile.Result{}, r.setHook(ctx, m, false)
		}
		return reconcile.Result{}, r.syncSkipRemediation(ctx, m, false)
	default:
		// A governed Machine carries the hook from its creation (the
		// lull-cluster-api admission policy); one that existed before
		// lull governed it gets it here.
		if !capi.HasHook(m) {
			if err := r.setHook(ctx, m, true); err != nil {
				return reconcile.Result{}, err
			}
			r.event(m, corev1.EventTypeNormal, ReasonHookAdded, "lull governs this Machine: its deletion waits for lull's drain (annotation %s)", capi.PreDrainHook)
			logger.V(2).Info("Added lull's pre-drain hook")
			return reconcile.Result{}, nil // the patch brings the Machine back
		}
		return reconcile.Result{}, r.syncSkipRemediation(ctx, m, true)
	}
}

// heldDown reports whether lull takes or keeps the request's node down on
// purpose, until the request finishes: a powered-off node it holds, a
// power-off begun, a reboot (planned, or a fallback) not yet seen back,
// also while the request waits to take the node's lease again; and a plan
// with a Reboot or PowerOff whose host steps run.
func heldDown(nm *lullv1alpha1.NodeMaintenance) bool {
	st := &nm.Status
	if st.Phase.Finished() {
		return false
	}
	if st.Phase == lullv1alpha1.PhasePoweredOff {
		return true
	}
	for _, a := range st.Actions {
		switch {
		case a.Type == lullv1alpha1.StepPowerOff && a.State != lullv1alpha1.ActionPending && a.State != "":
			return true
		case a.Type == lullv1alpha1.StepReboot && a.State == lullv1alpha1.ActionRunning:
			return true
		}
	}
	if st.Phase == lullv1alpha1.PhaseActing && st.Decision != nil {
		if lullv1alpha1.Plan(st.Decision.Steps).TakesNodeDown() {
			return true
		}
	}
	return false
}

// syncSkipRemediation keeps MachineHealthChecks off a governed Machine
// while lull holds its node down on purpose (the health check would see
// it NotReady and replace it), and lets them back once lull lets go. lull
// records that it set the annotation and removes only its own: one an
// admin set stays. A Machine lull no longer governs loses lull's skip.
func (r *Reconciler) syncSkipRemediation(ctx context.Context, m *unstructured.Unstructured, governed bool) error {
	want := ""
	if node := capi.NodeName(m); governed && node != "" {
		var nm lullv1alpha1.NodeMaintenance
		if err := r.Client.Get(ctx, client.ObjectKey{Name: node}, &nm); err == nil && heldDown(&nm) {
			want = nm.Name
		} else if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	a := m.GetAnnotations()
	value, skipped := a[capi.SkipRemediationAnnotation]
	_, mine := a[capi.SkipRemediationByLull]
	var set map[string]any
	switch {
	case want != "" && !skipped:
		set = map[string]any{capi.SkipRemediationAnnotation: capi.HookOwner, capi.SkipRemediationByLull: want}
	case want == "" && mine:
		// The record goes; the skip too, unless someone wrote their own
		// over lull's meanwhile: it is theirs now.
		set = map[string]any{capi.SkipRemediationByLull: nil}
		if value == capi.HookOwner {
			set[capi.SkipRemediationAnnotation] = nil
		}
	default:
		return nil
	}
	if err := patchAnnotations(ctx, r.machines(), m, set); err != nil {
		return fmt.Errorf("setting %s on Machine %s/%s: %w", capi.SkipRemediationAnnotation, m.GetNamespace(), m.GetName(), err)
	}
	if want != "" {
		klog.FromContext(ctx).Info("lull holds the Machine's node down on purpose; MachineHealthChecks skip it", "request", want)
	} else {
		klog.FromContext(ctx).Info("lull let the Machine's node go; MachineHealthChecks may remediate it again")
	}
	return nil
}

// deleting handles a governed Machine being deleted that still carries
// lull's hook.
func (r *Reconciler) deleting(ctx context.Context, m *unstructured.Unstructured) (reconcile.Result, error) {
	logger := klog.FromContext(ctx)
	nodeName := capi.NodeName(m)
	if nodeName == "" {
		logger.V(2).Info("Machine has no node; nothing to drain, removing lull's hook")
		return reconcile.Result{}, r.setHook(ctx, m, false)
	}
	var node corev1.Node
	if err := r.Client.Get(ctx, client.ObjectKey{Name: nodeName}, &node); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
		logger.V(2).Info("Machine's node is gone; nothing to drain, removing lull's hook", "node", nodeName)
		return reconcile.Result{}, r.setHook(ctx, m, false)
	}
	var nm lullv1alpha1.NodeMaintenance
	err := r.Client.Get(ctx, client.ObjectKey{Name: nodeName}, &nm)
	if apierrors.IsNotFound(err) {
		return r.request(ctx, m, nodeName)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if nm.DeletionTimestamp != nil {
		// Being deleted (someone asks again, or it is being ended): its
		// phase says nothing about this Machine's drain. The hook stays;
		// the request is made again once this one is gone.
		return reconcile.Result{RequeueAfter: recheck}, nil
	}
	ours := nm.Annotations[capi.MachineUIDAnnotation] == string(m.GetUID())
	if nm.Status.Phase.Finished() && (!ours || nm.Status.Phase != lullv1alpha1.PhaseFailed) {
		// A finished request with the node still there is a record: a
		// label's or an admin's, or this Machine's own that ended without
		// draining it (completed by hand while it waited, its Node object
		// deleted and registered again). It makes way, and the Machine's
		// node is requested again.
		if err := r.Client.Delete(ctx, &nm, client.Preconditions{UID: &nm.UID}); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, fmt.Errorf("deleting the finished request %s to make way for Machine %s/%s: %w", nm.Name, m.GetNamespace(), m.GetName(), err)
		}
		return reconcile.Result{RequeueAfter: recheck}, nil
	}
	if !ours {
		// Another request has the node (an admin's, a label's, another
		// Machine's on the same node): the Machine waits at lull's hook
		// until it ends, and is requested then.
		r.event(m, corev1.EventTypeNormal, ReasonNodeHeldByOther, "node %s has another lull request (NodeMaintenance %s, %s, phase %s); the Machine's deletion waits until it ends",
			nodeName, nm.Name, nm.Spec.ClassNames(), nm.Status.Phase.OrPending())
		return reconcile.Result{RequeueAfter: waitOther}, nil
	}
	switch nm.Status.Phase {
	case lullv1alpha1.PhaseDrained:
		// Drained under the node's windows, budget and lease, which the
		// request holds until the node is gone: Cluster API may go on.
		if err := r.setHook(ctx, m, false); err != nil {
			return reconcile.Result{}, err
		}
		r.event(m, corev1.EventTypeNormal, ReasonDrainedByLull, "lull drained node %s (NodeMaintenance %s) and removed its hook; lull holds the node's lease until the node is gone", nodeName, nm.Name)
		logger.Info("Node drained by lull; removed lull's pre-drain hook", "node", nodeName)
	case lullv1alpha1.PhaseFailed:
		// The hook stays: Cluster API would drain at once, at any hour.
		// The request's status says what failed; deleting the request
		// asks again.
		r.event(m, corev1.EventTypeWarning, ReasonLullFailed, "lull's request for node %s failed (%s); the Machine waits at lull's hook: see `kubectl get nodemaintenance %s -o yaml`, delete it to ask again, or remove the annotation %s to let Cluster API drain",
			nodeName, nm.Status.WaitingFor, nm.Name, capi.PreDrainHook)
	}
	return reconcile.Result{}, nil
}

// request makes the lull request for the Machine's node.
func (r *Reconciler) request(ctx context.Context, m *unstructured.Unstructured, nodeName string) (reconcile.Result, error) {
	cause, why, err := r.cause(ctx, m)
	if err != nil {
		return reconcile.Result{}, err
	}
	key := m.GetNamespace() + "/" + m.GetName()
	nm := &lullv1alpha1.NodeMaintenance{
		ObjectMeta: metav1.ObjectMeta{
			Name: nodeName,
			Annotations: map[string]string{
				lullv1alpha1.RequestedByAnnotation: capi.RequestedBy,
				capi.MachineAnnotation:             key,
				capi.MachineUIDAnnotation:          string(m.GetUID()),
			},
			Finalizers: []string{r.Finalizer},
		},
		Spec: lullv1alpha1.NodeMaintenanceSpec{
			NodeName: nodeName,
			Classes:  []string{string(cause)},
			Reason:   fmt.Sprintf("Cluster API deletes Machine %s: %s", key, why),
		},
	}
	if cause == capi.CauseRemediation && r.RemediationDeadline >= 0 {
		at := m.GetDeletionTimestamp().Add(r.RemediationDeadline)
		nm.Spec.Deadline = &metav1.Time{Time: at.UTC().Truncate(time.Second)}
	}
	if err := r.Client.Create(ctx, nm); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// The cache had not seen it yet: look again.
			return reconcile.Result{RequeueAfter: recheck}, nil
		}
		return reconcile.Result{}, fmt.Errorf("requesting maintenance of node %s for Machine %s: %w", nodeName, key, err)
	}
	r.event(m, corev1.EventTypeNormal, ReasonWaitingForLull, "Cluster API's deletion of this Machine (%s) waits for lull: NodeMaintenance %s drains node %s when its windows, gates, budget and lease allow",
		cause, nm.Name, nodeName)
	klog.FromContext(ctx).Info("Requested maintenance for a Machine's deletion", "node", nodeName, "cause", cause)
	return reconcile.Result{}, nil
}

// cause reads the Machine's MachineSet and MachineDeployment to tell why it
// is deleted.
func (r *Reconciler) cause(ctx context.Context, m *unstructured.Unstructured) (capi.Cause, string, error) {
	var set, md *unstructured.Unstructured
	active := 0
	if name := capi.OwnerMachineSet(m); name != "" {
		set = &unstructured.Unstructured{}
		set.SetGroupVersionKind(capi.MachineSetKind)
		if err := r.machines().Get(ctx, client.ObjectKey{Namespace: m.GetNamespace(), Name: name}, set); err != nil {
			if !apierrors.IsNotFound(err) {
				return "", "", err
			}
			set = nil
		}
	}
	if set != nil {
		list := newMachineList()
		if err := r.machines().List(ctx, list, client.InNamespace(m.GetNamespace())); err != nil {
			return "", "", err
		}
		for i := range list.Items {
			if capi.OwnerMachineSet(&list.Items[i]) == set.GetName() && !capi.Deleting(&list.Items[i]) {
				active++
			}
		}
		if name := m.GetLabels()[capi.MachineDeploymentNameLabel]; name != "" {
			md = &unstructured.Unstructured{}
			md.SetGroupVersionKind(capi.MachineDeploymentKind)
			if err := r.machines().Get(ctx, client.ObjectKey{Namespace: m.GetNamespace(), Name: name}, md); err != nil {
				if !apierrors.IsNotFound(err) {
					return "", "", err
				}
				md = nil
			}
		}
	}
	cause, why := capi.CauseOf(m, set, active, md)
	return cause, why, nil
}

// endRequestsOf ends what lull still has for a Machine key that no longer
// exists (keep empty) or exists as another object (UID keep): each request
// made for it is deleted once it has finished (its node gone), or
// completed if its node outlived the Machine.
func (r *Reconciler) endRequestsOf(ctx context.Context, key types.NamespacedName, keep types.UID) error {
	var list lullv1alpha1.NodeMaintenanceList
	if err := r.Client.List(ctx, &list); err != nil {
		return err
	}
	for i := range list.Items {
		nm := &list.Items[i]
		if nm.Annotations[capi.MachineAnnotation] != key.String() || nm.DeletionTimestamp != nil ||
			(keep != "" && nm.Annotations[capi.MachineUIDAnnotation] == string(keep)) {
			continue
		}
		if nm.Status.Phase.Finished() {
			if err := r.Client.Delete(ctx, nm, client.Preconditions{UID: &nm.UID}); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting request %s of the deleted Machine %s: %w", nm.Name, key, err)
			}
			continue
		}
		if !nm.Spec.Complete {
			patch := client.MergeFrom(nm.DeepCopy())
			nm.Spec.Complete = true
			if err := r.Client.Patch(ctx, nm, patch); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("completing request %s of the deleted Machine %s: %w", nm.Name, key, err)
			}
		}
	}
	return nil
}

// setHook adds or removes lull's pre-drain hook, and only lull's: a JSON
// merge patch that names one annotation key, with the Machine's
// resourceVersion so a concurrent change is read again first.
func (r *Reconciler) setHook(ctx context.Context, m *unstructured.Unstructured, on bool) error {
	var value any // nil removes the key
	if on {
		value = capi.HookOwner
	}
	if err := patchAnnotations(ctx, r.machines(), m, map[string]any{capi.PreDrainHook: value}); err != nil {
		return fmt.Errorf("%s lull's hook on Machine %s/%s: %w", map[bool]string{true: "adding", false: "removing"}[on], m.GetNamespace(), m.GetName(), err)
	}
	return nil
}

func (r *Reconciler) event(m *unstructured.Unstructured, typ, reason, format string, args ...any) {
	eventOn(r.Recorder, m, typ, reason, format, args...)
}

// ofCluster reports whether o (a Machine, or a Cluster) belongs to only,
// when only is set.
func ofCluster(only *types.NamespacedName, o *unstructured.Unstructured) bool {
	if only == nil {
		return true
	}
	name := o.GetLabels()[capi.ClusterNameLabel]
	if o.GroupVersionKind().Kind == capi.ClusterKind.Kind {
		name = o.GetName()
	}
	return o.GetNamespace() == only.Namespace && name == only.Name
}
