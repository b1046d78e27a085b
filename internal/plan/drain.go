package plan

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/drain"
	"lull.dev/lull/internal/forecast"
	"lull.dev/lull/internal/window"
)

// This file holds the drain's part of a node's preview: what the drain's
// first round would do, and how long the drain is expected to take.

// roundOverhead is added to the longest grace period for a drain estimate:
// eviction rounds, status writes and the API server's deletion.
const roundOverhead = 5 * time.Second

// previewDrain fills in what the drain's first round would do now.
func (cl *Cluster) previewDrain(ctx context.Context, c client.Reader, kube kubernetes.Interface, p *Node, nm *lullv1alpha1.NodeMaintenance) error {
	whole := lullv1alpha1.Plan(p.Steps).TakesNodeDown()
	d, err := drain.New(ctx, kube, drain.For(&cl.Options.Maintenance, whole), nm)
	if err != nil {
		return err
	}
	if whole && nm.Spec.Drain != nil && nm.Spec.Drain.PodSelector != nil {
		p.warn("spec.drain.podSelector is ignored: the plan reboots or powers off the node, so every evictable pod is drained first")
	}
	dp, err := d.Preview(ctx, c)
	if err != nil {
		return err
	}
	p.Evict, p.Blockers, p.Refused = dp.Evict, dp.Blockers, dp.Refused
	if len(dp.Evict) > 0 {
		p.DrainEstimate = metav1.Duration{Duration: dp.MaxGracePeriod + roundOverhead}
		p.DrainEstimateBasis = "longest grace period + eviction rounds"
		if med, n := cl.recordedDrains(); n > 0 && med > p.DrainEstimate.Duration {
			p.DrainEstimate = metav1.Duration{Duration: med}
			p.DrainEstimateBasis = fmt.Sprintf("median of %d drain(s) recorded in NodeMaintenances", n)
		}
	}
	for _, b := range dp.Blockers {
		p.warn("PodDisruptionBudget %s allows no more disruption now; it would block %s", b.PodDisruptionBudget, strings.Join(b.Pods, ", "))
	}
	for _, u := range dp.Unfinished {
		p.warn("PodDisruptionBudget %s", u.Describe())
	}
	for _, r := range dp.Refused {
		p.warn("the drain will not evict: %s", r)
	}
	return nil
}

// recordedDrains is the median duration of the drains the cluster's
// NodeMaintenances record (started to drained), and how many there are.
func (cl *Cluster) recordedDrains() (time.Duration, int) {
	var ds []time.Duration
	for i := range cl.nms {
		st := &cl.nms[i].Status
		if st.StartedAt != nil && st.DrainedAt != nil && st.DrainedAt.After(st.StartedAt.Time) {
			ds = append(ds, st.DrainedAt.Sub(st.StartedAt.Time))
		}
	}
	if len(ds) == 0 {
		return 0, 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2], len(ds)
}

// warnWindowTooShort warns when the permitted period the drain would run
// in is shorter than the drain estimate.
func (p *Node) warnWindowTooShort(fc *forecast.Node, now time.Time) {
	est := p.DrainEstimate.Duration
	if fc == nil || fc.Windows == nil || !fc.Windows.HasStart || est == 0 || fc.PastDeadline {
		return
	}
	// The period the drain would start in (minTimeRemaining included).
	start, end := fc.Windows.Start.Start, fc.Windows.Start.End
	if !end.Before(window.Forever) {
		return
	}
	if start.Before(now) {
		start = now
	}
	if left := end.Sub(start); left < est {
		p.warn("the window %s lasts %s from when the drain would start (%s), less than the drain estimate %s: the drain would run past its end",
			strings.Join(fc.Windows.Names, ","), left.Round(time.Second), start.UTC().Format(time.RFC3339), est)
	}
}
