// Package karpenter lets lull's MaintenanceWindows govern Karpenter's
// voluntary disruption (consolidation, drift, emptiness) of the nodes they
// select, for the windows that opt in (spec.karpenter.governDisruption).
//
// Karpenter bounds its voluntary disruption per NodePool with the budgets
// in spec.disruption.budgets, the smallest active one winning. lull adds
// one entry of its own to each NodePool whose nodes a governing window
// selects, records it in the NodePool's lull.dev/karpenter-budget
// annotation (in the same write), keeps it true to the window, and alone
// removes it, as it does with its cordon:
//   - outside the window's permitted periods: nodes "0";
//   - inside: the room left in the window's maxUnavailable (lull's
//     requests and every other tool's disruption of its nodes counted),
//     plus the pool's nodes Karpenter already subtracts from its budgets
//     itself (NotReady or marked for disruption), so that what Karpenter
//     may still take is the room left. A window whose nodes span several
//     NodePools shares its room among them.
//
// Karpenter's forceful disruption (expiry, node repair, a NodeClaim
// deleted by hand) ignores budgets: lull cannot hold it, and sees it as
// Karpenter holding the node (internal/disruptors).
package karpenter

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/disruptors"
	"lull.dev/lull/internal/gate"
	"lull.dev/lull/internal/window"
)

// NodePool is Karpenter's NodePool, which lull reads and patches as an
// unstructured object (lull does not link Karpenter's module).
var NodePool = schema.GroupVersionKind{Group: "karpenter.sh", Version: "v1", Kind: "NodePool"}

// NodePoolResource is the NodePools' resource, for discovery.
var NodePoolResource = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodepools"}

// AnnotationBudget records, on a NodePool, the budget entry lull added to
// its spec.disruption.budgets (JSON): lull removes that entry, and only
// that one, when no window governs the pool any more.
const AnnotationBudget = lullv1alpha1.KarpenterBudgetAnnotation

// InitializedLabel is Karpenter's mark of a node it has initialized:
// the only nodes it counts in a pool's budgets.
const InitializedLabel = "karpenter.sh/initialized"

// key is the one request the controller reconciles: every NodePool is
// reconciled at once, since a window's room is shared among its pools.
var key = reconcile.Request{NamespacedName: types.NamespacedName{Name: "nodepools"}}

// resync bounds how long an entry may lag behind a change no watch sees
// (a window's room taken by a node whose labels moved it in, say, or
// lull being uninstalled).
const resync = 30 * time.Second

// errorRetry is how soon a round that could not write some pool tries
// again.
const errorRetry = 10 * time.Second

// Reconciler keeps lull's entry in each NodePool's disruption budgets.
type Reconciler struct {
	Client client.Client
	// Recorder, when set, records on a NodePool why lull could not
	// write its entry.
	Recorder events.EventRecorder
	Clock    clock.Clock
	Options  window.Options
	// Uninstalling reports whether lull is being uninstalled: then every
	// entry of lull's goes (nil: never).
	Uninstalling func(ctx context.Context) (bool, error)
}

// Entry is a NodePool disruption budget entry as lull writes it.
type Entry struct {
	Nodes string `json:"nodes"`
	// Copies, in the record, is how many entries equal to lull's the
	// pool had once lull wrote (lull's and any of the admin's): fewer now
	// means someone took lull's away, and lull then takes none of the
	// admin's for its own.
	Copies int `json:"copies,omitempty"`
}

