package forecast

import (
	"slices"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/lease"
)

// update recomputes the given nodes, publishes a new snapshot if anything
// changed, unlocks and notifies listeners. Called with f.mu held.
func (f *Forecast) update(names []string) {
	now := f.clock.Now()
	var changes []Change
	// Copy on write: readers hold the old map; an update that changes
	// nothing publishes nothing.
	w := nodeWriter{base: f.nodes, work: &f.work}
	write := func(name string, n *Node) {
		w.set(name, n)
		if n != nil && n.Maintenance != nil {
			f.requested[name] = struct{}{}
		} else {
			delete(f.requested, name)
		}
		var at time.Time
		if n != nil {
			at = n.validUntil
		}
		f.due.set(name, at)
	}
	for _, name := range names {
		oldEntry, n := f.nodes.entry(name), f.computeLocked(name, now)
		old, pub := visible(oldEntry), visible(n)
		if !differs(old, pub) {
			if !sameEntry(oldEntry, n) {
				write(name, n) // same forecast, new validity or label
			}
			continue
		}
		write(name, n)
		changes = append(changes, Change{Node: name, Old: old, New: pub})
	}
	if w.next != nil {
		f.nodes = w.next
		f.snapGen++
		f.snap.Store(&Snapshot{f: f, nodes: w.next, at: now, gen: f.snapGen})
	}
	f.armLocked(now)
	listeners := f.listeners
	f.mu.Unlock()
	if len(changes) == 0 {
		return
	}
	sort.Slice(changes, func(i, j int) bool { return changes[i].Node < changes[j].Node })
	for _, fn := range listeners {
		fn(changes)
	}
}

// sameEntry reports whether an unchanged forecast (differs is false) may
// keep its stored entry: both absent, or the same validity, quietness and
// label.
func sameEntry(a, b *Node) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.validUntil.Equal(b.validUntil) && a.quiet == b.quiet &&
		a.HasLabel == b.HasLabel && a.LabelClass == b.LabelClass
}

// differs reports whether two forecasts differ in anything a reader acts on.
func differs(a, b *Node) bool {
	if (a == nil) != (b == nil) {
		return true
	}
	if a == nil {
		return false
	}
	if a.Certain != b.Certain || a.WindowOpen != b.WindowOpen || a.Reason != b.Reason ||
		a.HasLabel != b.HasLabel || a.LabelClass != b.LabelClass ||
		(a.Maintenance == nil) != (b.Maintenance == nil) || (a.Lease == nil) != (b.Lease == nil) {
		return true
	}
	// A policy change the drainer must decide again with: it reads the
	// decision from the forecast, so it is woken once the forecast has it.
	if a.Maintenance != nil && !equality.Semantic.DeepEqual(a.Maintenance.Decision, b.Maintenance.Decision) {
		return true
	}
	// The windows governing a request changed (a node relabelled into
	// another pool): the drainer records them, and they keep the request
	// from then on (NodeMaintenanceStatus.Windows).
	if (a.Windows == nil) != (b.Windows == nil) || (a.Windows != nil && (a.Windows.Default != b.Windows.Default || !slices.Equal(a.Windows.Names, b.Windows.Names))) {
		return true
	}
	// A node disrupted now, or whose window is open, is expected to be
	// disrupted "now" at every computation; only a future time is news.
	return !a.Certain && !a.WindowOpen && !a.Disruption.Equal(b.Disruption)
}

