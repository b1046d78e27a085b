package policycontroller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/policy"
)

// Shipped keeps the DisruptionPolicy lull ships (internal/policy/default.yaml,
// named "default") in the cluster: it creates it when it is missing and
// puts the shipped spec back when it differs, while the policy carries
// the annotation lull.dev/managed-by: lull-drainer. A policy "default"
// without it is the admin's, and left alone.
//
// The policy is the drainer's to create, not an object of the install:
// one `kubectl apply` of the install on an empty cluster cannot create an
// object whose CRD it creates in the same run (kubectl maps every
// object's type before the CRD is served), so the install ships none.
type Shipped struct {
	Client client.Client
	policy *lullv1alpha1.DisruptionPolicy
}

// SetupWithManager registers the controller; it runs on the leader only
// and looks once at start (the policy may not exist yet) and whenever the
// policy "default" changes or goes.
func (s *Shipped) SetupWithManager(mgr ctrl.Manager) error {
	p, err := policy.Shipped()
	if err != nil {
		return err
	}
	s.policy = p
	start := make(chan event.GenericEvent, 1)
	start <- event.GenericEvent{Object: p}
	isShipped := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == policy.ShippedName })
	return ctrl.NewControllerManagedBy(mgr).
		Named("shippedpolicy").
		Watches(&lullv1alpha1.DisruptionPolicy{}, &handler.EnqueueRequestForObject{},
			builder.WithPredicates(isShipped, predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		WatchesRawSource(source.Channel(start, &handler.EnqueueRequestForObject{})).
		Complete(s)
}

// Reconcile creates or restores the shipped policy.
func (s *Shipped) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	logger := klog.FromContext(ctx)
	var cur lullv1alpha1.DisruptionPolicy
	err := s.Client.Get(ctx, types.NamespacedName{Name: policy.ShippedName}, &cur)
	switch {
	case apierrors.IsNotFound(err):
		p := s.policy.DeepCopy()
		if err := s.Client.Create(ctx, p); err != nil && !apierrors.IsAlreadyExists(err) {
			return reconcile.Result{}, fmt.Errorf("creating the shipped DisruptionPolicy %q: %w", policy.ShippedName, err)
		}
		logger.Info("Created the shipped DisruptionPolicy", "name", policy.ShippedName)
		return reconcile.Result{}, nil
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("reading DisruptionPolicy %q: %w", policy.ShippedName, err)
	}
	if cur.Annotations[policy.ManagedByAnnotation] != policy.ManagedBy {
		logger.V(2).Info("DisruptionPolicy is the admin's (no managed-by annotation); leaving it", "name", cur.Name)
		return reconcile.Result{}, nil
	}
	if equality.Semantic.DeepEqual(cur.Spec, s.policy.Spec) {
		return reconcile.Result{}, nil
	}
	cur.Spec = s.policy.Spec
	if err := s.Client.Update(ctx, &cur); err != nil {
		if apierrors.IsConflict(err) {
			return reconcile.Result{Requeue: true}, nil //nolint:staticcheck // SA1019: a conflict is retried with the queue's rate-limited backoff, which RequeueAfter (a fixed delay) does not give
		}
		return reconcile.Result{}, fmt.Errorf("restoring the shipped DisruptionPolicy %q: %w", policy.ShippedName, err)
	}
	logger.Info("Restored the shipped DisruptionPolicy's spec", "name", cur.Name)
	return reconcile.Result{}, nil
}
