package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/maintenance"
	"lull.dev/lull/internal/options"
)

// askLimit is how long a drain blocked by a budget that allows a
// disruption may go without an eviction request: lull-drainer's
// --eviction-max-retry-delay (the local cluster keeps the default), plus
// slack for a leader change (the local cluster's leader lease is 6 s) and
// the new leader's cache sync.
var askLimit = options.DefaultMaintenance().MaxRetryDelay + 15*time.Second

// blockedDrains watches the promise that a blocked drain is asked again:
// while a request Draining a watched node, its windows permitting, names a
// PodDisruptionBudget among its blockers, that budget allows a
// disruption, and a pod on the node that the budget covers is still there,
// lull-drainer sends an eviction for a pod of the node in the budget's
// namespace within askLimit. The attempts are read from the API server's
// audit log (hack/lib/cluster.sh write_audit_policy), not from lull.
type blockedDrains struct {
	mine map[string]bool

	mu       sync.Mutex
	blockers map[string][]string                      // node -> budgets its request names, while it may evict
	budgets  map[string]*policyv1.PodDisruptionBudget // namespace/name -> latest
	pods     map[string]*corev1.Pod                   // namespace/name -> latest, on watched nodes
	seen     map[string]string                        // namespace/name -> node, every pod ever seen on one
	open     map[[2]string]time.Time                  // {node, budget} -> stuck since
	stuck    []stuckDrain
}

// stuckDrain is a span in which a drain was blocked by a budget with room.
type stuckDrain struct {
	node, budget string
	from, to     time.Time // to zero: still stuck
}

func newBlockedDrains(nodes ...string) *blockedDrains {
	b := &blockedDrains{mine: map[string]bool{}, blockers: map[string][]string{}, budgets: map[string]*policyv1.PodDisruptionBudget{},
		pods: map[string]*corev1.Pod{}, seen: map[string]string{}, open: map[[2]string]time.Time{}}
	for _, n := range nodes {
		b.mine[n] = true
	}
	return b
}

// watchBlockedDrains watches the promise alone, until the end of the test.
func watchBlockedDrains(t testing.TB, nodes ...string) *blockedDrains {
	t.Helper()
	b := newBlockedDrains(nodes...)
	Watch(t, cluster.Config, b.handlers())
	return b
}

func (b *blockedDrains) handlers() map[client.Object]toolscache.ResourceEventHandler {
	h := func(f func(any, bool)) toolscache.ResourceEventHandlerFuncs {
		return toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) { f(o, false) }, UpdateFunc: func(_, o any) { f(o, false) }, DeleteFunc: func(o any) { f(o, true) },
		}
	}
	return map[client.Object]toolscache.ResourceEventHandler{
		&corev1.Pod{}:                   h(b.pod),
		&policyv1.PodDisruptionBudget{}: h(b.budget),
		&lullv1alpha1.NodeMaintenance{}: h(b.request),
	}
}

func unwrap(o any) any {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return o
}

func (b *blockedDrains) pod(o any, deleted bool) {
	p, ok := unwrap(o).(*corev1.Pod)
	if !ok || !b.mine[p.Spec.NodeName] {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	key := p.Namespace + "/" + p.Name
	b.seen[key] = p.Spec.NodeName
	if deleted || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		delete(b.pods, key)
	} else {
		b.pods[key] = p
	}
	b.update()
}

