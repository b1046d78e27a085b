// Package forecast keeps, per node, the disruption forecast both halves of
// lull act on: who leases the node, which maintenance is requested and in
// what phase, whether its windows permit, and so when the node is expected
// to be disrupted. lull-scheduler and lull-drainer feed it from their
// informers and read immutable snapshots, so they cannot disagree.
package forecast

import (
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/lease"
	"lull.dev/lull/pkg/policy"
	"lull.dev/lull/pkg/settings"
	"lull.dev/lull/pkg/window"
)

// Options configure a Forecast.
type Options struct {
	// Settings every component forecasting disruptions must share: the
	// maintenance label, the lease namespace, the policy for nodes no
	// window selects and the window search horizon. Unset fields take
	// the defaults.
	settings.Settings
	// Clock for lease expiry by observation and timed transitions.
	Clock clock.WithTickerAndDelayedExecution
}

// Change is a node whose forecast changed; Old or New is nil when the node
// had or has nothing to forecast.
type Change struct {
	Node     string
	Old, New *Node
}

// Eased reports whether the change may let pods onto the node again: it is
// no longer leased, disrupting, or requested with an open window.
func (c Change) Eased() bool {
	return restriction(c.Old) > restriction(c.New)
}

func restriction(n *Node) int {
	switch {
	case n == nil:
		return 0
	case n.Certain:
		return 3
	case n.WindowOpen:
		return 2
	case n.Maintenance != nil:
		return 1
	}
	return 0
}

type compiledWindow struct {
	name string
	// spec is the informer's object's (never written to): a window whose
	// spec did not change (a status update) changes no forecast.
	spec     *lullv1alpha1.MaintenanceWindowSpec
	selector labels.Selector
	window   *window.Window
	// minRemaining is spec.minTimeRemaining; an unreadable value makes
	// the window invalid (restrictive), so it never needs to be read.
	minRemaining time.Duration
}

// observedLease is a node's lease and when its version expires, as the
// forecast's lease.Observer judges it.
type observedLease struct {
	lease   *coordinationv1.Lease
	expires time.Time
}

// Forecast is the shared, event-driven store. Feed it with the handlers
// from Handlers; read it with Snapshot.
type Forecast struct {
	opts  Options
	clock clock.WithTickerAndDelayedExecution

	mu     sync.Mutex
	labels map[string]map[string]string // node -> labels (from informer objects, not copied)
	leases map[string]*observedLease    // node -> lease
	// observer judges lease expiry (the protocol's one rule).
	observer *lease.Observer
	nms      map[string]*lullv1alpha1.NodeMaintenance
	windows  map[string]*compiledWindow
	// index finds the windows that may select a node from its labels.
	index windowIndex
	// policies decide which requested classes disrupt nothing (action None).
	policies map[string]lullv1alpha1.DisruptionPolicy
	rules    *policy.Set
	nodes    *nodeMap // nodes with something to forecast, as published
	// requested are the nodes whose forecast has a maintenance: the only
	// ones whose forecast depends on windows.
	requested map[string]struct{}
	// due orders the nodes by validUntil for the transition timer.
	due     dueHeap
	timer   clock.Timer
	timerAt time.Time
	stopped bool
	// windowsSynced is set once the MaintenanceWindows have been listed.
	windowsSynced bool
	synced        atomic.Bool

	snap      atomic.Pointer[Snapshot]
	listeners []func([]Change)

	work work
}

// work counts what events cost, in units that must not grow with the
// cluster, so tests can hold an event to what it affects.
type work struct {
	computed     int // node forecasts computed
	windowsTried int // window selectors matched against a node's labels
	copied       int // node entries copied to publish a snapshot
	scanned      int // node entries visited to find transitions
}

// New returns an empty Forecast.
func New(opts Options) *Forecast {
	opts.Settings = opts.Settings.WithDefaults()
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	f := &Forecast{
		opts: opts, clock: opts.Clock,
		labels: map[string]map[string]string{}, leases: map[string]*observedLease{}, observer: lease.NewObserver(opts.Clock),
		nms: map[string]*lullv1alpha1.NodeMaintenance{}, windows: map[string]*compiledWindow{}, index: newWindowIndex(),
		nodes: &nodeMap{}, requested: map[string]struct{}{}, due: newDueHeap(),
		policies: map[string]lullv1alpha1.DisruptionPolicy{}, rules: policy.Merge(nil),
	}
	f.snap.Store(&Snapshot{f: f, nodes: f.nodes})
	return f
}