// Reconcile computes every NodePool's entry and writes those that
// changed. A NodePool it cannot write is retried; the others are written.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	logger := klog.FromContext(ctx)
	now := r.Clock.Now()
	pools, err := r.pools(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	want, windowsOf, next, err := r.desired(ctx, pools, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	if r.Uninstalling != nil {
		if gone, err := r.Uninstalling(ctx); err != nil {
			return reconcile.Result{}, err
		} else if gone {
			// lull goes: a "0" left behind would hold Karpenter off for
			// ever, and nobody would write it again.
			want = map[string]Entry{}
		}
	}
	// Entries that go down are written before any goes up (or away):
	// between two writes Karpenter may act on what it sees, and a pool
	// raised before another is lowered would let it take, for that
	// moment, more than a window has room for. Whether an entry goes down
	// is judged by what the pool carries now (an entry of lull's taken
	// away is no limit). A lowering that fails holds back the raises of
	// the pools that share a window with it, and only those.
	lower, raise := []*unstructured.Unstructured{}, []*unstructured.Unstructured{}
	for _, p := range pools {
		if limit(want, p.GetName()) < currentLimit(p) {
			lower = append(lower, p)
		} else {
			raise = append(raise, p)
		}
	}
	var errs []error
	held := map[string]bool{} // windows a failed lowering holds
	for i, batch := range [][]*unstructured.Unstructured{lower, raise} {
		for _, p := range batch {
			if i == 1 && slices.ContainsFunc(windowsOf[p.GetName()], func(w string) bool { return held[w] }) {
				errs = append(errs, fmt.Errorf("NodePool %s: not raised while a pool of its windows %v could not be lowered", p.GetName(), windowsOf[p.GetName()]))
				continue
			}
			var entry *Entry
			if e, governed := want[p.GetName()]; governed {
				entry = &e
			}
			changed, err := r.apply(ctx, p, entry)
			if err != nil {
				errs = append(errs, err)
				r.event(p, "BudgetEntryNotWritten", "lull could not write its disruption budget entry %v: %v", entry, err)
				if i == 0 {
					for _, w := range windowsOf[p.GetName()] {
						held[w] = true
					}
				}
				continue
			}
			if changed {
				logger.Info("Wrote lull's disruption budget entry of a Karpenter NodePool", "nodePool", p.GetName(), "entry", entry)
			}
		}
	}
	after := min(resync, max(time.Second, next.Sub(now)))
	if len(errs) > 0 {
		// One pool lull cannot write (a malformed one, a conflict) must
		// not cost the others their next transition: an error would have
		// the controller back off and drop the timed look. Say so, and
		// look again soon.
		logger.Error(fmt.Errorf("%v", errs), "Some Karpenter NodePools' budget entries are not written; trying again", "in", min(after, errorRetry))
		return reconcile.Result{RequeueAfter: min(after, errorRetry)}, nil
	}
	return reconcile.Result{RequeueAfter: after}, nil
}

// limit is the node count lull's entry for pool says (MaxInt: none).
func limit(want map[string]Entry, pool string) int {
	e, ok := want[pool]
	if !ok {
		return math.MaxInt
	}
	return entryLimit(e)
}

// event records a Warning on pool, when there is a recorder.
func (r *Reconciler) event(pool *unstructured.Unstructured, reason, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, reason, "Govern", format, args...)
	}
}

// currentLimit is the node count of lull's entry as pool carries it now
// (MaxInt: none there, or a record lull cannot read, which apply refuses).
func currentLimit(pool *unstructured.Unstructured) int {
	e, err := Recorded(pool)
	if err != nil || e == nil {
		return math.MaxInt
	}
	v, _, _ := unstructured.NestedFieldNoCopy(pool.Object, "spec", "disruption", "budgets")
	budgets, _ := v.([]any)
	if copiesOf(budgets, *e) < max(1, e.Copies) {
		return math.MaxInt // taken away
	}
	return entryLimit(*e)
}

func entryLimit(e Entry) int {
	n, err := strconv.Atoi(e.Nodes)
	if err != nil {
		return math.MaxInt
	}
	return n
}

// pools lists the NodePools, by name.
func (r *Reconciler) pools(ctx context.Context) ([]*unstructured.Unstructured, error) {
	var list unstructured.UnstructuredList
	list.SetGroupVersionKind(NodePool.GroupVersion().WithKind(NodePool.Kind + "List"))
	if err := r.Client.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing NodePools: %w", err)
	}
	out := make([]*unstructured.Unstructured, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out, nil
}

