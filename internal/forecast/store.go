package forecast

import (
	"container/heap"
	"hash/maphash"
	"maps"
	"time"
)

// nodeShards splits the published forecasts so an update copies the
// shards it writes, not every node: at 5,000 forecast nodes a shard holds
// about 20.
const nodeShards = 256

var shardSeed = maphash.MakeSeed()

func shardOf(name string) int { return int(maphash.String(shardSeed, name) % nodeShards) }

// nodeMap is an immutable set of node forecasts once published. It also
// holds quiet entries (labelled nodes with nothing forecast), which get
// hides and len does not count.
type nodeMap struct {
	shards [nodeShards]map[string]*Node
	len    int
}

// entry returns what the map holds for a node, quiet or not.
func (m *nodeMap) entry(name string) *Node { return m.shards[shardOf(name)][name] }

// get returns a node's forecast; nil when nothing is forecast.
func (m *nodeMap) get(name string) *Node { return visible(m.entry(name)) }

// visible is n as readers see it: nil when quiet.
func visible(n *Node) *Node {
	if n == nil || n.quiet {
		return nil
	}
	return n
}

// nodeWriter builds the next nodeMap from base, copying on first write
// only the shards it writes to; readers keep base.
type nodeWriter struct {
	base, next *nodeMap
	copied     [nodeShards / 64]uint64
	work       *work
}

func (w *nodeWriter) set(name string, n *Node) {
	if w.next == nil {
		next := *w.base
		w.next = &next
	}
	s := shardOf(name)
	if w.copied[s/64]&(1<<(s%64)) == 0 {
		w.copied[s/64] |= 1 << (s % 64)
		w.work.copied += len(w.next.shards[s])
		w.next.shards[s] = maps.Clone(w.next.shards[s])
		if w.next.shards[s] == nil {
			w.next.shards[s] = map[string]*Node{}
		}
	}
	if visible(w.next.shards[s][name]) != nil {
		w.next.len--
	}
	if n == nil {
		delete(w.next.shards[s], name)
		return
	}
	w.next.shards[s][name] = n
	if !n.quiet {
		w.next.len++
	}
}

// dueHeap orders the forecast nodes by when their forecast changes by
// itself (validUntil), so the timer is armed and fired without visiting
// every node.
type dueHeap struct {
	items []*dueItem
	index map[string]*dueItem
}

type dueItem struct {
	name string
	at   time.Time
	pos  int
}

func newDueHeap() dueHeap { return dueHeap{index: map[string]*dueItem{}} }

// set records when a node's forecast runs out; zero forgets the node.
func (h *dueHeap) set(name string, at time.Time) {
	it := h.index[name]
	switch {
	case at.IsZero() && it != nil:
		heap.Remove(h, it.pos)
		delete(h.index, name)
	case at.IsZero():
	case it != nil:
		it.at = at
		heap.Fix(h, it.pos)
	default:
		it = &dueItem{name: name, at: at}
		h.index[name] = it
		heap.Push(h, it)
	}
}

// next is the earliest time a forecast runs out; zero when none does.
func (h *dueHeap) next() time.Time {
	if len(h.items) == 0 {
		return time.Time{}
	}
	return h.items[0].at
}

// due lists the nodes whose forecast has run out at now.
func (h *dueHeap) due(now time.Time) []string {
	var out []string
	var walk func(i int)
	walk = func(i int) {
		if i >= len(h.items) || now.Before(h.items[i].at) {
			return
		}
		out = append(out, h.items[i].name)
		walk(2*i + 1)
		walk(2*i + 2)
	}
	walk(0)
	return out
}

func (h *dueHeap) Len() int           { return len(h.items) }
func (h *dueHeap) Less(i, j int) bool { return h.items[i].at.Before(h.items[j].at) }
func (h *dueHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].pos, h.items[j].pos = i, j
}
func (h *dueHeap) Push(x any) {
	it := x.(*dueItem)
	it.pos = len(h.items)
	h.items = append(h.items, it)
}
func (h *dueHeap) Pop() any {
	it := h.items[len(h.items)-1]
	h.items[len(h.items)-1] = nil
	h.items = h.items[:len(h.items)-1]
	return it
}
