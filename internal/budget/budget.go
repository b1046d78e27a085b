// Package budget answers whether one more node may be disrupted without
// exceeding the maxUnavailable of the MaintenanceWindows governing it (or
// the default budget of nodes no window selects). The drainer gates every
// request with it and `kubectl lull plan` previews with it.
package budget

import (
	"context"
	"fmt"
	"iter"
	"math"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/disruptors"
	"lull.dev/lull/internal/window"
)

// Request is one prospective disruption.
type Request struct {
	// Node to disrupt.
	Node string
	// Windows governing the node (every window recorded for its request,
	// see NodeMaintenanceStatus.Windows); none: the default budget applies.
	Windows []*lullv1alpha1.MaintenanceWindow
	// Default: the default budget applies as well as Windows' (the
	// request was once under it).
	Default bool
	// DefaultMaxUnavailable bounds nodes no window selects.
	DefaultMaxUnavailable int
	// Also counts these nodes as disrupted in addition to what the API
	// shows (a preview planning several nodes at once), against the
	// budgets their labels put them in.
	Also []string
}

// budgets names the budgets req counts against.
func (req Request) budgets() []string {
	names := make([]string, len(req.Windows))
	for i, w := range req.Windows {
		names[i] = w.Name
	}
	return Budgets(names, req.Default)
}

// Active is a node whose request uses budget, and the budgets recorded for
// it (its request's status, its ledger entry). It counts against each of
// those and against every budget its labels put it in now: a label change
// never frees a slot.
type Active struct {
	Node    string
	Budgets []string
}

// actives gathers nodes by name, merging what each source recorded.
type actives struct {
	order []string
	by    map[string][]string
}

func (a *actives) add(node string, budgets ...string) {
	if a.by == nil {
		a.by = map[string][]string{}
	}
	cur, ok := a.by[node]
	if !ok {
		a.order = append(a.order, node)
	}
	for _, b := range budgets {
		if !slices.Contains(cur, b) {
			cur = append(cur, b)
		}
	}
	a.by[node] = cur
}

func (a *actives) list() []Active {
	out := make([]Active, 0, len(a.order))
	for _, n := range a.order {
		out = append(out, Active{Node: n, Budgets: a.by[n]})
	}
	return out
}

// Result says whether the budget has room, and if not, who uses it.
type Result struct {
	Free bool
	// Message says which budget is full and how many nodes use it. It
	// names no node: it is stored in the status of every request waiting
	// for the budget, and who holds the slots changes each time one frees
	// (rewriting every waiting request's status then cost a write per
	// waiting request per slot). WithHolders names them for a live view.
	Message string
	// InUse are the nodes using the full budget.
	InUse []string
	// Room is, when Free, how many more nodes the fullest of the
	// request's budgets takes after this one.
	Room int
}

// WithHolders adds to a budget message the nodes holding the budget now,
// for a view computed now (kubectl lull plan and status); the status
// keeps the message alone.
func WithHolders(msg string, nodes []string) string {
	if len(nodes) == 0 {
		return msg
	}
	return msg + "; held by " + strings.Join(nodes, ", ")
}

// Holders lists, sorted, the nodes of requests using a budget shared with
// a request counting against budgets (Recorded), as each request last
// recorded its own. It answers "who holds the slots I wait for" for people
// (kubectl lull status); the drainer counts the budget with Check and
// Ledger.Reserve.
func Holders(mine []string, requests iter.Seq[*lullv1alpha1.NodeMaintenance]) []string {
	var out []string
	for nm := range requests {
		if nm.Status.HoldsSlot() && slices.ContainsFunc(Recorded(&nm.Status), func(b string) bool { return slices.Contains(mine, b) }) {
			out = append(out, nm.Spec.NodeName)
		}
	}
	sort.Strings(out)
	return out
}

// Check counts the requests in progress from live (read it from the API
// server, never from a cache that may lag behind the caller's own writes)
// and the nodes and windows from cached. It only answers; the drainer
// starts a node through Ledger.Reserve, which counts the same way and
// records the start atomically.
func Check(ctx context.Context, live, cached client.Reader, req Request) (Result, error) {
	var all lullv1alpha1.NodeMaintenanceList
	if err := live.List(ctx, &all); err != nil {
		return Result{}, fmt.Errorf("listing NodeMaintenances: %w", err)
	}
	var act actives
	addRequests(&act, all.Items, req.Node)
	others, err := disrupted(ctx, cached, req.Node)
	if err != nil {
		return Result{}, err
	}
	for _, n := range append(others, req.Also...) {
		act.add(n)
	}
	return evaluate(ctx, cached, req, act.list())
}