// desired is the entry each governed NodePool should carry now, and when
// the answer next changes by itself (a window opening or closing).
func (r *Reconciler) desired(ctx context.Context, pools []*unstructured.Unstructured, now time.Time) (map[string]Entry, map[string][]string, time.Time, error) {
	next := now.Add(resync)
	windowsOf := map[string][]string{}
	var windows lullv1alpha1.MaintenanceWindowList
	if err := r.Client.List(ctx, &windows); err != nil {
		return nil, nil, next, fmt.Errorf("listing MaintenanceWindows: %w", err)
	}
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes, client.HasLabels{disruptors.NodePoolLabel}); err != nil {
		return nil, nil, next, fmt.Errorf("listing Karpenter's nodes: %w", err)
	}
	byPool := map[string][]*corev1.Node{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		byPool[n.Labels[disruptors.NodePoolLabel]] = append(byPool[n.Labels[disruptors.NodePoolLabel]], n)
	}
	limit := map[string]int{}
	for i := range windows.Items {
		w := &windows.Items[i]
		if !w.Spec.GovernsKarpenter() {
			continue
		}
		governed := governedPools(budget.WindowSelector(w), pools, byPool)
		if len(governed) == 0 {
			continue
		}
		for _, p := range governed {
			windowsOf[p] = append(windowsOf[p], w.Name)
		}
		var open bool
		open, next = r.openForKarpenter(w, now, next)
		room := 0
		if open {
			left, _, err := budget.Left(ctx, r.Client, w)
			if err != nil {
				return nil, nil, next, fmt.Errorf("window %s: %w", w.Name, err)
			}
			room = left
		}
		shareRoom(limit, governed, room)
	}
	return poolEntries(limit, byPool), windowsOf, next, nil
}

// governedPools are the names of the pools (of pools) a window's selector
// selects, by their nodes (byPool: each pool's nodes).
func governedPools(sel labels.Selector, pools []*unstructured.Unstructured, byPool map[string][]*corev1.Node) []string {
	var governed []string
	for _, p := range pools {
		if selects(sel, p, byPool[p.GetName()]) {
			governed = append(governed, p.GetName())
		}
	}
	return governed
}

// openForKarpenter says whether window w lets Karpenter disrupt now, and
// the next time (no later than next) that may change.
func (r *Reconciler) openForKarpenter(w *lullv1alpha1.MaintenanceWindow, now, next time.Time) (bool, time.Time) {
	ev := window.CompileOrInvalid(&w.Spec, r.Options).Evaluate(now)
	if ev.Until.Before(next) {
		next = ev.Until
	}
	// Open, with the time left lull itself needs to start a node
	// (minTimeRemaining): Karpenter gets no more than lull takes.
	open := ev.Permitted
	if open && w.Spec.MinTimeRemaining != nil && !ev.Until.IsZero() && ev.Until.Sub(now) < w.Spec.MinTimeRemaining.Duration {
		open = false
	} else if open && w.Spec.MinTimeRemaining != nil {
		if t := ev.Until.Add(-w.Spec.MinTimeRemaining.Duration); t.After(now) && t.Before(next) {
			next = t
		}
	}
	return open, next
}

// shareRoom shares a window's room among the pools it governs: each pool
// a part, the first by name one more while some is left over; a pool
// keeps the smallest share any of its windows gives (limit).
func shareRoom(limit map[string]int, governed []string, room int) {
	for j, p := range governed {
		share := room / len(governed)
		if j < room%len(governed) {
			share++
		}
		if cur, ok := limit[p]; !ok || share < cur {
			limit[p] = share
		}
	}
}

// poolEntries are lull's budget entries for the pools of limit, each pool's
// share of room.
func poolEntries(limit map[string]int, byPool map[string][]*corev1.Node) map[string]Entry {
	want := map[string]Entry{}
	for p, share := range limit {
		// Karpenter subtracts from its budget the pool's nodes that are
		// NotReady or that it is disrupting: add them back, so that what
		// it may still take is share.
		n := share
		if share > 0 {
			n += subtracted(byPool[p])
		}
		if n > math.MaxInt32 {
			n = math.MaxInt32
		}
		want[p] = Entry{Nodes: fmt.Sprint(n)}
	}
	return want
}

