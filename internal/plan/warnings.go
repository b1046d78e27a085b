package plan

import (
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/disruptors"
	"lull.dev/lull/internal/forecast"
	"lull.dev/lull/lease"
)

// This file holds the preview's warnings about a node's lease and about
// windows more planned nodes wait for than they let start at once.

// warnLease notes who else holds the node's lease; any drainer replica's
// lease is lull's own.
func (cl *Cluster) warnLease(p *Node, fc *forecast.Node) {
	if fc == nil || fc.Lease == nil {
		return
	}
	p.LeaseHolder = fc.Lease.Holder
	if lease.SameFamily(fc.Lease.Holder, cl.Options.Identity) {
		return
	}
	p.ForeignLease = true
	what := fc.Lease.Holder
	if fc.Lease.Operation != "" {
		what += " for " + fc.Lease.Operation
	}
	if fc.Lease.Reason != "" {
		what += " (" + fc.Lease.Reason + ")"
	}
	if l := cl.leases[p.Node]; l != nil {
		// The protocol's expiry is by observation; the holder's own renew
		// time only hints that it stopped.
		renewed, d := lease.FromLease(p.Node, l).Renewed, lease.ExpiryDuration(l)
		if !renewed.IsZero() && cl.Now.After(renewed.Add(d)) {
			what += fmt.Sprintf("; its holder last renewed it at %s, more than its duration (%s) ago: unless it renews, the drainer takes the lease over after seeing it unrenewed for %s",
				renewed.UTC().Format(time.RFC3339), d, d)
		}
	}
	p.warn("node is leased by %s", what)
}

// heldByOther is the lease gate of the preview: the lease another actor
// holds, as the drainer's acquire would report it; nil when it is free or
// lull's.
func (cl *Cluster) heldByOther(p *Node, fc *forecast.Node) *lease.HeldError {
	if cl.others == nil {
		cl.others = map[string]disruptors.Disruption{}
		for i := range cl.Nodes {
			if d, ok := disruptors.Of(&cl.Nodes[i]); ok {
				cl.others[cl.Nodes[i].Name] = d
			}
		}
	}
	if d, ok := cl.others[p.Node]; ok {
		// Another tool disrupting the node holds it, as the drainer's
		// lease gate says.
		return d.Held(p.Node, 0)
	}
	if !p.ForeignLease {
		return nil
	}
	held := &lease.HeldError{Node: p.Node, Holder: fc.Lease.Holder, Operation: fc.Lease.Operation, Reason: fc.Lease.Reason, Since: fc.Lease.Since}
	if l := cl.leases[p.Node]; l != nil {
		held.Duration = lease.FromLease(p.Node, l).Duration
	}
	return held
}

// warnSharedWindows warns when more planned nodes wait for the same window
// than its budget lets start at once: they will not all start when it opens.
func (cl *Cluster) warnSharedWindows(res *Result) {
	byWindow := map[string][]int{}
	for i, n := range res.Nodes {
		if n.Start == StartWindow && n.Windows != nil {
			for _, w := range n.Windows.Names {
				byWindow[w] = append(byWindow[w], i)
			}
		}
	}
	names := make([]string, 0, len(byWindow))
	for name := range byWindow {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		mw, idx := cl.Windows[name], byWindow[name]
		if mw == nil {
			continue
		}
		sel, selected := budget.WindowSelector(mw), 0
		for i := range cl.Nodes {
			if sel.Matches(labels.Set(cl.Nodes[i].Labels)) {
				selected++
			}
		}
		maxUnavailable, err := budget.MaxUnavailable(mw, selected)
		if err != nil || maxUnavailable == 0 || len(idx) <= maxUnavailable {
			continue
		}
		for _, i := range idx {
			res.Nodes[i].warn("%d of the planned nodes wait for window %s, which allows %d disrupted at once: they start one after another as its budget frees, not all when it opens",
				len(idx), name, maxUnavailable)
		}
	}
}

func (p *Node) warn(format string, args ...any) {
	p.Warnings = append(p.Warnings, fmt.Sprintf(format, args...))
}
