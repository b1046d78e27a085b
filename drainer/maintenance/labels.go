package maintenance

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// Label sync: the maintenance label requests maintenance (a
// NodeMaintenance made from it), changes its class before it starts, and
// completes it when removed; lull removes the label when a request ends.

func hasLabel(n *corev1.Node, label string) bool {
	_, ok := n.Labels[label]
	return ok
}

// createFromLabel turns a node's maintenance label into a NodeMaintenance;
// nothing for a node without the label, gone, or being deleted.
func (r *Reconciler) createFromLabel(ctx context.Context, node *corev1.Node) error {
	if node == nil || node.DeletionTimestamp != nil || !hasLabel(node, r.Options.MaintenanceLabel) {
		return nil
	}
	class := node.Labels[r.Options.MaintenanceLabel]
	nm := &lullv1alpha1.NodeMaintenance{
		ObjectMeta: metav1.ObjectMeta{
			Name:        node.Name,
			Annotations: map[string]string{lullv1alpha1.RequestedByAnnotation: lullv1alpha1.RequestedByLabel},
			Finalizers:  []string{Finalizer},
		},
		Spec: lullv1alpha1.NodeMaintenanceSpec{
			NodeName: node.Name,
			Classes:  []string{class},
			Reason:   fmt.Sprintf("requested by the node label %s=%s", r.Options.MaintenanceLabel, class),
		},
	}
	if err := r.Client.Create(ctx, nm); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		if apierrors.IsInvalid(err) {
			// An invalid class in the label: say so on the node; nothing
			// else can be done until someone fixes the label.
			r.nodeEvent(node, eventInvalidLabel(r.Options.MaintenanceLabel, class, err, false))
			return nil
		}
		return fmt.Errorf("creating NodeMaintenance for node %s: %w", node.Name, err)
	}
	r.writes.created(nm.Name, nm.UID, r.Clock.Now())
	klog.FromContext(ctx).Info("Maintenance requested by label", "class", class)
	return nil
}

// syncLabel makes a request made from the label follow it: removing the
// label completes the request; a new class replaces the old until the
// request starts. stop is true when this reconcile ends here; complete
// when the label was removed (the request is completed now: phase
// Uncordoning, written first, is the commit point, as for spec.complete;
// the label stays removed across a restart, so nothing else need record
// it).
func (r *Reconciler) syncLabel(ctx context.Context, nm *lullv1alpha1.NodeMaintenance, node *corev1.Node) (stop, complete bool, err error) {
	class, labelled := node.Labels[r.Options.MaintenanceLabel]
	logger := klog.FromContext(ctx)
	switch nm.FollowLabel(class, labelled) {
	case lullv1alpha1.LabelRemoved:
		logger.V(2).Info("Maintenance label removed; completing the request")
		return false, true, nil
	case lullv1alpha1.LabelReclassed:
		logger.Info("Maintenance label changed class; updating the request", "from", nm.Spec.ClassNames(), "to", class)
		nm.Spec.Classes = []string{class}
		if err := r.update(ctx, nm); apierrors.IsInvalid(err) {
			r.nodeEvent(node, eventInvalidLabel(r.Options.MaintenanceLabel, class, err, true))
		} else if err != nil {
			return true, false, client.IgnoreNotFound(err)
		}
		return true, false, nil
	}
	return false, false, nil
}

// removeLabel removes the maintenance label from the node (a node gone
// has none to remove).
func (r *Reconciler) removeLabel(ctx context.Context, node *corev1.Node) error {
	if !hasLabel(node, r.Options.MaintenanceLabel) {
		return nil
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, r.Options.MaintenanceLabel)
	if err := r.Client.Patch(ctx, node, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the maintenance label from node %s: %w", node.Name, err)
	}
	return nil
}
