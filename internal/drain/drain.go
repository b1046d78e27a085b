// Package drain is one drain round over a node's pods, as lull-drainer
// runs it and `kubectl lull plan` previews it: which pods go, which are
// refused by the drain rules, which a PodDisruptionBudget blocks, and how
// long the drain is expected to take. The drainer's round evicts; the
// preview only records, walking the same rules, so a preview names the
// blockers the drainer will report.
package drain

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	kdrain "k8s.io/kubectl/pkg/drain"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/options"
)

// Options configure the drain library for lull's rounds.
type Options struct {
	// DeleteEmptyDirData lets drains evict pods with emptyDir volumes.
	DeleteEmptyDirData bool
	// Timeout is the drain library's own timeout (lull's rounds never
	// wait on it; the request's escalation timeout applies instead).
	Timeout time.Duration
	// RetryDelay is the library's eviction retry delay; 0 would be a hot
	// loop, so it defaults to 2s.
	RetryDelay time.Duration
	// WholeNode: the plan reboots or powers off the node, so every
	// evictable pod is evicted and spec.drain.podSelector is ignored
	// (the pods it leaves out would stop with the node, their
	// PodDisruptionBudgets never asked).
	WholeNode bool
}

// For configures a drain as the drainer's options say (kubectl lull's
// preview passes the same options); wholeNode when the plan takes the node
// down (lullv1alpha1.Plan.TakesNodeDown).
func For(m *options.Maintenance, wholeNode bool) Options {
	return Options{DeleteEmptyDirData: m.DeleteEmptyDirData, Timeout: m.DrainTimeout, RetryDelay: m.RetryDelay, WholeNode: wholeNode}
}

// Drain selects a request's pods with kubectl's drain library, configured
// explicitly: DaemonSet pods and mirror pods are skipped, emptyDir data
// may go if configured, pods no controller would recreate are refused.
// lull issues the evictions itself, one per pod and round, so a reconcile
// never blocks waiting for pods to go.
type Drain struct {
	helper *kdrain.Helper
	node   string
	// AskBudgets: a budget the cache shows allowing no disruption is
	// asked anyway, once per round (one of its pods' evictions), so the
	// API server decides, not a cache that may be behind. The drainer
	// sets it at least every --eviction-max-retry-delay.
	AskBudgets bool
}

// New configures the drain of nm's node. An error means the request's
// drain options are invalid (spec.drain.podSelector).
func New(ctx context.Context, kube kubernetes.Interface, o Options, nm *lullv1alpha1.NodeMaintenance) (*Drain, error) {
	if o.RetryDelay == 0 {
		o.RetryDelay = 2 * time.Second
	}
	h := &kdrain.Helper{
		Ctx:                             ctx,
		Client:                          kube,
		Force:                           false, // never evict pods no controller will recreate
		GracePeriodSeconds:              -1,    // each pod's own grace period
		IgnoreAllDaemonSets:             true,
		DeleteEmptyDirData:              o.DeleteEmptyDirData,
		Timeout:                         o.Timeout,
		EvictErrorRetryDelay:            o.RetryDelay, // unused by lull's own rounds; never 0
		SkipWaitForDeleteTimeoutSeconds: 0,
		Out:                             io.Discard,
		ErrOut:                          io.Discard,
	}
	if d := nm.Spec.Drain; d != nil {
		if d.GracePeriodSeconds != nil {
			h.GracePeriodSeconds = int(*d.GracePeriodSeconds)
		}
		if d.PodSelector != nil && !o.WholeNode {
			sel, err := metav1.LabelSelectorAsSelector(d.PodSelector)
			if err != nil {
				return nil, fmt.Errorf("spec.drain.podSelector: %w", err)
			}
			h.PodSelector = sel.String()
		}
	}
	return &Drain{helper: h, node: nm.Spec.NodeName}, nil
}

// GracePeriod is the request's grace period override in seconds; -1:
// each pod's own.
func (d *Drain) GracePeriod() int { return d.helper.GracePeriodSeconds }