func (b *blockedDrains) budget(o any, deleted bool) {
	p, ok := unwrap(o).(*policyv1.PodDisruptionBudget)
	if !ok {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if deleted {
		delete(b.budgets, p.Namespace+"/"+p.Name)
	} else {
		b.budgets[p.Namespace+"/"+p.Name] = p
	}
	b.update()
}

func (b *blockedDrains) request(o any, deleted bool) {
	nm, ok := unwrap(o).(*lullv1alpha1.NodeMaintenance)
	if !ok || !b.mine[nm.Spec.NodeName] {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var names []string
	blocked := meta.IsStatusConditionTrue(nm.Status.Conditions, maintenance.ConditionBlocked)
	paused := meta.IsStatusConditionFalse(nm.Status.Conditions, maintenance.ConditionWindowPermits) // windowEnd: Pause
	if !deleted && nm.Status.Phase == lullv1alpha1.PhaseDraining && blocked && !paused {
		for _, bl := range nm.Status.Blockers {
			names = append(names, bl.PodDisruptionBudget)
		}
	}
	b.blockers[nm.Spec.NodeName] = names
	b.update()
}

// update opens and closes the stuck spans after any change (b.mu held).
func (b *blockedDrains) update() {
	now := time.Now()
	active := map[[2]string]bool{}
	for node, names := range b.blockers {
		for _, id := range names {
			if b.stuckOn(node, id) {
				active[[2]string{node, id}] = true
			}
		}
	}
	for k := range active {
		if _, ok := b.open[k]; !ok {
			b.open[k] = now
		}
	}
	for k, from := range b.open {
		if !active[k] {
			b.stuck = append(b.stuck, stuckDrain{node: k[0], budget: k[1], from: from, to: now})
			delete(b.open, k)
		}
	}
}

// stuckOn reports whether budget id allows a disruption and covers a pod
// still on node (b.mu held).
func (b *blockedDrains) stuckOn(node, id string) bool {
	p, ok := b.budgets[id]
	if !ok || p.Status.ObservedGeneration < p.Generation || p.Status.DisruptionsAllowed <= 0 {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
	if err != nil || sel.Empty() {
		return false
	}
	for _, pod := range b.pods {
		if pod.Spec.NodeName == node && pod.Namespace == p.Namespace && sel.Matches(labels.Set(pod.Labels)) {
			return true
		}
	}
	return false
}

// violations lists each span longer than askLimit in which lull-drainer
// sent no eviction for a pod of the node in the budget's namespace within
// askLimit of the span's start.
func (b *blockedDrains) violations(t testing.TB) []string {
	b.mu.Lock()
	spans := slices.Clone(b.stuck)
	for k, from := range b.open {
		spans = append(spans, stuckDrain{node: k[0], budget: k[1], from: from})
	}
	b.mu.Unlock()
	now := time.Now()
	var long []stuckDrain
	for _, s := range spans {
		to := s.to
		if to.IsZero() {
			to = now
		}
		if to.Sub(s.from) > askLimit {
			long = append(long, s)
		}
	}
	if len(long) == 0 {
		return nil
	}
	evictions, err := drainerEvictions()
	if err != nil {
		t.Logf("blocked drains: reading the audit log: %v", err)
		return []string{fmt.Sprintf("%d blocked drain(s) could not be checked against the audit log: %v", len(long), err)}
	}
	var out []string
	for _, s := range long {
		ns, _, _ := strings.Cut(s.budget, "/")
		asked := slices.ContainsFunc(evictions, func(e eviction) bool {
			return e.namespace == ns && e.node(b) == s.node && !e.at.Before(s.from.Add(-time.Second)) && !e.at.After(s.from.Add(askLimit))
		})
		if !asked {
			out = append(out, fmt.Sprintf("request on %s blocked by PodDisruptionBudget %s, which allowed a disruption from %s: no eviction within %s",
				s.node, s.budget, s.from.UTC().Format(time.RFC3339), askLimit))
		}
	}
	return out
}

// eviction is an eviction lull-drainer sent, from the audit log.
type eviction struct {
	namespace, pod string
	at             time.Time
}

// node is the node the evicted pod ran on, as the watch saw it (the audit
// log does not say).
func (e eviction) node(b *blockedDrains) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seen[e.namespace+"/"+e.pod]
}

// loggedDrainerRequests reads lull-drainer's requests from the API server's audit
// log (hack/lib/cluster.sh audits every request of lull-drainer's), the
// rotated files first, each request once.
func loggedDrainerRequests() ([]auditEvent, error) {
	path := filepath.Join(cluster.Dir, "logs", "kube-apiserver-audit.log")
	rotated, err := filepath.Glob(filepath.Join(cluster.Dir, "logs", "kube-apiserver-audit-*.log"))
	if err != nil {
		return nil, err
	}
	var out []auditEvent
	seen := map[string]bool{}
	for _, f := range append(rotated, path) {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, line := range bytesLines(raw) {
			var a auditEvent
			if json.Unmarshal(line, &a) != nil || !strings.HasPrefix(a.UserAgent, "lull-drainer/") || seen[a.AuditID] {
				continue
			}
			seen[a.AuditID] = true
			out = append(out, a)
		}
	}
	return out, nil
}

// drainerEvictions are lull-drainer's eviction requests (loggedDrainerRequests).
func drainerEvictions() ([]eviction, error) {
	all, err := loggedDrainerRequests()
	if err != nil {
		return nil, err
	}
	var out []eviction
	for _, a := range all {
		if o := a.ObjectRef; a.Verb == "create" && o != nil && o.Resource == "pods" && o.Subresource == "eviction" {
			out = append(out, eviction{namespace: o.Namespace, pod: o.Name, at: a.RequestReceivedTimestamp})
		}
	}
	return out, nil
}