// selects reports whether a window's selector selects a pool: one of its
// nodes, or (for a pool with no node yet) the labels its nodes get from
// its template.
func selects(sel labels.Selector, pool *unstructured.Unstructured, nodes []*corev1.Node) bool {
	for _, n := range nodes {
		if sel.Matches(labels.Set(n.Labels)) {
			return true
		}
	}
	tl, _, _ := unstructured.NestedStringMap(pool.Object, "spec", "template", "metadata", "labels")
	l := labels.Set{disruptors.NodePoolLabel: pool.GetName()}
	for k, v := range tl {
		l[k] = v
	}
	return sel.Matches(l)
}

// subtracted counts the nodes Karpenter subtracts from a pool's budget
// by itself: initialized (Karpenter counts no other), and NotReady or
// marked for disruption or deletion. Counting one it does not subtract
// (a node still launching) would give it room the window does not have.
func subtracted(nodes []*corev1.Node) int {
	n := 0
	for _, node := range nodes {
		if node.Labels[InitializedLabel] != "true" {
			continue
		}
		_, disrupted := disruptors.Of(node)
		if disrupted || node.DeletionTimestamp != nil || !ready(node) {
			n++
		}
	}
	return n
}

// ready reports whether n's Ready condition is True.
func ready(n *corev1.Node) bool {
	c := gate.ReadyCondition(n)
	return c != nil && c.Status == corev1.ConditionTrue
}

// apply makes pool carry entry (nil: none of lull's), replacing the entry
// its annotation records, in one write that also updates the record. The
// write carries the resourceVersion read: a NodePool changed meanwhile is
// read again on the retry.
func (r *Reconciler) apply(ctx context.Context, pool *unstructured.Unstructured, entry *Entry) (bool, error) {
	recorded, err := Recorded(pool)
	if err != nil {
		// A record lull cannot read is not lull's to act on: say so and
		// leave the pool alone (fail closed: no entry of lull's goes).
		return false, fmt.Errorf("NodePool %s: %w", pool.GetName(), err)
	}
	var budgets []any
	wasList := false
	switch v, _, _ := unstructured.NestedFieldNoCopy(pool.Object, "spec", "disruption", "budgets"); v := v.(type) {
	case nil: // none (null): Karpenter's default applies
	case []any:
		budgets, wasList = v, true
	default:
		return false, fmt.Errorf("NodePool %s: spec.disruption.budgets is a %T, not a list", pool.GetName(), v)
	}
	// lull's entry is there while as many entries equal to it are as
	// when lull wrote it.
	var old *Entry
	if recorded != nil && copiesOf(budgets, *recorded) >= max(1, recorded.Copies) {
		old = recorded
	}
	switch {
	case entry == nil && recorded == nil:
		return false, nil
	case entry != nil && old != nil && old.Nodes == entry.Nodes:
		return false, nil // recorded and there
	}
	budgets = Replace(budgets, old, entry)
	var ann any
	if entry != nil {
		b, _ := json.Marshal(Entry{Nodes: entry.Nodes, Copies: copiesOf(budgets, *entry)})
		ann = string(b)
	}
	var budgetsValue any = budgets
	if len(budgets) == 0 && !wasList {
		budgetsValue = nil // none, as before lull: Karpenter's default applies
	}
	patch := map[string]any{
		"metadata": map[string]any{"resourceVersion": pool.GetResourceVersion(), "annotations": map[string]any{AnnotationBudget: ann}},
		"spec":     map[string]any{"disruption": map[string]any{"budgets": budgetsValue}},
	}
	data, err := json.Marshal(patch)
	if err != nil {
		return false, err
	}
	if err := r.Client.Patch(ctx, pool, client.RawPatch(types.MergePatchType, data)); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("NodePool %s: %w", pool.GetName(), err)
	}
	return true, nil
}

// copiesOf counts the budgets equal to lull's entry e.
func copiesOf(budgets []any, e Entry) int {
	n := 0
	for _, b := range budgets {
		if isEntry(b, e) {
			n++
		}
	}
	return n
}

