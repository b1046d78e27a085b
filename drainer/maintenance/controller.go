// Package maintenance is lull-drainer's NodeMaintenance controller. It turns
// maintenance labels into NodeMaintenance requests and carries each request
// through its life: wait for the node's windows, the windows' budget and the
// node's disruption lease; cordon; drain through the eviction API; hold the
// node drained until the operator completes the request; uncordon (only
// what lull cordoned) and release the lease. Every decision is derived from
// API state, so a controller killed at any instant resumes correctly.
//
// One file per job: controller.go sets up the watches; reconcile.go
// dispatches on the request's phase; labels.go syncs the maintenance
// label; gate.go acts on pkg/gate's verdict; lifecycle.go cordons, holds,
// aborts and completes; drain.go runs pkg/drain's rounds and escalates;
// lease.go renews and releases; status.go writes conditions and status;
// events.go and metrics.go say what happened.
package maintenance

import (
	"context"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/lease"
	"lull.dev/lull/pkg/agentlease"
	"lull.dev/lull/pkg/budget"
	"lull.dev/lull/pkg/forecast"
	"lull.dev/lull/pkg/gate"
	"lull.dev/lull/pkg/options"
	"lull.dev/lull/pkg/settings"
)

const (
	// Finalizer keeps a NodeMaintenance until lull has undone its cordon
	// and released the lease.
	Finalizer = lullv1alpha1.DrainerFinalizer
	// DefaultIdentityFamily is the drainer's lease holder family; replicas
	// hold leases as DefaultIdentityFamily/<replica>.
	DefaultIdentityFamily = settings.Drainer
)

// DefaultWorkers is how many requests are reconciled at once by default.
const DefaultWorkers = options.DefaultWorkers

// Options configure the controller (pkg/options declares them, with their
// defaults and flags, for lull-drainer and the plan preview alike).
type Options = options.Maintenance

// Reconciler carries NodeMaintenance requests out.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads the API server directly; the budget is counted
	// with it, never from a cache that may lag behind our own writes.
	APIReader client.Reader
	// Kube lists and evicts pods.
	Kube   kubernetes.Interface
	Leases *lease.Client
	// Budget fences starts in the API server (a ledger in
	// Options.BudgetNamespace when nil).
	Budget   *budget.Ledger
	Forecast *forecast.Forecast
	Clock    clock.Clock
	Recorder events.EventRecorder
	Metrics  *Metrics
	Options  Options
	// Wake delivers forecast changes (window transitions, deadlines).
	Wake chan event.GenericEvent
	// Uninstall says when lull is being uninstalled: every request is
	// then ended (uninstall.go). Nil: never.
	Uninstall *UninstallWatch

	// What the controller remembers between reconciles (memo.go).
	renewals renewals
	events   eventLimiter
	writes   ownWrites
	rounds   blockedRounds
	// waiters is the line for budget slots: a freed slot wakes the first
	// request in line of its windows (budget.go), through slotFreed.
	waiters   budget.Waiters
	slotFreed chan event.GenericEvent
}

