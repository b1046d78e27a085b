package drain

import (
	"context"
	"maps"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// Preview is what a drain's first round would do now.
type Preview struct {
	// Evict are the pods (namespace/name) the round would evict.
	Evict []string
	// Blockers are the PodDisruptionBudgets that would refuse evictions
	// (Since is zero).
	Blockers []lullv1alpha1.Blocker
	// Refused are pods the drain refuses to evict (no controller, local
	// storage), with why.
	Refused []string
	// MaxGracePeriod is the longest termination grace period among the
	// pods to evict.
	MaxGracePeriod time.Duration
	// Unfinished are the blocked pods a budget counts as evicted by an
	// eviction that did not finish (Round.Unfinished).
	Unfinished []Unfinished
}

// Preview runs a round that evicts nothing: the same pods, the same
// PodDisruptionBudget arithmetic, the same blockers the drainer would
// report, as if every eviction the budgets allow succeeds.
func (d *Drain) Preview(ctx context.Context, pdbs client.Reader) (*Preview, error) {
	out := &Preview{}
	r, err := d.Round(ctx, pdbs, func(p *corev1.Pod) Outcome {
		out.Evict = append(out.Evict, p.Namespace+"/"+p.Name)
		grace := time.Duration(ptr.Deref(p.Spec.TerminationGracePeriodSeconds, corev1.DefaultTerminationGracePeriodSeconds)) * time.Second
		if g := d.GracePeriod(); g >= 0 {
			grace = time.Duration(g) * time.Second
		}
		out.MaxGracePeriod = max(out.MaxGracePeriod, grace)
		return Evicted
	})
	if err != nil {
		return nil, err
	}
	out.Refused = r.Refused
	if out.Unfinished, err = r.Unfinished(); err != nil {
		return nil, err
	}
	byPDB, err := r.Blockers()
	if err != nil {
		return nil, err
	}
	for _, id := range slices.Sorted(maps.Keys(byPDB)) {
		out.Blockers = append(out.Blockers, lullv1alpha1.Blocker{PodDisruptionBudget: id, Pods: byPDB[id]})
	}
	sort.Strings(out.Evict)
	return out, nil
}