// disrupted lists, sorted, the nodes another tool is disrupting
// (Karpenter, cluster-autoscaler: internal/disruptors), except node: each
// counts against every budget its labels put it in, whoever disrupts it.
// A list that fails fails the check (closed).
func disrupted(ctx context.Context, cached client.Reader, node string) ([]string, error) {
	others, err := disruptors.Disrupted(ctx, cached)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(others))
	for n := range others {
		if n != node {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names, nil
}

// addRequests adds the requests using budget, except node's, with the
// budgets their status records.
func addRequests(act *actives, items []lullv1alpha1.NodeMaintenance, node string) {
	for i := range items {
		o := &items[i]
		if o.Spec.NodeName != node && o.Status.HoldsSlot() {
			act.add(o.Spec.NodeName, Recorded(&o.Status)...)
		}
	}
}

// evaluate answers whether req's node fits in its windows' budgets (and
// the default budget, when it applies) with the nodes in active already
// disrupted. An active node counts against every budget recorded for it
// and every budget its labels put it in now.
func evaluate(ctx context.Context, cached client.Reader, req Request, active []Active) (Result, error) {
	inUseLabels, err := labelsOf(ctx, cached, active)
	if err != nil {
		return Result{}, err
	}
	room := math.MaxInt
	if len(req.Windows) == 0 || req.Default {
		// Nodes no window selects share the default budget.
		var all lullv1alpha1.MaintenanceWindowList
		if err := cached.List(ctx, &all, client.UnsafeDisableDeepCopy); err != nil { // read only
			return Result{}, fmt.Errorf("listing MaintenanceWindows: %w", err)
		}
		selectors := make([]labels.Selector, 0, len(all.Items))
		for _, w := range all.Items {
			selectors = append(selectors, WindowSelector(&w))
		}
		var inUse []string
		for _, a := range active {
			l, ok := inUseLabels[a.Node]
			if slices.Contains(a.Budgets, DefaultBudget) || (ok && !anyMatches(selectors, l)) {
				inUse = append(inUse, a.Node)
			}
		}
		if len(inUse) >= req.DefaultMaxUnavailable {
			return Result{InUse: inUse, Message: fmt.Sprintf("the default budget for nodes without a window allows %d at once; %d in use",
				req.DefaultMaxUnavailable, len(inUse))}, nil
		}
		room = min(room, req.DefaultMaxUnavailable-len(inUse)-1)
	}
	for _, w := range req.Windows {
		maxUnavailable, inUse, unresolved, err := windowUse(ctx, cached, w, active, inUseLabels)
		if err != nil {
			return Result{}, err
		}
		if unresolved != nil {
			return Result{Message: fmt.Sprintf("window %s: %v", w.Name, unresolved)}, nil
		}
		if maxUnavailable == 0 {
			// Only 0 and 0% resolve to no node: a freeze. Say so,
			// rather than "in use by" nobody.
			return Result{InUse: inUse, Message: frozenMessage(w)}, nil
		}
		if len(inUse) >= maxUnavailable {
			return Result{InUse: inUse, Message: fmt.Sprintf("window %s allows %d node(s) disrupted at once; %d in use", w.Name, maxUnavailable, len(inUse))}, nil
		}
		room = min(room, maxUnavailable-len(inUse)-1)
	}
	return Result{Free: true, Room: room}, nil
}

// labelsOf reads the labels of the nodes in use: a node that is gone is
// in no window by its labels (it still counts where it is recorded); any
// other read error fails the check (closed), since the node might count
// against the budget.
func labelsOf(ctx context.Context, cached client.Reader, active []Active) (map[string]labels.Set, error) {
	out := make(map[string]labels.Set, len(active))
	for _, a := range active {
		var n corev1.Node
		err := cached.Get(ctx, client.ObjectKey{Name: a.Node}, &n)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("reading node %s, in use by a request: %w", a.Node, err)
		default:
			out[a.Node] = labels.Set(n.Labels)
		}
	}
	return out, nil
}

