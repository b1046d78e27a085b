package agent

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/settings"
	"lull.dev/lull/lease"
)

// CacheOptions limit the agent's cache to its own node, its node's
// request and its node's disruption lease: an agent per node must not
// watch the whole cluster.
func CacheOptions(node, leaseNamespace string) cache.Options {
	byName := func(name string) cache.ByObject {
		return cache.ByObject{Field: fields.OneTermEqualSelector("metadata.name", name)}
	}
	lb := byName(lease.Name(node))
	lb.Namespaces = map[string]cache.Config{leaseNamespace: {}}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&lullv1alpha1.NodeMaintenance{}: byName(node),
		&corev1.Node{}:                  byName(node),
		&coordinationv1.Lease{}:         lb,
	}}
}

// SetupWithManager registers the agent's controller: its node's request,
// woken by the request, the node and the node's lease.
func (a *Agent) SetupWithManager(mgr manager.Manager) error {
	toNode := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: a.Node}}}
	})
	return builder.ControllerManagedBy(mgr).
		Named(settings.Agent).
		For(&lullv1alpha1.NodeMaintenance{}).
		Watches(&corev1.Node{}, toNode).
		Watches(&coordinationv1.Lease{}, toNode).
		// One step at a time, in order.
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(a)
}
