package app

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// stripManagedFields is the cache's transform of every object: nothing
// in the drainer reads managedFields. (An update of an object read from
// the cache omits them, which keeps the server's.)
var stripManagedFields = cache.TransformStripManagedFields()

// trimNode is the cache's transform of a Node: it keeps what the drainer
// reads — metadata but its managedFields, the spec, the conditions and
// nodeInfo, whose boot ID tells a reboot — and drops the rest of the
// status (images, attached volumes, capacity, allocatable, addresses, the
// kubelet's endpoints, config and features), which nothing in the
// drainer reads and which is much of what a cache of 5,000 nodes holds.
//
// A Node read from the cache lacks those fields: the drainer writes Nodes
// only by patch (the cordon and annotations by a merge patch, its
// conditions by a JSON patch), never by an update, which would erase them
// on the server; the manager's client refuses one (newClient).
func trimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return stripManagedFields(obj)
	}
	n.ManagedFields = nil
	n.Status = corev1.NodeStatus{Conditions: n.Status.Conditions, NodeInfo: n.Status.NodeInfo}
	return n, nil
}

// errNodeUpdate refuses an update of a Node: the cache holds trimmed
// Nodes (trimNode), and writing one back would erase what it lacks.
var errNodeUpdate = errors.New("lull-drainer writes a Node only by patch: its cached Nodes lack most of their status (drainer/app/cache.go), which an update would erase")

// newClient is the manager's client, with Node updates refused (patches
// go through): the rule trimNode relies on, kept by the client itself
// rather than by each caller.
func newClient(config *rest.Config, options client.Options) (client.Client, error) {
	c, err := client.NewWithWatch(config, options)
	if err != nil {
		return nil, err
	}
	return refuseNodeUpdates(c), nil
}

func refuseNodeUpdates(c client.WithWatch) client.WithWatch {
	return interceptor.NewClient(c, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if _, ok := obj.(*corev1.Node); ok {
				return errNodeUpdate
			}
			return c.Update(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if _, ok := obj.(*corev1.Node); ok {
				return errNodeUpdate
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
}