// Outcome is what became of one eviction request.
type Outcome int

const (
	// Evicted: the pod is going; its budgets count it.
	Evicted Outcome = iota
	// Refused: a PodDisruptionBudget refused it.
	Refused
	// Vanished: gone, or replaced by a pod of the same name.
	Vanished
	// Failed: any other error (reported by the caller).
	Failed
)

// Round is what one drain round found and did.
type Round struct {
	// Pods are the node's pods to go, as listed this round.
	Pods []corev1.Pod
	// Refused are the pods the drain library will not evict (no
	// controller, local storage), with why.
	Refused []string
	// Blocked are the pods a PodDisruptionBudget blocks, by namespace/name.
	Blocked map[string]*corev1.Pod
	// Gone counts the pods going or gone; Progress is true when any is.
	Gone     int
	Progress bool
	// Listed is true when the round listed the node's pods (Round), false
	// when it only asked again for pods an earlier round left (Again): an
	// Again round that leaves nothing does not show the node empty.
	Listed bool
	// Covered names the PodDisruptionBudgets (namespace/name) that cover
	// the pods this round evicted.
	Covered map[string]bool
	// Disagreed names the budgets (namespace/name) the cache showed
	// allowing no disruption although the API server accepted an eviction
	// they cover (AskBudgets): the cache was behind.
	Disagreed []string

	pdbs *pdbIndex
	// ask and asked: AskBudgets, and the budgets asked so far.
	ask   bool
	asked map[string]bool
}

