package maintenance

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/drain"
	"lull.dev/lull/internal/forecast"
)

// staleRetry is how soon a reconcile that read a request older than our
// own last write looks again.
const staleRetry = 100 * time.Millisecond

// Reconcile handles one node's request; the key is the node's name.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	res, err := r.reconcile(ctx, req)
	if apierrors.IsConflict(err) {
		// Someone wrote the object since we read it: start over from the
		// newer state.
		return reconcile.Result{Requeue: true}, nil //nolint:staticcheck // SA1019: a conflict is retried with the queue's rate-limited backoff, which RequeueAfter (a fixed delay) does not give
	}
	return res, err
}

// reconcile brings the node's request one phase on: label sync first
// (labels.go), then the request's life (finalize, finished, complete, or
// the phase's step).
func (r *Reconciler) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("node", req.Name))
	node, err := r.getNode(ctx, req.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	nm := &lullv1alpha1.NodeMaintenance{}
	if err := r.Client.Get(ctx, req.NamespacedName, nm); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("getting NodeMaintenance %s: %w", req.Name, err)
		}
		return r.noRequest(ctx, req.Name, node)
	}
	if r.writes.stale(nm.Name, nm.UID, nm.ResourceVersion, r.Clock.Now()) {
		// The cache still shows the version our last write replaced (a
		// cordon or a lease renewal woke us that fast): acting on it
		// would redo the step and conflict. Look again in a moment.
		return reconcile.Result{RequeueAfter: staleRetry}, nil
	}
	switch {
	case r.uninstalling():
		return r.windDown(ctx, nm, node)
	case nm.DeletionTimestamp != nil:
		return r.finalize(ctx, nm, node)
	case nm.Status.Phase.Finished():
		return r.endRequest(ctx, nm, node)
	}
	if added, err := r.ensureFinalizer(ctx, nm); !added || err != nil {
		return reconcile.Result{}, err
	}
	if node == nil {
		return r.nodeGone(ctx, nm)
	}
	return r.advance(ctx, nm, node)
}

// advance moves a live request whose node exists on: its label synced
// first, then completed (label removed, spec.complete, or uncordoning
// already) or its phase's step run.
func (r *Reconciler) advance(ctx context.Context, nm *lullv1alpha1.NodeMaintenance, node *corev1.Node) (reconcile.Result, error) {
	stop, labelRemoved, err := r.syncLabel(ctx, nm, node)
	if stop || err != nil {
		return reconcile.Result{}, err
	}
	if labelRemoved || nm.Spec.Complete || nm.Status.Phase == lullv1alpha1.PhaseUncordoning {
		return r.complete(ctx, nm, node, true) // each a record a restart finds again
	}
	if !r.Forecast.Synced() {
		// Never act on a partial view of windows, leases and requests.
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	return r.newStep(ctx, nm, node).run(ctx)
}

// noRequest handles a node (nil when it does not exist) that has no
// request: one is made from its label, unless lull is being uninstalled
// or the cache has not yet caught up with the one made a moment ago.
func (r *Reconciler) noRequest(ctx context.Context, name string, node *corev1.Node) (reconcile.Result, error) {
	if r.uninstalling() {
		return reconcile.Result{}, nil // no new request while lull goes
	}
	if r.writes.createdAhead(name, r.Clock.Now()) {
		// We created it a moment ago; the cache has not caught up.
		return reconcile.Result{RequeueAfter: staleRetry}, nil
	}
	return reconcile.Result{}, r.createFromLabel(ctx, node)
}

// endRequest handles a request whose phase is finished: its silence expired
// first, then its finalizer and record (finished).
func (r *Reconciler) endRequest(ctx context.Context, nm *lullv1alpha1.NodeMaintenance, node *corev1.Node) (reconcile.Result, error) {
	// An ended request keeps no silence (its last round may have
	// failed to expire it).
	if err := r.expireFinished(ctx, nm, node); err != nil {
		return reconcile.Result{}, err
	}
	if nm.Status.Silence != nil {
		// The finalizer and the record stay until the silence is seen
		// expired, or has passed its end (at most its duration).
		return reconcile.Result{RequeueAfter: silenceRetry}, nil
	}
	return reconcile.Result{}, r.finished(ctx, nm, node)
}

// getNode reads the request's node from the cache; nil when it does not
// exist.
func (r *Reconciler) getNode(ctx context.Context, name string) (*corev1.Node, error) {
	var node corev1.Node
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, &node); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting node %s: %w", name, err)
	}
	return &node, nil
}

