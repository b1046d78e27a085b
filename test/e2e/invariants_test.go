package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/disruptors"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/lease"
)

// windowCloseSlack is how late after a window's close an eviction may still
// land: the drainer checks the window before each eviction round, and an
// eviction already sent in a round that began while the window was open
// completes. Pod condition times have a resolution of one second, which
// the check accounts for separately.
const windowCloseSlack = 2 * time.Second

// invariants watches, beside a scenario, what the promises of
// docs/design.md forbid, for the nodes the scenario names:
//
//   - no pod leaves a node outside the windows that permit it (by default a
//     node is always permitted; restrict narrows it to permit intervals),
//   - never more NodeMaintenances of a window's nodes disrupting at once than
//     its maxUnavailable, a node counting against the windows the scenario
//     put it in and every window its request recorded (a slot belongs to
//     the start, whatever the node's labels say later),
//   - no PodDisruptionBudget's healthy pods below its desired count,
//   - no host step (lull-agent) starts unless the node's lease, at that
//     moment, is held by lull and is the one the request's fencing token
//     names,
//
// and, when check is called after every request finished, that no node is
// left cordoned without an unfinished request, no cordon lull found on a
// node when it started is gone, and no node lease is held.
//
// It reads through informers, which list again after a dropped watch, so an
// API server restart or an etcd outage does not end the watching silently.
type invariants struct {
	t     testing.TB
	nodes []string
	mine  map[string]bool

	mu         sync.Mutex
	restricted map[string][]interval // node -> when pods may leave it
	budgets    []*budgetGroup
	phases     map[string]lullv1alpha1.MaintenancePhase
	windows    map[string][]string // node -> windows its request recorded
	removals   []removal
	nodeLabels map[string]labels.Set // every node's labels (Node informer)
	others     map[string]bool       // nodes another tool disrupts
	seenPods   map[string]bool
	pdbLow     []string
	pdbUp      map[string]bool // PodDisruptionBudget UID -> seen healthy
	// fencing: every host step's start against its node's lease.
	fencing *StepFencing
	// blocked: a drain blocked by a budget with room is asked again.
	blocked *blockedDrains
}

type interval struct{ from, to time.Time } // to zero: still open

type budgetGroup struct {
	name  string
	max   int
	nodes map[string]bool
	// sel, when set, puts every node whose labels it matches in the
	// group too (nodes another tool creates: Karpenter's).
	sel     labels.Selector
	maxSeen int
}

// removal is a pod leaving a watched node: evicted (the eviction API's
// DisruptionTarget condition) or deleted.
type removal struct {
	node, pod string
	evicted   bool
	// at is when it was asked to leave, to the second the API server
	// records (DisruptionTarget's or the deletion's time).
	at time.Time
}

// watchInvariants starts the watchers for nodes until the end of the test.
func (e *sysEnv) watchInvariants(nodes ...string) *invariants {
	e.t.Helper()
	return newInvariants(e.t, nodes...)
}

// newInvariants starts the watchers for nodes until the end of the test or
// benchmark t.
func newInvariants(t testing.TB, nodes ...string) *invariants {
	t.Helper()
	iv := &invariants{t: t, nodes: nodes, mine: map[string]bool{}, restricted: map[string][]interval{},
		phases: map[string]lullv1alpha1.MaintenancePhase{}, windows: map[string][]string{}, seenPods: map[string]bool{}, pdbUp: map[string]bool{},
		nodeLabels: map[string]labels.Set{}, others: map[string]bool{},
		fencing: NewStepFencing(nodes...), blocked: newBlockedDrains(nodes...)}
	for _, n := range nodes {
		iv.mine[n] = true
	}
	handlers := map[client.Object]toolscache.ResourceEventHandler{
		&corev1.Pod{}: toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { iv.pod(o, false) },
			UpdateFunc: func(_, o any) { iv.pod(o, false) },
			DeleteFunc: func(o any) { iv.pod(o, true) },
		},
		&policyv1.PodDisruptionBudget{}: toolscache.ResourceEventHandlerFuncs{
			AddFunc: iv.pdb, UpdateFunc: func(_, o any) { iv.pdb(o) },
		},
		&lullv1alpha1.NodeMaintenance{}: toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) { iv.nm(o, false) }, UpdateFunc: func(_, o any) { iv.nm(o, false) },
			DeleteFunc: func(o any) { iv.nm(o, true) },
		},
		&corev1.Node{}: toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) { iv.node(o, false) }, UpdateFunc: func(_, o any) { iv.node(o, false) },
			DeleteFunc: func(o any) { iv.node(o, true) },
		},
	}
	for _, more := range []map[client.Object]toolscache.ResourceEventHandler{iv.fencing.Handlers(), iv.blocked.handlers()} {
		for obj, h := range more { // a kind already watched gets one more handler on the same informer
			handlers[obj] = h
		}
	}
	Watch(t, cluster.Config, handlers)
	return iv
}

