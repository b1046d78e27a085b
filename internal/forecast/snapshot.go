package forecast

import (
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Snapshot is an immutable view of every node's forecast. Lookups take no
// lock.
type Snapshot struct {
	f     *Forecast
	nodes *nodeMap
	at    time.Time
	// gen tells snapshots apart (LookupCache): each one the forecast
	// publishes has a greater one.
	gen uint64
}

// At is when the snapshot was computed.
func (s *Snapshot) At() time.Time { return s.at }

// Len is the number of nodes with something to forecast.
func (s *Snapshot) Len() int { return s.nodes.len }

// Get returns a node's forecast by name; nil when nothing is expected.
func (s *Snapshot) Get(name string) *Node { return s.nodes.get(name) }

// Nodes returns every node with something to forecast, sorted by name.
func (s *Snapshot) Nodes() []*Node {
	out := make([]*Node, 0, s.nodes.len)
	for _, shard := range s.nodes.shards {
		for _, n := range shard {
			if !n.quiet {
				out = append(out, n)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Lookup returns the forecast for the node object the caller holds. When
// the node's maintenance label differs from what the forecast last saw
// (the caller's informer delivered the node first, e.g. a node that
// registers already labelled), the forecast is computed from the caller's
// node, so a labelled node is never treated as unlabelled. Labelled nodes
// with nothing forecast are kept in the snapshot (quiet entries), so the
// scheduler's hot path computes only while its informer is ahead.
func (s *Snapshot) Lookup(node *v1.Node) *Node {
	n, stored := s.lookup(node)
	if stored {
		return n
	}
	return s.f.Compute(node.Name, node.Labels)
}

// lookup is Lookup from the snapshot alone; stored is false when the node
// object's label differs from what the snapshot holds (the forecast must
// compute it).
func (s *Snapshot) lookup(node *v1.Node) (n *Node, stored bool) {
	n = s.nodes.entry(node.Name)
	class, has := node.Labels[s.f.opts.MaintenanceLabel]
	if n == nil && !has {
		return nil, true
	}
	if n != nil && n.HasLabel == has && n.LabelClass == class {
		return visible(n), true
	}
	return nil, false
}