// SetupWithManager registers the controller. Reconciles run one at a time:
// the budget check and the claim that follows it must not interleave.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	r.Options.Default()
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Budget == nil {
		r.Budget = &budget.Ledger{Client: r.Client, Live: r.APIReader, Namespace: r.Options.BudgetNamespace,
			Holder: r.Options.Identity, Clock: r.Clock}
	}
	if r.Wake == nil {
		r.Wake = make(chan event.GenericEvent, 1024)
	}
	r.slotFreed = make(chan event.GenericEvent, 1024)
	r.Forecast.OnChange(func(changes []forecast.Change) {
		r.lineUp(changes)
		for _, c := range changes {
			select {
			case r.Wake <- event.GenericEvent{Object: &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: c.Node}}}:
			default: // a full queue: the periodic requeue catches up
			}
		}
	})
	if r.Uninstall != nil {
		r.Uninstall.OnChange = r.wakeAll
		if err := mgr.Add(r.Uninstall); err != nil {
			return err
		}
	}
	byName := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetName()}}}
	})
	return ctrl.ControllerManagedBy(mgr).
		Named("nodemaintenance").
		// Our own status writes must not trigger another round: only spec,
		// creation and deletion (which bumps the generation) do, and
		// lull-agent recording a host step.
		For(&lullv1alpha1.NodeMaintenance{}, ctrl.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, actionsChanged()))).
		// Labels request and complete maintenance; unschedulable shows cordons.
		Watches(&corev1.Node{}, nodeHandler(r.Options.MaintenanceLabel, byName), ctrl.WithPredicates(nodeChanged(r.Options.MaintenanceLabel))).
		// A lease released or taken in the lease namespace; lull-agent
		// appearing on or leaving a node.
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(r.leaseToRequest), ctrl.WithPredicates(r.leaseChanged())).
		// PodDisruptionBudgets gaining room unblock drains.
		Watches(&policyv1.PodDisruptionBudget{}, handler.EnqueueRequestsFromMapFunc(r.drainingRequests),
			ctrl.WithPredicates(budgetGrew())).
		// A policy change decides again for requests not yet started.
		Watches(&lullv1alpha1.DisruptionPolicy{}, handler.EnqueueRequestsFromMapFunc(r.waitingRequests),
			ctrl.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A window's health gates opening (its AlertsQuiet or Recovered
		// condition turning True, or a gate edited) lets waiting requests
		// start; so may a finished node turning Ready (or unready: a wave
		// halts at once) and a budget of its evicted pods healthy again.
		Watches(&lullv1alpha1.MaintenanceWindow{}, handler.EnqueueRequestsFromMapFunc(r.heldRequests),
			ctrl.WithPredicates(gatesChanged())).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.heldRequests), ctrl.WithPredicates(readyChanged())).
		Watches(&policyv1.PodDisruptionBudget{}, handler.EnqueueRequestsFromMapFunc(r.heldRequests), ctrl.WithPredicates(healthChanged())).
		WatchesRawSource(source.Channel(r.Wake, byName)).
		WatchesRawSource(source.Channel(r.slotFreed, slotHandler())).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Options.Workers}).
		Complete(r)
}

func nodeChanged(label string) predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Node)
			n, ok2 := e.ObjectNew.(*corev1.Node)
			if !ok1 || !ok2 {
				return true
			}
			// A reboot shows as a new boot ID and Ready going and coming.
			return o.Labels[label] != n.Labels[label] ||
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
	return r.requestsIn(ctx, lullv1alpha1.MaintenancePhase.Waiting)
}

// heldRequests enqueues every request a health gate holds.
func (r *Reconciler) heldRequests(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.requestsIn(ctx, func(p lullv1alpha1.MaintenancePhase) bool { return p == lullv1alpha1.PhaseWaitingForGates })
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

func (r *Reconciler) drainingRequests(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.requestsIn(ctx, func(p lullv1alpha1.MaintenancePhase) bool { return p == lullv1alpha1.PhaseDraining })
}

func (r *Reconciler) requestsIn(ctx context.Context, match func(lullv1alpha1.MaintenancePhase) bool) []reconcile.Request {
	var list lullv1alpha1.NodeMaintenanceList
	if err := r.Client.List(ctx, &list); err != nil {
		klog.FromContext(ctx).Error(err, "Listing NodeMaintenances")
		return nil
	}
	var out []reconcile.Request
	for _, nm := range list.Items {
		if match(nm.Status.Phase) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: nm.Name}})
		}
	}
	return out
}

// wakeAll queues every request and every labelled node: lull is being
// uninstalled (each request is ended at once, not at its next periodic
// look), or no longer is (a label left on a node asks again, and nothing
// else would wake it: its label did not change).
func (r *Reconciler) wakeAll() {
	var nms lullv1alpha1.NodeMaintenanceList
	var nodes corev1.NodeList
	if err := r.Client.List(context.Background(), &nms); err != nil {
		return // the periodic looks catch up
	}
	if err := r.Client.List(context.Background(), &nodes); err != nil {
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
			r.Wake <- event.GenericEvent{Object: &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: name}}}
		}
	}()
}
