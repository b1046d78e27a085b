// Package policy is lull-drainer's DisruptionPolicy status controller: it
// merges every policy with internal/policy and writes, on each, its place in the
// order, a summary of its rules and the effective cluster-wide rule list,
// so `kubectl get disruptionpolicies -o yaml` shows exactly what the
// drainer decides with.
package policycontroller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/policy"
)

// ConditionReady says the policy is merged; its message counts rules that
// never decide anything because an earlier rule matches first.
const ConditionReady = "Ready"

// allKey is the single work item: any policy change recomputes them all,
// since one policy's priority moves every other's rules.
var allKey = reconcile.Request{}

// Reconciler keeps DisruptionPolicy status current.
type Reconciler struct {
	Client client.Client
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("disruptionpolicy").
		Watches(&lullv1alpha1.DisruptionPolicy{}, handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
			return []reconcile.Request{allKey}
		}), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(r)
}

// Reconcile recomputes every policy's status.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	var list lullv1alpha1.DisruptionPolicyList
	if err := r.Client.List(ctx, &list); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing DisruptionPolicies: %w", err)
	}
	set := policy.Merge(list.Items)
	eff := set.Effective()
	for i := range list.Items {
		p := &list.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		st := p.Status.DeepCopy()
		st.ObservedGeneration = p.Generation
		st.Order = int32(set.Order(p.Name)) //nolint:gosec // G115: a position among the cluster's DisruptionPolicies, far below 2^31
		st.Summary = policy.Summary(p)
		st.EffectiveRules = eff
		shadowed := 0
		for _, e := range eff {
			if e.Policy == p.Name && e.ShadowedBy != "" {
				shadowed++
			}
		}
		msg := fmt.Sprintf("%d rule(s), tried in place %d of %d", len(p.Spec.Rules), st.Order, len(list.Items))
		reason := "Merged"
		if shadowed > 0 {
			reason = "RulesShadowed"
			msg += fmt.Sprintf("; %d rule(s) never decide anything because an earlier rule matches first (see effectiveRules[].shadowedBy)", shadowed)
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionReady, Status: metav1.ConditionTrue,
			Reason: reason, Message: msg, ObservedGeneration: p.Generation})
		if equality.Semantic.DeepEqual(&p.Status, st) {
			continue
		}
		p.Status = *st
		if err := r.Client.Status().Update(ctx, p); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	return reconcile.Result{}, nil
}