// restrict says pods may leave node only inside intervals given by permit.
func (iv *invariants) restrict(node string) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	if _, ok := iv.restricted[node]; !ok {
		iv.restricted[node] = nil
	}
}

// permit opens a permitted interval for a restricted node from now on, and
// closes marks its end; the scenario calls them when it opens or closes a
// window (closes may name a future instant).
func (iv *invariants) permit(node string, from time.Time) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	iv.restricted[node] = append(iv.restricted[node], interval{from: from})
}

func (iv *invariants) closes(node string, at time.Time) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	ivs := iv.restricted[node]
	if len(ivs) > 0 && ivs[len(ivs)-1].to.IsZero() {
		ivs[len(ivs)-1].to = at
	}
}

// budgetSelecting watches that at most limit of the nodes whose labels
// match (a window's, whoever made them) disrupt at once, lull's requests
// and other tools' disruptions (internal/disruptors) counted alike.
func (iv *invariants) budgetSelecting(window string, limit int, match map[string]string) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	iv.budgets = append(iv.budgets, &budgetGroup{name: window, max: limit, nodes: map[string]bool{}, sel: labels.SelectorFromSet(match)})
}

// budget watches that at most limit of nodes (a window's) disrupt at once.
func (iv *invariants) budget(window string, limit int, nodes ...string) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	g := &budgetGroup{name: window, max: limit, nodes: map[string]bool{}}
	for _, n := range nodes {
		g.nodes[n] = true
	}
	iv.budgets = append(iv.budgets, g)
}

func (iv *invariants) pod(o any, deleted bool) {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	p, ok := o.(*corev1.Pod)
	if !ok || !iv.mine[p.Spec.NodeName] {
		return
	}
	r := removal{node: p.Spec.NodeName, pod: p.Namespace + "/" + p.Name}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			r.evicted, r.at = true, c.LastTransitionTime.Time
		}
	}
	switch {
	case r.at.IsZero() && p.DeletionTimestamp != nil:
		// deletionTimestamp is the deletion's time plus its grace period.
		r.at = p.DeletionTimestamp.Add(-time.Duration(ptrOr(p.DeletionGracePeriodSeconds)) * time.Second)
	case r.at.IsZero() && deleted:
		r.at = time.Now() // deleted while the watch was down: when it was seen
	case r.at.IsZero():
		return // still there
	}
	iv.mu.Lock()
	defer iv.mu.Unlock()
	if iv.seenPods[string(p.UID)] {
		return
	}
	iv.seenPods[string(p.UID)] = true
	iv.removals = append(iv.removals, r)
}

