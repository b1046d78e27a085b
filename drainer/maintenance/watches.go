package maintenance

import (
	"context"
	"slices"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/agentlease"
	"lull.dev/lull/internal/disruptors"
	"lull.dev/lull/internal/gate"
	"lull.dev/lull/lease"
)

// What wakes a request: the predicates and map functions of the
// controller's watches (SetupWithManager, controller.go).

func nodeChanged(label string) predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Node)
			n, ok2 := e.ObjectNew.(*corev1.Node)
			if !ok1 || !ok2 {
				return true
			}
			// A reboot shows as a new boot ID and Ready going and coming;
			// another tool's disruption starting or ending decides the
			// lease gate (internal/disruptors).
			_, otherBefore := disruptors.Of(o)
			_, otherNow := disruptors.Of(n)
			return o.Labels[label] != n.Labels[label] || otherBefore != otherNow ||
				hasLabel(o, label) != hasLabel(n, label) || o.Spec.Unschedulable != n.Spec.Unschedulable ||
				o.Status.NodeInfo.BootID != n.Status.NodeInfo.BootID || nodeReady(o) != nodeReady(n)
		},
	}
}

// readyChanged passes node updates whose Ready condition changed status.
func readyChanged() predicate.Funcs {
	ready := func(n *corev1.Node) corev1.ConditionStatus {
		if c := gate.ReadyCondition(n); c != nil {
			return c.Status
		}
		return corev1.ConditionUnknown
	}
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Node)
			n, ok2 := e.ObjectNew.(*corev1.Node)
			return !ok1 || !ok2 || ready(o) != ready(n)
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// healthChanged passes budget updates that change whether the budget has
// the healthy pods it needs.
func healthChanged() predicate.Funcs {
	healthy := func(p *policyv1.PodDisruptionBudget) bool { return p.Status.CurrentHealthy >= p.Status.DesiredHealthy }
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*policyv1.PodDisruptionBudget)
			n, ok2 := e.ObjectNew.(*policyv1.PodDisruptionBudget)
			return !ok1 || !ok2 || healthy(o) != healthy(n)
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// budgetGrew passes PodDisruptionBudget updates that allow more
// disruptions than before.
func budgetGrew() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*policyv1.PodDisruptionBudget)
			n, ok2 := e.ObjectNew.(*policyv1.PodDisruptionBudget)
			return !ok1 || !ok2 || n.Status.DisruptionsAllowed > o.Status.DisruptionsAllowed
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

func (r *Reconciler) leaseToRequest(_ context.Context, o client.Object) []reconcile.Request {
	node, ok := "", false
	switch o.GetNamespace() {
	case r.Leases.Namespace():
		node, ok = lease.NodeOf(o.GetName())
	case r.Options.AgentNamespace:
		node, ok = strings.CutPrefix(o.GetName(), agentlease.Prefix)
	}
	if !ok || node == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: node}}}
}

// leaseChanged passes every change of a node lease, and of lull-agent's
// leases only their coming and going and a change of holder (a new pod):
// each agent renews every 10 s, which is no news. A request waiting for
// an agent whose lease lapsed looks again by itself.
func (r *Reconciler) leaseChanged() predicate.Funcs {
	agent := func(o client.Object) bool {
		return o.GetNamespace() == r.Options.AgentNamespace && o.GetNamespace() != r.Leases.Namespace()
	}
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			if !agent(e.ObjectNew) {
				return true
			}
			o, ok1 := e.ObjectOld.(*coordinationv1.Lease)
			n, ok2 := e.ObjectNew.(*coordinationv1.Lease)
			return !ok1 || !ok2 || ptr.Deref(o.Spec.HolderIdentity, "") != ptr.Deref(n.Spec.HolderIdentity, "")
		},
	}
}

// actionsChanged passes NodeMaintenance updates in which lull-agent
// recorded progress of a host step.
func actionsChanged() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*lullv1alpha1.NodeMaintenance)
			n, ok2 := e.ObjectNew.(*lullv1alpha1.NodeMaintenance)
			return !ok1 || !ok2 || !equality.Semantic.DeepEqual(o.Status.Actions, n.Status.Actions)
		},
	}
}

// waitingRequests enqueues every request still waiting to start.
func (r *Reconciler) waitingRequests(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.requestsIn(ctx, stageWaiting)
}

// heldRequests enqueues every request a health gate holds.
func (r *Reconciler) heldRequests(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.requestsIn(ctx, string(lullv1alpha1.PhaseWaitingForGates))
}

