package window

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// ShownStart is the start that status and kubectl lull show for r.Next.
// The engine cannot know when some permitted periods began (Since is zero:
// strategy Permissive, an override's opening, a schedule open since before
// the search horizon) and reports the instant evaluated, which would change
// at every evaluation; for those it is when lull saw the window open: the
// lastTransitionTime of the window's Permitted condition, when that is True
// for generation gen. Otherwise it is r.Next.Start.
func (r Result) ShownStart(status *lullv1alpha1.MaintenanceWindowStatus, gen int64) time.Time {
	if !r.Permitted || !r.Since.IsZero() {
		return r.Next.Start
	}
	c := meta.FindStatusCondition(status.Conditions, lullv1alpha1.WindowConditionPermitted)
	if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != gen ||
		c.LastTransitionTime.IsZero() || c.LastTransitionTime.After(r.Next.Start) {
		return r.Next.Start
	}
	return c.LastTransitionTime.Time
}