func ptrOr(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func (iv *invariants) pdb(o any) {
	p, ok := o.(*policyv1.PodDisruptionBudget)
	if !ok || p.Status.ObservedGeneration != p.Generation || p.Status.ExpectedPods == 0 {
		return
	}
	iv.mu.Lock()
	defer iv.mu.Unlock()
	// A budget counts from the first time its pods were all up: a new
	// app's pods become Ready one by one.
	if p.Status.CurrentHealthy >= p.Status.DesiredHealthy {
		iv.pdbUp[string(p.UID)] = true
		return
	}
	if !iv.pdbUp[string(p.UID)] {
		return
	}
	iv.pdbLow = append(iv.pdbLow, fmt.Sprintf("%s/%s healthy %d < desired %d at %s", p.Namespace, p.Name,
		p.Status.CurrentHealthy, p.Status.DesiredHealthy, time.Now().UTC().Format(time.RFC3339)))
}

func (iv *invariants) nm(o any, deleted bool) {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	nm, ok := o.(*lullv1alpha1.NodeMaintenance)
	if !ok || !iv.mine[nm.Spec.NodeName] {
		return
	}
	iv.mu.Lock()
	defer iv.mu.Unlock()
	if deleted {
		delete(iv.phases, nm.Spec.NodeName)
		delete(iv.windows, nm.Spec.NodeName)
	} else {
		iv.phases[nm.Spec.NodeName] = nm.Status.Phase
		iv.windows[nm.Spec.NodeName] = nm.Status.Windows
		iv.fencing.Request(nm)
	}
	iv.recountLocked()
}

// node follows the labels of every node and whether another tool is
// disrupting it, for the groups that select nodes by label.
func (iv *invariants) node(o any, deleted bool) {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	n, ok := o.(*corev1.Node)
	if !ok {
		return
	}
	iv.mu.Lock()
	defer iv.mu.Unlock()
	_, tracked := iv.nodeLabels[n.Name]
	relevant := iv.mine[n.Name] || slices.ContainsFunc(iv.budgets, func(g *budgetGroup) bool { return g.sel != nil && g.sel.Matches(labels.Set(n.Labels)) })
	_, other := disruptors.Of(n)
	switch {
	case deleted || (!relevant && tracked):
		delete(iv.nodeLabels, n.Name)
		delete(iv.others, n.Name)
	case !relevant:
		return // a node no group counts: no recount per heartbeat
	case tracked && iv.others[n.Name] == other && labels.Equals(iv.nodeLabels[n.Name], n.Labels):
		return
	default:
		iv.nodeLabels[n.Name] = labels.Set(n.Labels)
		iv.others[n.Name] = other
	}
	iv.recountLocked()
}

// recountLocked counts each group's nodes disrupting now: a request of
// the scenario's disrupting, or another tool disrupting the node.
func (iv *invariants) recountLocked() {
	for _, g := range iv.budgets {
		n := 0
		for node := range iv.nodeLabels {
			inGroup := g.nodes[node] || slices.Contains(iv.windows[node], g.name) || (g.sel != nil && g.sel.Matches(iv.nodeLabels[node]))
			if inGroup && (iv.phases[node].Disrupting() || iv.others[node]) {
				n++
			}
		}
		for node, p := range iv.phases {
			if _, seen := iv.nodeLabels[node]; !seen && (g.nodes[node] || slices.Contains(iv.windows[node], g.name)) && p.Disrupting() {
				n++
			}
		}
		g.maxSeen = max(g.maxSeen, n)
	}
}

// hostSteps returns how many host steps the watchers saw start.
func (iv *invariants) hostSteps() int { return iv.fencing.Starts() }

// evictions returns how many pods were evicted from node.
func (iv *invariants) evictions(node string) int {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	n := 0
	for _, r := range iv.removals {
		if r.node == node && r.evicted {
			n++
		}
	}
	return n
}

// maxDisrupting returns the most nodes of a budget group seen disrupting at once.
func (iv *invariants) maxDisrupting(window string) int {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	for _, g := range iv.budgets {
		if g.name == window {
			return g.maxSeen
		}
	}
	return 0
}

// violations lists what the watchers saw that a promise forbids.
func (iv *invariants) violations() []string {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	var out []string
	for _, r := range iv.removals {
		ivs, restricted := iv.restricted[r.node]
		if !restricted || permittedAt(ivs, r.at) {
			continue
		}
		out = append(out, fmt.Sprintf("pod %s left %s at %s (evicted %v) outside its permitted windows %v",
			r.pod, r.node, r.at.UTC().Format(time.RFC3339), r.evicted, ivs))
	}
	for _, g := range iv.budgets {
		if g.maxSeen > g.max {
			out = append(out, fmt.Sprintf("window %s: %d nodes disrupting at once, maxUnavailable %d", g.name, g.maxSeen, g.max))
		}
	}
	for _, p := range iv.pdbLow {
		out = append(out, "PodDisruptionBudget "+p)
	}
	out = append(out, iv.blocked.violations(iv.t)...)
	return append(out, iv.fencing.Violations()...)
}

// permittedAt reports whether a removal recorded at `at` (to the second,
// rounded down) may have happened inside one of ivs.
func permittedAt(ivs []interval, at time.Time) bool {
	for _, i := range ivs {
		if at.Add(time.Second).After(i.from) && (i.to.IsZero() || !at.After(i.to.Add(windowCloseSlack))) {
			return true
		}
	}
	return false
}

// check fails the test on any violation so far and, once every request of
// the watched nodes has finished, on a node left cordoned without an
// unfinished request or a node lease still held. It returns the violation
// count for the scenario's summary (always 0 when it returns).
func (iv *invariants) check() int {
	t := iv.t
	t.Helper()
	ctx := context.Background()
	v := iv.violations()
	// Requests finish, leases and cordons follow within a reconcile.
	var last []string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		last = iv.leftBehind(ctx)
		return len(last) == 0, nil
	})
	if err != nil {
		// The last look ran with the expired context: look once more
		// with a live one, so the report says what was left behind.
		v = append(v, iv.leftBehind(context.Background())...)
	}
	require.Empty(t, v, "invariant violations; %s", cluster.LogsHint())
	return len(v)
}