// Recorded is the entry pool's annotation says lull added (nil: none).
func Recorded(pool *unstructured.Unstructured) (*Entry, error) {
	v, ok := pool.GetAnnotations()[AnnotationBudget]
	if !ok {
		return nil, nil
	}
	var e Entry
	if err := json.Unmarshal([]byte(v), &e); err != nil || e.Nodes == "" || e.Copies < 0 {
		return nil, fmt.Errorf("annotation %s=%q is not an entry lull wrote", AnnotationBudget, v)
	}
	return &e, nil
}

// Replace returns budgets without one entry equal to old (when old is
// set and found) and with entry appended (when set). Entries equal to
// lull's are interchangeable: Karpenter takes the smallest active one.
func Replace(budgets []any, old, entry *Entry) []any {
	out := slices.Clone(budgets)
	if old != nil {
		for i, b := range out {
			if isEntry(b, *old) {
				out = slices.Delete(out, i, i+1)
				break
			}
		}
	}
	if entry != nil {
		out = append(out, map[string]any{"nodes": entry.Nodes})
	}
	return out
}

// isEntry reports whether a budget is exactly lull's entry e: the same
// nodes, and no schedule, duration or reasons.
func isEntry(b any, e Entry) bool {
	m, ok := b.(map[string]any)
	if !ok || len(m) != 1 {
		return false
	}
	n, ok := m["nodes"].(string)
	return ok && n == e.Nodes
}

// RemoveAll removes lull's entry from every NodePool that records one
// (lull is being uninstalled and its controller may not run again); it
// returns the pools it could not write. Without Karpenter's NodePools
// there is nothing to do.
func RemoveAll(ctx context.Context, c client.Client) ([]string, error) {
	r := &Reconciler{Client: c}
	pools, err := r.pools(ctx)
	if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var failed []string
	for _, p := range pools {
		if _, ok := p.GetAnnotations()[AnnotationBudget]; !ok {
			continue
		}
		if _, err := r.apply(ctx, p, nil); err != nil {
			failed = append(failed, fmt.Sprintf("%s (%v)", p.GetName(), err))
		}
	}
	return failed, nil
}

// SetupWithManager registers the controller: any change to a NodePool, a
// window, a request's use of budget or a Karpenter node's state
// reconciles every NodePool.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	pool := &unstructured.Unstructured{}
	pool.SetGroupVersionKind(NodePool)
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request { return []reconcile.Request{key} })
	return ctrl.ControllerManagedBy(mgr).
		Named("karpenter-nodepools").
		Watches(pool, all).
		Watches(&lullv1alpha1.MaintenanceWindow{}, all, ctrl.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&lullv1alpha1.NodeMaintenance{}, all, ctrl.WithPredicates(slotChanged())).
		Watches(&corev1.Node{}, all, ctrl.WithPredicates(poolNodeChanged())).
		Complete(r)
}

// slotChanged passes requests starting or ceasing to use budget.
func slotChanged() predicate.Funcs {
	holds := func(o client.Object) bool {
		nm, ok := o.(*lullv1alpha1.NodeMaintenance)
		return ok && nm.Status.HoldsSlot()
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return holds(e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return holds(e.ObjectOld) != holds(e.ObjectNew) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return holds(e.Object) },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// poolNodeChanged passes Karpenter's nodes appearing, going, or changing
// what counts: labels, readiness, another tool's disruption.
func poolNodeChanged() predicate.Funcs {
	inPool := func(o client.Object) bool { _, ok := o.GetLabels()[disruptors.NodePoolLabel]; return ok }
	state := func(n *corev1.Node) string {
		_, d := disruptors.Of(n)
		return fmt.Sprint(ready(n), d, n.DeletionTimestamp != nil, labels.Set(n.Labels).String())
	}
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return inPool(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Node)
			n, ok2 := e.ObjectNew.(*corev1.Node)
			if !ok1 || !ok2 {
				return true
			}
			return (inPool(o) || inPool(n)) && state(o) != state(n)
		},
		DeleteFunc:  func(e event.DeleteEvent) bool { return inPool(e.Object) },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
