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
// node's while it is in the table; and so that the entries of node
// objects the informer has replaced do not pile up, the table starts
// afresh once it has taken twice as many answers as there are nodes (at
// least 8,192) since it last did: it never holds more old node objects
// than there are nodes. Safe for concurrent use (the scheduler runs
// Filter in parallel).
type LookupCache struct {
	table   atomic.Pointer[lookupTable]
	inserts atomic.Int64
	nodes   atomic.Int64
}

// lookupTable is a table of remembered answers, two slots per set.
type lookupTable [1 << lookupCacheBits]atomic.Pointer[cachedLookup]

// cachedLookup is one remembered answer.
type cachedLookup struct {
	node *v1.Node
	gen  uint64
	n    *Node
}

const (
	// lookupCacheBits sizes the table: 2^15 slots, two per set (256 KiB
	// of pointers), for clusters of up to ~10,000 nodes with few
	// collisions.
	lookupCacheBits = 15
	// lookupCacheShift takes a set's index from a 64-bit hash.
	lookupCacheShift = 64 - (lookupCacheBits - 1)
	// minRenewal is the fewest answers the table takes before it starts
	// afresh.
	minRenewal = 8192
)

// NewLookupCache returns an empty cache.
func NewLookupCache() *LookupCache {
	c := &LookupCache{}
	c.table.Store(new(lookupTable))
	return c
}

// SetNodes tells the cache how many nodes the cluster has (the
// scheduler's snapshot), which bounds the old node objects it may hold.
func (c *LookupCache) SetNodes(n int) { c.nodes.Store(int64(n)) }

// Lookup is s.Lookup(node), remembered.
func (c *LookupCache) Lookup(s *Snapshot, node *v1.Node) *Node {
	t := c.table.Load()
	// The set of two slots: the address's high bits after a Fibonacci
	// multiply (node objects are aligned, their low bits are zeros).
	set := (uint64(uintptr(unsafe.Pointer(node))) * 0x9E3779B97F4A7C15) >> lookupCacheShift * 2 //nolint:gosec // G103: the address is hashed, never dereferenced or converted back; the entry compares the pointer itself
	a, b := &t[set], &t[set+1]
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
	if c.inserts.Add(1) > max(minRenewal, 2*c.nodes.Load()) {
		c.inserts.Store(0)
		c.table.Store(new(lookupTable))
	}
	return n
}

// held counts the node objects the table holds (for tests).
func (c *LookupCache) held() int {
	t := c.table.Load()
	n := 0
	for i := range t {
		if t[i].Load() != nil {
			n++
		}
	}
	return n
}
