package maintenance

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/lease"
)

// renew keeps the lease while the node is disrupted. A lost lease stops
// everything at once: the request waits for the lease again (the cordon
// stays, and is still ours to undo).
func (s *step) renew(ctx context.Context) (reconcile.Result, bool, error) {
	if !s.r.renewals.due(s.node.Name, s.now, s.r.Options.LeaseDuration/3) {
		return reconcile.Result{}, false, nil
	}
	_, err := s.r.Leases.Renew(ctx, s.node.Name, s.r.Options.Identity)
	if err == nil {
		s.r.renewals.renewed(s.node.Name, s.now)
		return reconcile.Result{}, false, nil
	}
	s.r.Metrics.LeaseRenewFailures.Inc()
	if errors.Is(err, lease.ErrNotHolder) || apierrors.IsNotFound(err) {
		// Who holds it now decides what to do: a read that fails decides
		// nothing (the round fails and is retried).
		info, gerr := s.r.Leases.Get(ctx, s.node.Name)
		if gerr != nil {
			return reconcile.Result{}, false, fmt.Errorf("renewing the lease of node %s failed (%v); reading who holds it: %w", s.node.Name, err, gerr) //nolint:errorlint // the re-read's error decides what the caller does; the renewal's is context only
		}
		holder := ""
		if info != nil {
			holder = info.Holder
		}
		if lease.SameFamily(holder, s.r.Options.Identity) {
			return s.replicaHolds(ctx, holder)
		}
		ev := eventLeaseLost(holder)
		msg := ev.Message
		s.logger.Info("Lost the lease", "holder", holder)
		s.record(ev)
		s.status.LastError = msg
		s.status.LeaseHolder = holder
		s.status.WaitingFor = msg
		s.cond(ConditionLeaseHeld, false, "Lost", msg)
		res, err := s.save(ctx, lullv1alpha1.PhaseWaitingForLease, reconcile.Result{RequeueAfter: 10 * time.Second})
		return res, true, err
	}
	return reconcile.Result{}, false, fmt.Errorf("renewing the lease of node %s: %w", s.node.Name, err)
}

// replicaHolds handles a renewal that found another replica of the
// drainer holding the node's lease: it took the request over (we were
// deposed as leader, or replicas run without leader election). Take it
// back only where Acquire allows (we lead, or its lease expired by
// observation); otherwise stand down without writing anything.
func (s *step) replicaHolds(ctx context.Context, holder string) (reconcile.Result, bool, error) {
	_, err := s.acquire(ctx)
	if err == nil {
		s.logger.Info("Took the lease back from another drainer replica", "holder", holder)
		s.r.renewals.renewed(s.node.Name, s.now)
		return reconcile.Result{}, false, nil
	}
	s.r.forget(s.node.Name)
	if _, held := lease.IsHeld(err); !held {
		return reconcile.Result{}, true, fmt.Errorf("taking back the lease of node %s from %s: %w", s.node.Name, holder, err)
	}
	s.logger.Info("Another drainer replica holds the lease; standing down", "holder", holder)
	return reconcile.Result{RequeueAfter: s.r.Options.LeaseDuration / 3}, true, nil
}

// acquire takes (or renews) the node's lease for this request.
func (s *step) acquire(ctx context.Context) (*lease.Info, error) {
	reason := fmt.Sprintf("NodeMaintenance %s (class %s)", s.nm.Name, s.nm.Spec.ClassNames())
	return s.r.Leases.Acquire(ctx, s.node.Name, s.r.Options.Identity, s.nm.LeaseOperation(), reason, s.r.Options.LeaseDuration)
}

// releaseIfHeld gives up a lease and a budget slot lull holds for a
// request that is not (or no longer) disrupting the node. As the elected
// leader that includes a lease another replica took for the
// request and left behind (lease.Options.TakeOverReplicas).
func (s *step) releaseIfHeld(ctx context.Context) {
	if s.leaseMayBeHeld(ctx) {
		if err := s.r.Leases.Release(ctx, s.node.Name, s.r.Options.Identity); err == nil {
			s.logger.V(2).Info("Released a lease not needed while waiting")
			s.status.LeaseHolder = ""
		}
	}
	s.r.forget(s.node.Name)
	s.releaseBudget(ctx)
}

// leaseMayBeHeld reports whether the node has a lease lull may hold: the
// lease client wrote one, or the cache shows one (or cannot say). A
// waiting request looks every 30 s, and asking the API server each time
// for a lease that is not there cost a read per look.
func (s *step) leaseMayBeHeld(ctx context.Context) bool {
	if s.r.Leases.Wrote(s.node.Name) {
		return true
	}
	var l coordinationv1.Lease
	err := s.r.Client.Get(ctx, types.NamespacedName{Namespace: s.r.Leases.Namespace(), Name: lease.Name(s.node.Name)}, &l)
	return !apierrors.IsNotFound(err)
}

// releaseBudget gives up the request's budget slot and, when that freed
// one, wakes the next request in line of its windows: the slot is free
// for it once the ledger says so, not before (a request woken earlier,
// when this one only stopped disrupting, would find the slot still taken
// and wait for its next look). A failure keeps the slot counted (fail
// closed) until a later round or the ledger's pruning of finished
// requests drops it.
//
// While lull's cordon is still on the node the slot is kept: the node is
// still disrupted (its status HoldsSlot), and the ledger's entries are the
// whole count. A request that lost its lease mid-drain waits for it
// cordoned, and gives the slot back only once giveBack has run (a
// completion or an abort).
func (s *step) releaseBudget(ctx context.Context) {
	if s.status.CordonedByLull {
		return
	}
	released, err := s.r.Budget.Release(ctx, s.nm.Spec.NodeName, s.nm.UID)
	if err != nil {
		s.logger.Error(err, "Releasing the budget slot; it stays counted until a later round")
		return
	}
	if released {
		if !s.nm.Status.HoldsSlot() {
			// Its stored status already says it no longer disrupts
			// (Uncordoning): the slot is free now, whatever the cache
			// still shows.
			s.r.Budget.Settled(s.nm.UID)
		}
		s.r.wakeNextWaiting(ctx, budget.Recorded(s.status))
	}
}
