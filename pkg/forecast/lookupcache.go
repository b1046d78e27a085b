package forecast

import (
	"sync/atomic"
	"unsafe"

	v1 "k8s.io/api/core/v1"
)

// LookupCache remembers Snapshot.Lookup's answer per node object and
// snapshot, for the scheduler's hot path: Filter and Score ask about the
// same node objects for every pod, and a node object (an informer's, never
// changed in place) and a snapshot (immutable) always get the same answer
// from the snapshot. A call that finds its answer costs one hash of the
// object's address and one probe of a small table, where Lookup hashes the
// node's name into the forecast's map and probes the node's labels.
//
// Only answers from the snapshot itself are kept: a node object whose
// maintenance label the snapshot has not seen yet (the scheduler's
// informer ahead of the forecast's) is computed every time, as Lookup
// does, so a labelled node is never treated as unlabelled. An entry keeps
// its node object from being freed, so an address is never another
// node's while it is in the table. Safe for concurrent use (the
// scheduler runs Filter in parallel).
type LookupCache struct {
	slots []atomic.Pointer[cachedLookup]
	shift uint
}

// cachedLookup is one remembered answer.
type cachedLookup struct {
	node *v1.Node
	gen  uint64
	n    *Node
}

// lookupCacheBits sizes the table: 2^15 slots, two per set (2 × 128 KiB
// of pointers), for clusters of up to ~10,000 nodes with few collisions.
const lookupCacheBits = 15

// NewLookupCache returns an empty cache.
func NewLookupCache() *LookupCache {
	return &LookupCache{slots: make([]atomic.Pointer[cachedLookup], 1<<lookupCacheBits), shift: 64 - (lookupCacheBits - 1)}
}

// Lookup is s.Lookup(node), remembered.
func (c *LookupCache) Lookup(s *Snapshot, node *v1.Node) *Node {
	// The set of two slots: the address's high bits after a Fibonacci
	// multiply (node objects are aligned, their low bits are zeros).
	set := (uint64(uintptr(unsafe.Pointer(node))) * 0x9E3779B97F4A7C15) >> c.shift * 2
	a, b := &c.slots[set], &c.slots[set+1]
	if e := a.Load(); e != nil && e.node == node && e.gen == s.gen {
		return e.n
	}
	if e := b.Load(); e != nil && e.node == node && e.gen == s.gen {
		return e.n
	}
	n, stored := s.lookup(node)
	if !stored {
		return s.f.Compute(node.Name, node.Labels)
	}
	// Into a slot whose answer is of an older snapshot, else the second.
	into := b
	if e := a.Load(); e == nil || e.gen != s.gen {
		into = a
	}
	into.Store(&cachedLookup{node: node, gen: s.gen, n: n})
	return n
}