// Options returns the options the forecast runs with.
func (f *Forecast) Options() Options { return f.opts }

// OnChange registers fn to be called, outside the forecast's lock and in
// order, with the nodes whose forecast changed. Register before feeding.
func (f *Forecast) OnChange(fn func([]Change)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listeners = append(f.listeners, fn)
}

// Stop cancels the pending transition timer.
func (f *Forecast) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
	if f.timer != nil {
		f.timer.Stop()
	}
}

// Snapshot returns the current immutable snapshot.
func (f *Forecast) Snapshot() *Snapshot { return f.snap.Load() }

// SetNode records a node's labels.
func (f *Forecast) SetNode(node *v1.Node) {
	f.mu.Lock()
	old, known := f.labels[node.Name]
	f.labels[node.Name] = node.Labels
	// Node status updates arrive every few seconds per node; only label
	// changes can change a forecast.
	if known && maps.Equal(old, node.Labels) {
		f.mu.Unlock()
		return
	}
	_, hadLabel := old[f.opts.MaintenanceLabel]
	_, hasLabel := node.Labels[f.opts.MaintenanceLabel]
	if !hadLabel && !hasLabel && f.nodes.get(node.Name) == nil && f.nms[node.Name] == nil {
		f.mu.Unlock()
		return
	}
	f.update([]string{node.Name})
}

// DeleteNode forgets a node.
func (f *Forecast) DeleteNode(name string) {
	f.mu.Lock()
	delete(f.labels, name)
	f.update([]string{name})
}

// SetLease records a lease in the lease namespace; other leases are ignored.
func (f *Forecast) SetLease(l *coordinationv1.Lease) {
	node, ok := lease.NodeOf(l.Name)
	if !ok || l.Namespace != f.opts.LeaseNamespace {
		return
	}
	f.mu.Lock()
	f.leases[node] = &observedLease{lease: l, expires: f.observer.Observe(l)}
	f.update([]string{node})
}

// DeleteLease forgets a lease.
func (f *Forecast) DeleteLease(namespace, name string) {
	node, ok := lease.NodeOf(name)
	if !ok || namespace != f.opts.LeaseNamespace {
		return
	}
	f.mu.Lock()
	delete(f.leases, node)
	f.observer.Forget(namespace, name)
	f.update([]string{node})
}

// SetMaintenance records a NodeMaintenance.
func (f *Forecast) SetMaintenance(nm *lullv1alpha1.NodeMaintenance) {
	f.mu.Lock()
	f.nms[nm.Spec.NodeName] = nm
	f.update([]string{nm.Spec.NodeName})
}

// DeleteMaintenance forgets a NodeMaintenance.
func (f *Forecast) DeleteMaintenance(nm *lullv1alpha1.NodeMaintenance) {
	f.mu.Lock()
	if cur := f.nms[nm.Spec.NodeName]; cur != nil && cur.Name == nm.Name {
		delete(f.nms, nm.Spec.NodeName)
	}
	f.update([]string{nm.Spec.NodeName})
}

// SetWindow records a MaintenanceWindow. An invalid spec or selector is
// compiled as restrictive (fail closed).
func (f *Forecast) SetWindow(mw *lullv1alpha1.MaintenanceWindow) {
	cw := &compiledWindow{name: mw.Name, spec: &mw.Spec}
	if m := mw.Spec.MinTimeRemaining; m != nil && m.Err() == nil {
		cw.minRemaining = m.Duration
	}
	// No nodeSelector selects every node (as in the window's status).
	sel, err := labels.Everything(), error(nil)
	if mw.Spec.NodeSelector != nil {
		sel, err = metav1.LabelSelectorAsSelector(mw.Spec.NodeSelector)
	}
	switch {
	case err != nil:
		cw.selector, cw.window = labels.Everything(), window.Invalid(err)
	default:
		cw.selector, cw.window = sel, window.CompileOrInvalid(&mw.Spec, f.opts.WindowOptions())
	}
	f.mu.Lock()
	old := f.windows[mw.Name]
	if old != nil && equality.Semantic.DeepEqual(old.spec, cw.spec) {
		f.mu.Unlock()
		return
	}
	if old != nil {
		f.index.remove(old)
	}
	f.windows[mw.Name] = cw
	f.index.add(cw)
	f.update(f.selectedLocked(old, cw))
}