func (iv *invariants) leftBehind(ctx context.Context) []string {
	var out []string
	c, err := client.New(cluster.Config, client.Options{Scheme: lullscheme.New()})
	if err != nil {
		return []string{err.Error()}
	}
	for _, name := range iv.nodes {
		var nm lullv1alpha1.NodeMaintenance
		nmErr := c.Get(ctx, client.ObjectKey{Name: name}, &nm)
		active := nmErr == nil && !nm.Status.Phase.Finished()
		if active {
			out = append(out, fmt.Sprintf("request for %s did not finish: phase %s (%s)", name, nm.Status.Phase, nm.Status.WaitingFor))
			continue
		}
		var n corev1.Node
		switch err := c.Get(ctx, client.ObjectKey{Name: name}, &n); {
		case apierrors.IsNotFound(err):
			// Deleted (a Cluster API Machine's node): its cordon went with
			// it; its lease must not stay.
		case err != nil:
			out = append(out, err.Error())
			continue
		default:
			// A cordon someone else made before lull started stays; lull's
			// goes with its request.
			adminCordon := nmErr == nil && ptr.Deref(nm.Status.WasUnschedulable, false)
			switch {
			case adminCordon && !n.Spec.Unschedulable:
				out = append(out, fmt.Sprintf("node %s: lull removed a cordon it did not make", name))
			case !adminCordon && n.Spec.Unschedulable:
				out = append(out, fmt.Sprintf("node %s left cordoned without an unfinished request", name))
			}
		}
		var l coordinationv1.Lease
		err = c.Get(ctx, client.ObjectKey{Namespace: lease.DefaultNamespace, Name: "node-" + name}, &l)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			out = append(out, err.Error())
		case l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "":
			out = append(out, fmt.Sprintf("lease of %s still held by %q", name, *l.Spec.HolderIdentity))
		}
	}
	return out
}

// summary is the one-line, stable result of a fault scenario, printed for
// docs/performance.md ("Reliability").
func summary(scenario string, fields map[string]any) {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := []string{"reliability: scenario=" + scenario}
	for _, k := range keys {
		v := fields[k]
		if d, ok := v.(time.Duration); ok {
			v = d.Round(100 * time.Millisecond)
		}
		parts = append(parts, fmt.Sprintf("%s=%v", k, v))
	}
	fmt.Println(strings.Join(parts, " "))
}