// computeLocked computes one node's forecast; nil when there is nothing
// to forecast (no lease, no request) and no label, a quiet entry when the
// node is labelled but nothing is forecast.
func (f *Forecast) computeLocked(name string, now time.Time) *Node {
	f.work.computed++
	lbls := f.labels[name]
	in := Input{Name: name, Labels: lbls, LabelKey: f.opts.MaintenanceLabel, NM: f.nms[name],
		NoWindowOK: f.opts.NodesWithoutWindow.Permits(), WindowsUnknown: !f.windowsSynced, Policies: f.rules}
	if o := f.leases[name]; o != nil {
		if holder := ptr.Deref(o.lease.Spec.HolderIdentity, ""); holder != "" {
			info := lease.FromLease(name, o.lease)
			in.Lease = &Lease{Holder: holder, Operation: info.Operation, Reason: info.Reason, Since: info.Acquired,
				Expires: o.expires}
		}
	}
	_, hasLabel := lbls[f.opts.MaintenanceLabel]
	if in.Lease == nil && in.NM == nil && !hasLabel {
		return nil
	}
	if f.windowsSynced {
		in.Windows = f.windowsForLocked(lbls, in.NM)
	}
	if in.NM != nil && !in.NM.Status.Phase.Finished() {
		in.DefaultToo = in.NM.Status.DefaultBudget
	}
	n := Compute(now, in)
	if n.Lease == nil && n.Maintenance == nil {
		if !hasLabel {
			return nil
		}
		return &Node{Name: name, HasLabel: true, LabelClass: lbls[f.opts.MaintenanceLabel], quiet: true}
	}
	return n
}

// windowsForLocked returns the windows governing a node: those its labels
// select, and those its request recorded (a label change adds windows to
// a request, never removes one: NodeMaintenanceStatus.Windows).
func (f *Forecast) windowsForLocked(lbls map[string]string, nm *lullv1alpha1.NodeMaintenance) []NamedWindow {
	var ws []NamedWindow
	set := labels.Set(lbls)
	f.index.candidates(lbls, func(cw *compiledWindow) {
		f.work.windowsTried++
		if cw.selector.Matches(set) {
			ws = append(ws, cw.named())
		}
	})
	if nm != nil && !nm.Status.Phase.Finished() {
		for _, name := range nm.Status.Windows {
			if cw := f.windows[name]; cw != nil && !slices.ContainsFunc(ws, func(w NamedWindow) bool { return w.Name == name }) {
				ws = append(ws, cw.named())
			}
		}
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].Name < ws[j].Name })
	return ws
}

// armLocked sets the timer for the earliest time a forecast changes by
// itself (window transition, lease expiry, deadline).
func (f *Forecast) armLocked(now time.Time) {
	at := f.due.next()
	if f.stopped || at.Equal(f.timerAt) {
		return
	}
	if f.timer != nil {
		f.timer.Stop()
		f.timer = nil
	}
	f.timerAt = at
	if at.IsZero() {
		return
	}
	// A goroutine of its own: fake clocks run AfterFunc callbacks inline.
	f.timer = f.clock.AfterFunc(at.Sub(now), func() { go f.tick() })
}

// tick recomputes the nodes whose forecast has run out.
func (f *Forecast) tick() {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return
	}
	now := f.clock.Now()
	f.timerAt = time.Time{}
	due := f.due.due(now)
	f.work.scanned += len(due)
	klog.V(5).InfoS("Forecast transition", "nodes", len(due))
	f.update(due)
}

// Compute returns the forecast for a node as it would be now from the
// forecast's current inputs and the given labels (the caller's view of the
// node, which may be newer than the forecast's). Used when a caller holds
// a node object the forecast has not seen yet.
func (f *Forecast) Compute(name string, lbls map[string]string) *Node {
	return f.computeWith(name, lbls, nil)
}

// ComputeRequest returns the forecast for nm.Spec.NodeName as it would be
// now if nm were the node's request and lbls its labels: a preview of a
// request not yet made (or made differently). Nothing is stored.
func (f *Forecast) ComputeRequest(nm *lullv1alpha1.NodeMaintenance, lbls map[string]string) *Node {
	return f.computeWith(nm.Spec.NodeName, lbls, nm)
}

// computeWith computes a node's forecast with its labels, and its request
// when nm is set, replaced for the computation only.
func (f *Forecast) computeWith(name string, lbls map[string]string, nm *lullv1alpha1.NodeMaintenance) *Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	restoreLabels := swap(f.labels, name, lbls)
	defer restoreLabels()
	if nm != nil {
		restoreNM := swap(f.nms, name, nm)
		defer restoreNM()
	}
	return visible(f.computeLocked(name, f.clock.Now()))
}

// swap sets m[k] = v and returns the function that puts back what was there.
func swap[V any](m map[string]V, k string, v V) func() {
	old, had := m[k]
	m[k] = v
	return func() {
		if had {
			m[k] = old
		} else {
			delete(m, k)
		}
	}
}