// windowUse is window w's maxUnavailable and the nodes in active using it:
// those recorded against it and those its selector selects now. When
// maxUnavailable does not resolve, unresolved says why (and
// maxUnavailable is 0: nothing more starts); err is a failed read.
func windowUse(ctx context.Context, cached client.Reader, w *lullv1alpha1.MaintenanceWindow, active []Active, inUseLabels map[string]labels.Set) (maxUnavailable int, inUse []string, unresolved, err error) {
	sel := WindowSelector(w)
	nodes := 0
	if w.Spec.MaxUnavailable != nil && w.Spec.MaxUnavailable.Type == intstr.String {
		// A percentage is of the nodes the window selects: counted, not
		// copied. A number needs no count (a 5,000-node wave listed
		// 1,250 nodes at every look at a budget).
		var selected corev1.NodeList
		if err := cached.List(ctx, &selected, client.MatchingLabelsSelector{Selector: sel}, client.UnsafeDisableDeepCopy); err != nil {
			return 0, nil, nil, fmt.Errorf("listing nodes of window %s: %w", w.Name, err)
		}
		nodes = len(selected.Items)
	}
	for _, a := range active {
		if l, ok := inUseLabels[a.Node]; slices.Contains(a.Budgets, w.Name) || (ok && sel.Matches(l)) {
			inUse = append(inUse, a.Node)
		}
	}
	maxUnavailable, unresolved = MaxUnavailable(w, nodes)
	if unresolved != nil {
		return 0, inUse, unresolved, nil
	}
	return maxUnavailable, inUse, nil, nil
}

// Left is how many more nodes window w's budget takes now, as cached
// shows the requests using budget and the nodes other tools disrupt (0
// when full, frozen or not resolvable), and the nodes using it. It is the
// room lull leaves to another disruptor the window governs (Karpenter:
// drainer/karpenter); lull's own starts are decided by Ledger.Reserve.
func Left(ctx context.Context, cached client.Reader, w *lullv1alpha1.MaintenanceWindow) (int, []string, error) {
	var act actives
	if err := cachedActive(ctx, cached, "", nil, &act); err != nil {
		return 0, nil, err
	}
	others, err := disrupted(ctx, cached, "")
	if err != nil {
		return 0, nil, err
	}
	for _, n := range others {
		act.add(n)
	}
	active := act.list()
	inUseLabels, err := labelsOf(ctx, cached, active)
	if err != nil {
		return 0, nil, err
	}
	maxUnavailable, inUse, _, err := windowUse(ctx, cached, w, active, inUseLabels) // unresolved: maxUnavailable 0, no room
	if err != nil {
		return 0, nil, err
	}
	return max(0, maxUnavailable-len(inUse)), inUse, nil
}

// WindowSelector is the set of nodes a window selects: all of them when it
// has no nodeSelector; an invalid selector selects every node, so it
// counts against the budget rather than escaping it (fail closed).
func WindowSelector(w *lullv1alpha1.MaintenanceWindow) labels.Selector {
	if w.Spec.NodeSelector == nil {
		return labels.Everything()
	}
	sel, err := metav1.LabelSelectorAsSelector(w.Spec.NodeSelector)
	if err != nil {
		return labels.Everything()
	}
	return sel
}

func anyMatches(sels []labels.Selector, l labels.Set) bool {
	for _, s := range sels {
		if s.Matches(l) {
			return true
		}
	}
	return false
}

// MaxUnavailable resolves a window's budget against its node count. A
// count is taken as it is; a percentage of the selected nodes rounds down
// but never below one node, except 0%. 0 and 0% are a freeze: no node of
// the window may be disrupted (Frozen). A value admission would refuse
// (negative, above 100%, not a number) is an error, which callers treat
// as no room (fail closed).
func MaxUnavailable(w *lullv1alpha1.MaintenanceWindow, nodes int) (int, error) {
	v := intstr.FromInt32(1)
	if w.Spec.MaxUnavailable != nil {
		v = *w.Spec.MaxUnavailable
	}
	if err := window.ValidateMaxUnavailable(v); err != nil {
		return 0, fmt.Errorf("maxUnavailable %s: %w", v.String(), err)
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, nodes, false)
	if err != nil {
		return 0, fmt.Errorf("maxUnavailable %s: %w", v.String(), err)
	}
	if n < 1 && v.Type == intstr.String && !frozen(v) {
		n = 1
	}
	return n, nil
}

// frozen reports whether a maxUnavailable is a freeze: 0 or 0%.
func frozen(v intstr.IntOrString) bool {
	return (v.Type == intstr.Int && v.IntVal == 0) || (v.Type == intstr.String && v.StrVal == "0%")
}

func frozenMessage(w *lullv1alpha1.MaintenanceWindow) string {
	return fmt.Sprintf("window %s is frozen: maxUnavailable %s allows no node to be disrupted", w.Name, w.Spec.MaxUnavailable.String())
}

// Frozen reports the first of windows whose maxUnavailable is 0 or 0%, a
// freeze of its nodes, and says so in a message for statuses.
func Frozen(windows []*lullv1alpha1.MaintenanceWindow) (string, bool) {
	for _, w := range windows {
		if v := w.Spec.MaxUnavailable; v != nil && frozen(*v) {
			return frozenMessage(w), true
		}
	}
	return "", false
}
