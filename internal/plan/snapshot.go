package plan

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// snapshotReader answers the drainer's gates from the state Load read, so
// one preview decides every node from one consistent view and costs the
// same few lists whatever the number of nodes: nodes and the leases of the
// agent namespace are got from it. PodDisruptionBudgets are read once per
// namespace; anything else goes to the API server.
type snapshotReader struct {
	cl   *Cluster
	c    client.Reader
	pdbs map[string]*policyv1.PodDisruptionBudgetList
}

func (cl *Cluster) reader(c client.Reader) *snapshotReader {
	return &snapshotReader{cl: cl, c: c, pdbs: map[string]*policyv1.PodDisruptionBudgetList{}}
}

func (r *snapshotReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if n, ok := obj.(*corev1.Node); ok {
		node := r.cl.Node(key.Name)
		if node == nil {
			return apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, key.Name)
		}
		node.DeepCopyInto(n)
		return nil
	}
	if l, ok := obj.(*coordinationv1.Lease); ok && key.Namespace == r.cl.Options.AgentNamespace {
		got := r.cl.agentLeases[key.Name]
		if got == nil {
			return apierrors.NewNotFound(schema.GroupResource{Group: coordinationv1.GroupName, Resource: "leases"}, key.Name)
		}
		got.DeepCopyInto(l)
		return nil
	}
	return r.c.Get(ctx, key, obj, opts...)
}

func (r *snapshotReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	switch l := list.(type) {
	case *lullv1alpha1.NodeMaintenanceList:
		l.Items = make([]lullv1alpha1.NodeMaintenance, len(r.cl.nms))
		for i := range r.cl.nms {
			r.cl.nms[i].DeepCopyInto(&l.Items[i])
		}
		return nil
	case *lullv1alpha1.MaintenanceWindowList:
		l.Items = make([]lullv1alpha1.MaintenanceWindow, 0, len(r.cl.Windows))
		for _, w := range r.cl.Windows {
			l.Items = append(l.Items, *w.DeepCopy())
		}
		return nil
	case *corev1.NodeList:
		// Uncopied when asked, as the drainer's cache serves it: the
		// recovery gate lists every node for each node previewed.
		shared := lo.UnsafeDisableDeepCopy != nil && *lo.UnsafeDisableDeepCopy
		if shared && lo.LabelSelector == nil {
			l.Items = r.cl.Nodes
			return nil
		}
		l.Items = nil
		for i := range r.cl.Nodes {
			n := &r.cl.Nodes[i]
			if lo.LabelSelector == nil || lo.LabelSelector.Matches(labels.Set(n.Labels)) {
				l.Items = append(l.Items, *n.DeepCopy())
			}
		}
		return nil
	case *policyv1.PodDisruptionBudgetList:
		if lo.LabelSelector != nil || lo.FieldSelector != nil {
			break
		}
		got, ok := r.pdbs[lo.Namespace]
		if !ok {
			got = &policyv1.PodDisruptionBudgetList{}
			if err := r.c.List(ctx, got, client.InNamespace(lo.Namespace)); err != nil {
				return err
			}
			r.pdbs[lo.Namespace] = got
		}
		if lo.UnsafeDisableDeepCopy != nil && *lo.UnsafeDisableDeepCopy {
			l.Items = got.Items
			return nil
		}
		got.DeepCopyInto(l)
		return nil
	}
	return r.c.List(ctx, list, opts...)
}
