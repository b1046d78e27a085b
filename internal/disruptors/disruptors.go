// Package disruptors recognises, from a Node object alone, a disruption
// another tool has under way on the node: Karpenter disrupting or
// terminating it, cluster-autoscaler scaling it down. lull treats such a
// node as held by that tool (its requests for the node wait for the
// "lease", naming the tool) and counts it against the budget of every
// window that selects it, as a node of its own would (docs/interop.md).
//
// Each tool marks the node before it evicts anything, so the mark is the
// earliest sign lull can see without reading the tool's own objects.
package disruptors

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"lull.dev/lull/lease"
)

// The marks other disruptors put on a node they disrupt.
const (
	// KarpenterDisruptedTaint is Karpenter's taint on a node it is
	// disrupting (consolidation, drift, emptiness, expiry) or
	// terminating (karpenter.sh/disrupted:NoSchedule).
	KarpenterDisruptedTaint = "karpenter.sh/disrupted"
	// KarpenterTermination is the finalizer Karpenter keeps on the nodes
	// it launched until it has drained them: a node being deleted with it
	// is being terminated by Karpenter.
	KarpenterTermination = "karpenter.sh/termination"
	// AutoscalerToBeDeleted is cluster-autoscaler's taint on a node it is
	// scaling down.
	AutoscalerToBeDeleted = "ToBeDeletedByClusterAutoscaler"
	// NodePoolLabel names the Karpenter NodePool a node belongs to.
	NodePoolLabel = "karpenter.sh/nodepool"
)

// Names of the disruptors, as lull shows them as the node's holder.
const (
	Karpenter         = "karpenter"
	ClusterAutoscaler = "cluster-autoscaler"
)

// Disruption is another tool's disruption of a node.
type Disruption struct {
	// By names the tool (Karpenter, ClusterAutoscaler).
	By string
	// What says what it is doing and the mark lull read it from.
	What string
	// Since is when the mark appeared, when the mark records it (zero:
	// not known).
	Since time.Time
}

// Of returns the disruption another tool has under way on n, if any.
func Of(n *corev1.Node) (Disruption, bool) {
	if n == nil {
		return Disruption{}, false
	}
	for i := range n.Spec.Taints {
		t := &n.Spec.Taints[i]
		var d Disruption
		switch t.Key {
		case KarpenterDisruptedTaint:
			d = Disruption{By: Karpenter, What: "disrupting it (taint " + KarpenterDisruptedTaint + ")"}
		case AutoscalerToBeDeleted:
			d = Disruption{By: ClusterAutoscaler, What: "scaling it down (taint " + AutoscalerToBeDeleted + ")"}
		default:
			continue
		}
		if t.TimeAdded != nil {
			d.Since = t.TimeAdded.Time
		}
		return d, true
	}
	if n.DeletionTimestamp != nil && slices.Contains(n.Finalizers, KarpenterTermination) {
		return Disruption{By: Karpenter, What: "terminating it (finalizer " + KarpenterTermination + ")", Since: n.DeletionTimestamp.Time}, true
	}
	return Disruption{}, false
}

// Held is the disruption as the lease gate reports another holder: a
// request for the node waits for it as for any other holder, and looks
// again after retry (the node's next change wakes it sooner).
func (d Disruption) Held(node string, retry time.Duration) *lease.HeldError {
	return &lease.HeldError{Node: node, Holder: d.By, Operation: "disruption", Reason: d.What, Since: d.Since, Duration: retry}
}

// IndexField indexes a cache's Nodes by whether another tool disrupts
// them ("true"), so that Disrupted lists those few rather than every node:
// the budget asks at each reservation, and in a 1,000-node wave listing
// every node each time was a quarter of lull-drainer's allocations
// (docs/performance.md).
const IndexField = "lull.dev/disrupted"

// Index is the index function of IndexField.
func Index(o client.Object) []string {
	if n, ok := o.(*corev1.Node); ok {
		if _, ok := Of(n); ok {
			return []string{"true"}
		}
	}
	return nil
}

// Disrupted lists the nodes r shows another tool disrupting, with who and
// how. The listed nodes are only read, so they are not copied. A reader
// without the index (the API server, a test's client) is asked for every
// node, which gives the same answer.
func Disrupted(ctx context.Context, r client.Reader) (map[string]Disruption, error) {
	var nodes corev1.NodeList
	if err := r.List(ctx, &nodes, client.UnsafeDisableDeepCopy, client.MatchingFields{IndexField: "true"}); err != nil {
		nodes = corev1.NodeList{}
		if err := r.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing nodes: %w", err)
		}
	}
	var out map[string]Disruption
	for i := range nodes.Items {
		if d, ok := Of(&nodes.Items[i]); ok {
			if out == nil {
				out = map[string]Disruption{}
			}
			out[nodes.Items[i].Name] = d
		}
	}
	return out, nil
}