// SetPolicy records a DisruptionPolicy: a requested class whose action is
// None is no disruption to forecast.
func (f *Forecast) SetPolicy(p *lullv1alpha1.DisruptionPolicy) {
	f.mu.Lock()
	f.policies[p.Name] = *p
	f.mergePoliciesLocked()
	f.update(f.maintainedLocked())
}

// DeletePolicy forgets a DisruptionPolicy.
func (f *Forecast) DeletePolicy(name string) {
	f.mu.Lock()
	delete(f.policies, name)
	f.mergePoliciesLocked()
	f.update(f.maintainedLocked())
}

// Decide is what the DisruptionPolicies the forecast holds decide for
// classes and changes: the one merged set the forecast itself decides
// with.
func (f *Forecast) Decide(classes []string, changes *lullv1alpha1.Changes) lullv1alpha1.Decision {
	f.mu.Lock()
	rules := f.rules
	f.mu.Unlock()
	return rules.Decide(classes, changes)
}

func (f *Forecast) mergePoliciesLocked() {
	list := make([]lullv1alpha1.DisruptionPolicy, 0, len(f.policies))
	for _, p := range f.policies {
		list = append(list, p)
	}
	f.rules = policy.Merge(list)
}

// maintainedLocked lists nodes with a maintenance label or request, in
// effect or not: a policy change can turn a request into a disruption or
// into nothing.
func (f *Forecast) maintainedLocked() []string {
	var out []string
	for name, l := range f.labels {
		if _, ok := l[f.opts.MaintenanceLabel]; ok {
			out = append(out, name)
		}
	}
	for name := range f.nms {
		if _, ok := f.labels[name][f.opts.MaintenanceLabel]; !ok {
			out = append(out, name)
		}
	}
	return out
}

// DeleteWindow forgets a MaintenanceWindow.
func (f *Forecast) DeleteWindow(name string) {
	f.mu.Lock()
	old := f.windows[name]
	if old == nil {
		f.mu.Unlock()
		return
	}
	delete(f.windows, name)
	f.index.remove(old)
	f.update(f.selectedLocked(old))
}

// selectedLocked lists the requested nodes any of ws (nil ones skipped)
// selects or their request records: the nodes a change of those windows
// can affect. None before
// the windows are synced, when windows decide nothing.
func (f *Forecast) selectedLocked(ws ...*compiledWindow) []string {
	if !f.windowsSynced {
		return nil
	}
	var out []string
	for name := range f.requested {
		set := labels.Set(f.labels[name])
		var recorded []string
		if nm := f.nms[name]; nm != nil {
			recorded = nm.Status.Windows
		}
		for _, cw := range ws {
			if cw != nil && (cw.selector.Matches(set) || slices.Contains(recorded, cw.name)) {
				out = append(out, name)
				break
			}
		}
	}
	return out
}

// SetSynced tells the forecast that its informers have delivered every
// existing object. Until then Synced is false, and a requested node counts
// as open for maintenance (the MaintenanceWindows are not known yet).
func (f *Forecast) SetSynced() {
	f.mu.Lock()
	f.synced.Store(true)
	if f.windowsSynced {
		f.mu.Unlock()
		return
	}
	f.windowsSynced = true
	f.update(f.requestedLocked())
}

// Synced reports whether SetSynced has been called.
func (f *Forecast) Synced() bool { return f.synced.Load() }

// requestedLocked lists nodes whose forecast depends on windows.
func (f *Forecast) requestedLocked() []string {
	out := make([]string, 0, len(f.requested))
	for name := range f.requested {
		out = append(out, name)
	}
	return out
}

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
		f.snap.Store(&Snapshot{f: f, nodes: w.next, at: now})
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

func (cw *compiledWindow) named() NamedWindow {
	return NamedWindow{Name: cw.name, Window: cw.window, MinTimeRemaining: cw.minRemaining}
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

// Snapshot is an immutable view of every node's forecast. Lookups take no
// lock.
type Snapshot struct {
	f     *Forecast
	nodes *nodeMap
	at    time.Time
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
	n := s.nodes.entry(node.Name)
	class, has := node.Labels[s.f.opts.MaintenanceLabel]
	if n == nil && !has {
		return nil
	}
	if n != nil && n.HasLabel == has && n.LabelClass == class {
		return visible(n)
	}
	return s.f.Compute(node.Name, node.Labels)
}
