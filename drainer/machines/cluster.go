package machines

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// Event reasons on Clusters.
const (
	ReasonUpgradeHeld     = "UpgradeHeldByLull"
	ReasonUpgradeReleased = "UpgradeReleasedByLull"
)

// ClusterReconciler holds a governed Cluster's topology upgrade with
// lull's before-upgrade hook while lull has requests in progress on its
// nodes (drains, reboots, nodes held powered off for hardware work), and
// says which on the Cluster. Cluster API's own deletions are not counted:
// they are part of Cluster API's work.
type ClusterReconciler struct {
	// Client reads lull's objects; Machines reads and writes Cluster
	// API's (nil: Client's API server), as for Reconciler.
	Client   client.Client
	Machines client.Client
	// Cluster, when set, is the one Cluster lull governs (as for
	// Reconciler).
	Cluster *types.NamespacedName
	// Recorder records events on Clusters, in their API server.
	Recorder events.EventRecorder
}

func (r *ClusterReconciler) machines() client.Client {
	return cmp.Or[client.Client](r.Machines, r.Client)
}

func newCluster() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(capi.ClusterKind)
	return u
}

// SetupWithManager registers the controller: Clusters and their Machines
// (from capiCluster, or mgr's own when nil), and the requests on their
// nodes (through the Machines' node index the Machine controller
// registers).
func (r *ClusterReconciler) SetupWithManager(mgr ctrl.Manager, capiCluster cluster.Cluster) error {
	var from cluster.Cluster = mgr
	if capiCluster != nil {
		from = capiCluster
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("cluster-api-clusters").
		WatchesRawSource(source.Kind(from.GetCache(), newCluster(), &handler.TypedEnqueueRequestForObject[*unstructured.Unstructured]{})).
		WatchesRawSource(source.Kind(from.GetCache(), newMachine(), handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, o *unstructured.Unstructured) []reconcile.Request {
			return clusterOf(o)
		}))).
		Watches(&lullv1alpha1.NodeMaintenance{}, handler.EnqueueRequestsFromMapFunc(r.clustersOf)).
		Complete(r)
}

// clusterOf is the Cluster a Machine belongs to.
func clusterOf(o client.Object) []reconcile.Request {
	name := o.GetLabels()[capi.ClusterNameLabel]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// clustersOf are the Clusters of the Machines on a request's node.
func (r *ClusterReconciler) clustersOf(ctx context.Context, o client.Object) []reconcile.Request {
	nm, ok := o.(*lullv1alpha1.NodeMaintenance)
	if !ok {
		return nil
	}
	ms, err := machinesOnNode(ctx, r.machines(), nm.Spec.NodeName)
	if err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range ms {
		out = append(out, clusterOf(&ms[i])...)
	}
	return out
}

// holdsUpgrade reports whether a request holds its Cluster's upgrade: one
// lull has started and not finished (also while it waits to take the
// node's lease again, its cordon in place), except Cluster API's own
// deletions (the guard keeps requested-by cluster-api to lull-drainer).
func holdsUpgrade(nm *lullv1alpha1.NodeMaintenance) bool {
	return nm.Status.HoldsSlot() && nm.Annotations[lullv1alpha1.RequestedByAnnotation] != capi.RequestedBy
}

// Reconcile sets or removes lull's before-upgrade hook on one Cluster.
func (r *ClusterReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	c := newCluster()
	if err := r.machines().Get(ctx, req.NamespacedName, c); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !ofCluster(r.Cluster, c) {
		return reconcile.Result{}, nil // another workload cluster's
	}
	var why string
	if capi.Governed(c) && c.GetDeletionTimestamp() == nil {
		var err error
		if why, err = r.inProgress(ctx, c); err != nil {
			return reconcile.Result{}, err
		}
	}
	current, held := c.GetAnnotations()[capi.BeforeUpgradeHook]
	switch {
	case why != "" && current != why:
		if err := r.setHold(ctx, c, why); err != nil {
			return reconcile.Result{}, err
		}
		if !held {
			r.event(c, corev1.EventTypeNormal, ReasonUpgradeHeld, "a topology upgrade waits: %s", why)
			klog.FromContext(ctx).Info("Holding the Cluster's topology upgrade", "why", why)
		}
	case why == "" && held:
		if err := r.setHold(ctx, c, ""); err != nil {
			return reconcile.Result{}, err
		}
		r.event(c, corev1.EventTypeNormal, ReasonUpgradeReleased, "no lull request in progress on the Cluster's nodes: a topology upgrade may start")
		klog.FromContext(ctx).Info("Released the Cluster's topology upgrade")
	}
	return reconcile.Result{}, nil
}

// maxNamed is how many requests the hook's value names.
const maxNamed = 5

// inProgress says which of lull's requests on the Cluster's nodes hold its
// upgrade, empty when none does.
func (r *ClusterReconciler) inProgress(ctx context.Context, c *unstructured.Unstructured) (string, error) {
	list := newMachineList()
	if err := r.machines().List(ctx, list, client.InNamespace(c.GetNamespace()), client.MatchingLabels{capi.ClusterNameLabel: c.GetName()}); err != nil {
		return "", err
	}
	var holding []string
	for i := range list.Items {
		node := capi.NodeName(&list.Items[i])
		if node == "" {
			continue
		}
		var nm lullv1alpha1.NodeMaintenance
		if err := r.Client.Get(ctx, client.ObjectKey{Name: node}, &nm); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return "", err
		}
		if holdsUpgrade(&nm) {
			holding = append(holding, fmt.Sprintf("node %s (%s, %s)", node, nm.Spec.ClassNames(), nm.Status.Phase))
		}
	}
	if len(holding) == 0 {
		return "", nil
	}
	sort.Strings(holding)
	named := holding
	if len(named) > maxNamed {
		named = append(named[:maxNamed:maxNamed], fmt.Sprintf("%d more", len(holding)-maxNamed))
	}
	return fmt.Sprintf("lull has %d request(s) in progress: %s", len(holding), strings.Join(named, "; ")), nil
}

// setHold sets lull's before-upgrade hook to why, or removes it (why
// empty); it touches no other annotation.
func (r *ClusterReconciler) setHold(ctx context.Context, c *unstructured.Unstructured, why string) error {
	var value any
	if why != "" {
		value = why
	}
	if err := patchAnnotations(ctx, r.machines(), c, map[string]any{capi.BeforeUpgradeHook: value}); err != nil {
		return fmt.Errorf("setting lull's before-upgrade hook on Cluster %s/%s: %w", c.GetNamespace(), c.GetName(), err)
	}
	return nil
}

func (r *ClusterReconciler) event(c *unstructured.Unstructured, typ, reason, format string, args ...any) {
	eventOn(r.Recorder, c, typ, reason, format, args...)
}
