// Package maintenance is lull-drainer's NodeMaintenance controller. It turns
// maintenance labels into NodeMaintenance requests and carries each request
// through its life: wait for the node's windows, the windows' budget and the
// node's disruption lease; cordon; drain through the eviction API; hold the
// node drained until the operator completes the request; uncordon (only
// what lull cordoned) and release the lease. Every decision is derived from
// API state, so a controller killed at any instant resumes correctly.
//
// The request's life is cut by phase transition into units, each a file
// (as Karpenter cuts node termination), whose events are built by the
// constructors in events.go:
//
//   - gate.go: waiting to start → started (internal/gate's verdict; budget.go
//     keeps the line for budget slots, lease.go takes and renews the
//     node's lease);
//   - cordon.go: the cordon, and what lull keeps on a node it holds;
//   - drain.go and escalate.go: eviction rounds, and a blocked drain's
//     escalation;
//   - act.go: lull-agent's host steps (planned.go: what the plan asks);
//   - complete.go: the ways a request ends, giving back what lull took.
//
// Around them: controller.go and watches.go set up the controller;
// reconcile.go dispatches on the request's phase (lullv1alpha1's
// lifecycle); labels.go syncs the maintenance label; windows.go reads the
// governing windows; status.go writes conditions and status; uninstall.go
// ends every request when lull goes; memo*.go is what the controller
// remembers between reconciles; metrics.go counts.
package maintenance

import (
	"fmt"

	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
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
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/forecast"
	"lull.dev/lull/internal/options"
	"lull.dev/lull/internal/settings"
	"lull.dev/lull/lease"
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

// Options configure the controller (internal/options declares them, with their
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
	// ConfigNamespace holds the NodeConfigs requests write (config.go);
	// empty: lull-configs.
	ConfigNamespace string
	// Secrets reads the Secrets with Alertmanager's credentials for the
	// windows' silences (silence.go), in ConfigNamespace: the API server,
	// not a cache (the drainer caches no Secrets).
	Secrets client.Reader

	// What the controller remembers between reconciles (memo.go).
	renewals renewals
	events   eventLimiter
	writes   ownWrites
	rounds   blockedRounds
	silences silenceTries
	// waiters is the line for budget slots: a freed slot wakes the first
	// request in line of its windows (budget.go), through slotFreed.
	waiters   budget.Waiters
	slotFreed chan event.GenericEvent
}

// SetupWithManager registers the controller. Reconciles run on
// Options.Workers workers, one request at a time each (the queue never
// hands one request to two workers); two requests' budget checks and
// claims may interleave, and are kept safe by the ledger (its lock and
// its conditional write, internal/budget), not by running one at a time.
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
	if err := r.setupNodeConditions(mgr); err != nil {
		return fmt.Errorf("setting up the node-conditions controller: %w", err)
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
		Watches(&policyv1.PodDisruptionBudget{}, handler.EnqueueRequestsFromMapFunc(r.blockedRequests),
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