// Round lists the node's pods and walks them in order. A pod already
// going counts as gone; a pod covered by a budget that allows no
// disruption now is blocked without asking (its budget's status change
// wakes the drainer); every other pod is handed to evict, and one evicted
// counts its budgets down for the rest of the round, so a budget allowing
// one disruption gets one request. Budgets are read from pdbs; a read
// error fails the round.
func (d *Drain) Round(ctx context.Context, pdbs client.Reader, evict func(*corev1.Pod) Outcome) (*Round, error) {
	list, errs := d.helper.GetPodsForDeletion(d.node)
	if list == nil {
		return nil, fmt.Errorf("listing pods on node %s: %w", d.node, errors.Join(errs...))
	}
	r := &Round{Pods: list.Pods(), Blocked: map[string]*corev1.Pod{}, Listed: true, pdbs: newPDBIndex(ctx, pdbs), ask: d.AskBudgets}
	for _, e := range errs {
		r.Refused = append(r.Refused, e.Error())
	}
	for i := range r.Pods {
		if err := r.walk(&r.Pods[i], evict); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Again walks pods an earlier round left blocked, as Round does, without
// listing the node's pods: while PodDisruptionBudgets let a node's pods go
// one at a time, each round would otherwise list every pod again to evict
// one. Each eviction still carries the pod's UID as a precondition, so a
// pod replaced since is not evicted (it comes back Vanished); pods that
// arrived since are not seen, which is why the caller lists again (Round)
// before calling the node drained and at least every so often.
func (d *Drain) Again(ctx context.Context, pdbs client.Reader, pods []corev1.Pod, evict func(*corev1.Pod) Outcome) (*Round, error) {
	r := &Round{Pods: slices.Clone(pods), Blocked: map[string]*corev1.Pod{}, pdbs: newPDBIndex(ctx, pdbs), ask: d.AskBudgets}
	for i := range r.Pods {
		if err := r.walk(&r.Pods[i], evict); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// StillBlocked returns copies of the pods the round left blocked, sorted
// by namespace/name: what an Again round asks for.
func (r *Round) StillBlocked() []corev1.Pod {
	out := make([]corev1.Pod, 0, len(r.Blocked))
	for _, key := range slices.Sorted(maps.Keys(r.Blocked)) {
		out = append(out, *r.Blocked[key].DeepCopy())
	}
	return out
}

func (r *Round) walk(p *corev1.Pod, evict func(*corev1.Pod) Outcome) error {
	if p.DeletionTimestamp != nil {
		r.Progress = true
		r.Gone++
		return nil
	}
	exhausted, covering, err := r.pdbs.exhausted(p)
	if err != nil {
		return err
	}
	if len(exhausted) > 0 && !r.askFor(exhausted) {
		r.Blocked[p.Namespace+"/"+p.Name] = p
		return nil
	}
	outcome := evict(p)
	if len(exhausted) > 0 && covering == 1 && (outcome == Refused || outcome == Evicted) {
		// The API server answered for the budget: it is asked.
		r.markAsked(exhausted)
	}
	switch outcome {
	case Evicted:
		r.Progress = true
		r.Gone++
		for _, id := range exhausted {
			if !slices.Contains(r.Disagreed, id) {
				r.Disagreed = append(r.Disagreed, id)
			}
		}
		return r.consume(p)
	case Refused:
		r.Blocked[p.Namespace+"/"+p.Name] = p
	case Vanished:
		r.Gone++
	}
	return nil
}

// askFor reports whether a pod whose budgets the cache shows exhausted is
// asked for anyway: AskBudgets is set and one of those budgets has not
// been asked this round. A budget counts as asked (markAsked) only once
// the API server answered for it — an eviction refused by a budget or
// let through — through a pod no other budget covers: a refusal of a pod
// two budgets cover says nothing of either (the eviction API refuses such
// a pod outright), and an eviction that failed otherwise (a webhook, a
// 500) says nothing of the budget; the budget's other pods are asked.
func (r *Round) askFor(exhausted []string) bool {
	if !r.ask {
		return false
	}
	return slices.ContainsFunc(exhausted, func(id string) bool { return !r.asked[id] })
}

// markAsked records that the API server answered for the budgets.
func (r *Round) markAsked(ids []string) {
	if r.asked == nil {
		r.asked = map[string]bool{}
	}
	for _, id := range ids {
		r.asked[id] = true
	}
}

// consume counts an eviction against the pod's budgets for the rest of
// the round and notes them as covering an evicted pod.
func (r *Round) consume(p *corev1.Pod) error {
	matching, err := r.pdbs.matching(p)
	for _, pdb := range matching {
		pdb.Status.DisruptionsAllowed--
		if r.Covered == nil {
			r.Covered = map[string]bool{}
		}
		r.Covered[pdb.Namespace+"/"+pdb.Name] = true
	}
	return err
}

// Blockers names, per PodDisruptionBudget (namespace/name), the blocked
// pods it covers, sorted; "(unknown)" holds pods the eviction API refused
// for a budget the round did not see. The budgets come from the round's
// index: no second listing.
func (r *Round) Blockers() (map[string][]string, error) {
	byPDB := map[string][]string{}
	for key, p := range r.Blocked {
		matching, err := r.pdbs.matching(p)
		if err != nil {
			return nil, err
		}
		for _, pdb := range matching {
			id := pdb.Namespace + "/" + pdb.Name
			byPDB[id] = append(byPDB[id], key)
		}
		if len(matching) == 0 {
			byPDB["(unknown)"] = append(byPDB["(unknown)"], key)
		}
	}
	for _, pods := range byPDB {
		sort.Strings(pods)
	}
	return byPDB, nil
}

// DisruptionTimeout is how long a PodDisruptionBudget counts a pod in its
// status.disruptedPods as disrupted when the pod is not deleted: the
// disruption controller's DeletionTimeout
// (k8s.io/kubernetes/pkg/controller/disruption).
const DisruptionTimeout = 2 * time.Minute

// Unfinished is an eviction a PodDisruptionBudget still counts although
// its pod runs on: the API server approved it and counted the budget down
// (status.disruptedPods), then did not delete the pod, as when the
// evicting client died in the middle of the request. The budget refuses
// the evictions that disruption uses up until Frees.
type Unfinished struct {
	// Budget and Pod are namespace/name.
	Budget, Pod string
	// Frees is when the budget stops counting it.
	Frees time.Time
}

// Describe says what holds the budget, as the drainer's Blocked condition
// and kubectl lull plan's warnings say it.
func (u Unfinished) Describe() string {
	return fmt.Sprintf("%s still counts pod %s as evicted by a request that did not finish (the pod was not deleted), until %s",
		u.Budget, u.Pod, u.Frees.Format(time.RFC3339))
}

// Unfinished returns the pods the round left blocked that a budget counts
// as disrupted although they are not terminating (why a budget whose pods
// are all healthy allows no disruption), sorted by budget and pod.
func (r *Round) Unfinished() ([]Unfinished, error) {
	var out []Unfinished
	for key, p := range r.Blocked {
		if p.DeletionTimestamp != nil {
			continue
		}
		matching, err := r.pdbs.matching(p)
		if err != nil {
			return nil, err
		}
		for _, pdb := range matching {
			if at, ok := pdb.Status.DisruptedPods[p.Name]; ok {
				out = append(out, Unfinished{Budget: pdb.Namespace + "/" + pdb.Name, Pod: key, Frees: at.Add(DisruptionTimeout).UTC()})
			}
		}
	}
	slices.SortFunc(out, func(a, b Unfinished) int {
		return cmp.Or(strings.Compare(a.Budget, b.Budget), strings.Compare(a.Pod, b.Pod))
	})
	return out, nil
}

// BudgetVersions returns the resourceVersion at which the round read
// each PodDisruptionBudget (namespace/name) it consulted. A budget still
// at that version has not changed since: it refuses what it refused in
// this round.
func (r *Round) BudgetVersions() map[string]string {
	out := map[string]string{}
	for _, list := range r.pdbs.byNS {
		for _, pdb := range list {
			out[pdb.Namespace+"/"+pdb.Name] = pdb.ResourceVersion
		}
	}
	return out
}

// pdbIndex answers whether a pod is covered by a PodDisruptionBudget that
// currently allows no disruption, reading each namespace's budgets once.
type pdbIndex struct {
	c    client.Reader
	ctx  context.Context
	byNS map[string][]policyv1.PodDisruptionBudget
}

func newPDBIndex(ctx context.Context, c client.Reader) *pdbIndex {
	return &pdbIndex{c: c, ctx: ctx, byNS: map[string][]policyv1.PodDisruptionBudget{}}
}

func (x *pdbIndex) matching(p *corev1.Pod) ([]*policyv1.PodDisruptionBudget, error) {
	list, ok := x.byNS[p.Namespace]
	if !ok {
		var pdbs policyv1.PodDisruptionBudgetList
		if err := x.c.List(x.ctx, &pdbs, client.InNamespace(p.Namespace)); err != nil {
			return nil, fmt.Errorf("listing PodDisruptionBudgets in %s: %w", p.Namespace, err)
		}
		list = pdbs.Items // copies: consume may count them down
		x.byNS[p.Namespace] = list
	}
	var out []*policyv1.PodDisruptionBudget
	for i := range list {
		sel, err := metav1.LabelSelectorAsSelector(list[i].Spec.Selector)
		if err == nil && !sel.Empty() && sel.Matches(labels.Set(p.Labels)) {
			out = append(out, &list[i])
		}
	}
	return out, nil
}

// exhausted names the pod's budgets (namespace/name) that allow no
// disruption now, as the index read them, and how many budgets cover it.
func (x *pdbIndex) exhausted(p *corev1.Pod) ([]string, int, error) {
	matching, err := x.matching(p)
	if err != nil {
		return nil, 0, err
	}
	var out []string
	for _, pdb := range matching {
		if pdb.Status.ObservedGeneration >= pdb.Generation && pdb.Status.DisruptionsAllowed <= 0 {
			out = append(out, pdb.Namespace+"/"+pdb.Name)
		}
	}
	return out, len(matching), nil
}