// finished handles a request that has ended: nothing is left to undo, so
// its finalizer goes; a node labelled again gets a new request.
func (r *Reconciler) finished(ctx context.Context, nm *lullv1alpha1.NodeMaintenance, node *corev1.Node) error {
	if controllerutil.ContainsFinalizer(nm, Finalizer) {
		controllerutil.RemoveFinalizer(nm, Finalizer)
		return client.IgnoreNotFound(r.update(ctx, nm))
	}
	if node != nil && hasLabel(node, r.Options.MaintenanceLabel) {
		// The node was labelled (again): a new request replaces the record
		// of the old one, whoever made it (kubectl lull request deletes a
		// finished record the same way). Kept, the record would hold the
		// name and the label would ask for nothing.
		klog.FromContext(ctx).V(2).Info("Label set again; replacing the completed request")
		return client.IgnoreNotFound(r.Client.Delete(ctx, nm, client.Preconditions{UID: &nm.UID}))
	}
	return nil
}

// ensureFinalizer adds lull's finalizer to an active request; added is
// false when the write failed or the request is gone (look again later).
func (r *Reconciler) ensureFinalizer(ctx context.Context, nm *lullv1alpha1.NodeMaintenance) (added bool, err error) {
	if controllerutil.ContainsFinalizer(nm, Finalizer) {
		return true, nil
	}
	controllerutil.AddFinalizer(nm, Finalizer)
	if err := r.update(ctx, nm); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return true, nil
}

// step is one reconcile of an active request: the request, its node, the
// forecast for the node, and the status being built.
type step struct {
	r      *Reconciler
	logger klog.Logger
	nm     *lullv1alpha1.NodeMaintenance
	node   *corev1.Node
	now    time.Time
	fc     *forecast.Node
	status *lullv1alpha1.NodeMaintenanceStatus
	// ws caches the governing windows for this reconcile (read once).
	ws       []*lullv1alpha1.MaintenanceWindow
	wsLoaded bool
	// starting is set when this reconcile started the request.
	starting bool
	// unfinished are the blocked pods a budget counts as evicted by an
	// eviction that did not finish (blockers; in the Blocked message).
	unfinished []drain.Unfinished
}

func (r *Reconciler) newStep(ctx context.Context, nm *lullv1alpha1.NodeMaintenance, node *corev1.Node) *step {
	fc := r.Forecast.Compute(node.Name, node.Labels)
	s := &step{r: r, logger: klog.FromContext(ctx), nm: nm, node: node, now: r.Clock.Now(), fc: fc,
		status: nm.Status.DeepCopy()}
	s.adoptMark()
	return s
}

// unit is the part of the controller that carries a request on from
// its phase.
type unit int

const (
	unitGate       unit = iota + 1 // waiting to start: gate.go
	unitCordon                     // cordon.go
	unitDrain                      // drain.go
	unitHold                       // cordon.go: held, Drained or Cordoned
	unitAct                        // act.go
	unitPoweredOff                 // act.go: powered off, held
	unitComplete                   // complete.go: uncordoning (reconcile)
	unitFinished                   // nothing: finished (reconcile)
)

// unitOf is the unit that carries a request in phase p on; 0 for a phase
// no unit handles (TestEveryPhaseHasAUnit).
func unitOf(p lullv1alpha1.MaintenancePhase) unit {
	switch {
	case p.Waiting():
		return unitGate
	case p == lullv1alpha1.PhaseUncordoning:
		return unitComplete
	case p.Finished():
		return unitFinished
	}
	switch p {
	case lullv1alpha1.PhaseCordoning:
		return unitCordon
	case lullv1alpha1.PhaseDraining:
		return unitDrain
	case lullv1alpha1.PhaseDrained, lullv1alpha1.PhaseCordoned:
		return unitHold
	case lullv1alpha1.PhaseActing:
		return unitAct
	case lullv1alpha1.PhasePoweredOff:
		return unitPoweredOff
	}
	return 0
}

// run dispatches on the request's phase: a request not yet started goes
// through the gates (gate.go); a started one continues where it is
// (lifecycle.go, drain.go).
func (s *step) run(ctx context.Context) (reconcile.Result, error) {
	if s.nm.Status.Phase.Holding() {
		// A node lull holds keeps what lull put on it (cordon.go), and its
		// request every window that has governed it; only while lull still
		// holds the node's lease, renewed first: a cordon restored without
		// it would be an action without the lease. (A crash between an
		// abort's giveBack and its status write leaves a request Draining
		// whose node is uncordoned and whose lease is released: restoring
		// the cordon there put it back for good, found by
		// TestSystemCrashAnywhere.)
		if res, lost, err := s.renew(ctx); lost || err != nil {
			return res, err
		}
		if _, err := s.keepHold(ctx); err != nil {
			return reconcile.Result{}, err
		}
		s.noteWindows()
	} else if s.status.CordonedByLull && s.node != nil {
		if err := s.cordonGone(ctx); err != nil {
			return reconcile.Result{}, err
		}
	}
	switch unitOf(s.nm.Status.Phase) {
	case unitCordon:
		return s.cordon(ctx)
	case unitDrain:
		return s.drain(ctx)
	case unitHold:
		return s.hold(ctx, s.nm.Status.Phase)
	case unitAct:
		return s.act(ctx)
	case unitPoweredOff:
		return s.poweredOff(ctx)
	default:
		return s.gate(ctx)
	}
}