// gatesChanged passes window updates that may open a health gate: the
// gates' spec, or a gate condition's status.
func gatesChanged() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		DeleteFunc: func(event.DeleteEvent) bool { return true },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*lullv1alpha1.MaintenanceWindow)
			n, ok2 := e.ObjectNew.(*lullv1alpha1.MaintenanceWindow)
			if !ok1 || !ok2 {
				return true
			}
			if !equality.Semantic.DeepEqual(o.Spec.Gates, n.Spec.Gates) {
				return true
			}
			for _, t := range []string{lullv1alpha1.WindowConditionAlertsQuiet, lullv1alpha1.WindowConditionRecovered} {
				if meta.IsStatusConditionTrue(o.Status.Conditions, t) != meta.IsStatusConditionTrue(n.Status.Conditions, t) {
					return true
				}
			}
			return false
		},
	}
}

// blockedRequests enqueues the requests a budget that gained room may
// unblock: every request the cache shows Draining, and every node whose
// last drain round this budget blocked — the cache may not show the
// status write of that round yet.
func (r *Reconciler) blockedRequests(ctx context.Context, o client.Object) []reconcile.Request {
	out := r.requestsIn(ctx, string(lullv1alpha1.PhaseDraining))
	for _, node := range r.rounds.blockedBy(o.GetNamespace() + "/" + o.GetName()) {
		req := reconcile.Request{NamespacedName: types.NamespacedName{Name: node}}
		if !slices.Contains(out, req) {
			out = append(out, req)
		}
	}
	return out
}

// PhaseField indexes the cache's NodeMaintenances by phase, and every
// request waiting to start also under stageWaiting, so that the watches
// waking the requests of a phase list those few rather than every request:
// at 5,000 nodes, a list of them all (deep-copied) on each change of a
// PodDisruptionBudget's health was 70 % of lull-drainer's allocations
// (docs/performance.md).
const PhaseField = "lull.dev/phase"

// stageWaiting is PhaseField's value for every phase that waits to start.
const stageWaiting = "stage=Waiting"

// PhaseIndex is the index function of PhaseField.
func PhaseIndex(o client.Object) []string {
	nm, ok := o.(*lullv1alpha1.NodeMaintenance)
	if !ok {
		return nil
	}
	if nm.Status.Phase.Waiting() {
		return []string{string(nm.Status.Phase), stageWaiting}
	}
	return []string{string(nm.Status.Phase)}
}

// requestsIn names the requests the cache shows under value of PhaseField
// (a phase, or stageWaiting). A reader without the index (a test's
// client) is asked for every request, which gives the same answer.
func (r *Reconciler) requestsIn(ctx context.Context, value string) []reconcile.Request {
	var list lullv1alpha1.NodeMaintenanceList
	if err := r.Client.List(ctx, &list, client.UnsafeDisableDeepCopy, client.MatchingFields{PhaseField: value}); err != nil {
		list = lullv1alpha1.NodeMaintenanceList{}
		if err := r.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
			klog.FromContext(ctx).Error(err, "Listing NodeMaintenances")
			return nil
		}
		list.Items = slices.DeleteFunc(list.Items, func(nm lullv1alpha1.NodeMaintenance) bool { return !slices.Contains(PhaseIndex(&nm), value) })
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: list.Items[i].Name}})
	}
	return out
}

// wakeAll queues every request and every labelled node: lull is being
// uninstalled (each request is ended at once, not at its next periodic
// look), or no longer is (a label left on a node asks again, and nothing
// else would wake it: its label did not change).
func (r *Reconciler) wakeAll(ctx context.Context) {
	var nms lullv1alpha1.NodeMaintenanceList
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nms); err != nil {
		return // the periodic looks catch up
	}
	if err := r.Client.List(ctx, &nodes); err != nil {
		return
	}
	names := map[string]bool{}
	for i := range nms.Items {
		names[nms.Items[i].Name] = true
	}
	for i := range nodes.Items {
		if hasLabel(&nodes.Items[i], r.Options.MaintenanceLabel) {
			names[nodes.Items[i].Name] = true
		}
	}
	go func() {
		for name := range names {
			select {
			case r.Wake <- event.GenericEvent{Object: &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: name}}}:
			case <-ctx.Done(): // the manager stopped: nobody reads Wake any more
				return
			}
		}
	}()
}
