package forecast

import (
	"maps"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/policy"
	"lull.dev/lull/internal/settings"
	"lull.dev/lull/internal/window"
	"lull.dev/lull/lease"
)

// compiledWindow is a MaintenanceWindow as the forecast matches and
// evaluates it: its selector and compiled schedule.
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

func (cw *compiledWindow) named() NamedWindow {
	return NamedWindow{Name: cw.name, Window: cw.window, MinTimeRemaining: cw.minRemaining}
}

// observedLease is a node's lease and when its version expires, as the
// forecast's lease.Observer judges it.
type observedLease struct {
	lease   *coordinationv1.Lease
	expires time.Time
}

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

// SetAdmission reads the node-critical units from the admission guard's
// parameters (settings.AdmissionConfigMap in Options.AdmissionNamespace),
// so that the forecast plans a restart the way the guard judges it; any
// other ConfigMap is ignored.
func (f *Forecast) SetAdmission(cm *v1.ConfigMap) {
	if !f.isAdmission(cm) {
		return
	}
	f.setCritical(policy.CriticalUnitsParam(cm.Data, true))
}

// isAdmission reports whether cm is the admission guard's ConfigMap.
func (f *Forecast) isAdmission(cm *v1.ConfigMap) bool {
	return f.opts.AdmissionNamespace != "" && cm.Namespace == f.opts.AdmissionNamespace && cm.Name == settings.AdmissionConfigMap
}

// DeleteAdmission is the guard's parameters gone. The forecast keeps the
// last list it read: the guard fails closed without them, and so do the
// planners — a delete and re-apply (kubectl replace --force, a GitOps
// sync) must not plan an admin's critical unit undrained meanwhile. Only
// a forecast that never saw them plans with the shipped default.
func (f *Forecast) DeleteAdmission(*v1.ConfigMap) {}

func (f *Forecast) setCritical(units []string) {
	f.mu.Lock()
	if slices.Equal(f.critical, units) && (f.critical == nil) == (units == nil) {
		f.mu.Unlock()
		return
	}
	f.critical = units
	f.mergePoliciesLocked()
	f.update(f.maintainedLocked())
}

func (f *Forecast) mergePoliciesLocked() {
	list := make([]lullv1alpha1.DisruptionPolicy, 0, len(f.policies))
	for _, p := range f.policies {
		list = append(list, p)
	}
	f.rules = policy.Merge(list).WithCriticalUnits(f.critical)
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
