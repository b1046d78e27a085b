package maintenance

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// The windows governing a request's node, as the reconcile reads them,
// and what the request records of them.

// windows returns the MaintenanceWindows governing the node (nil: none
// selects it, the default applies). A window deleted since the forecast
// saw it no longer governs; any other read error fails the step (closed),
// since skipping a window would skip its budget and windowEnd.
func (s *step) windows(ctx context.Context) ([]*lullv1alpha1.MaintenanceWindow, error) {
	if s.wsLoaded {
		return s.ws, nil
	}
	if s.fc == nil || s.fc.Windows == nil {
		s.wsLoaded = true
		return nil, nil
	}
	var ws []*lullv1alpha1.MaintenanceWindow
	for _, name := range s.fc.Windows.Names {
		var mw lullv1alpha1.MaintenanceWindow
		err := s.r.Client.Get(ctx, types.NamespacedName{Name: name}, &mw)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading MaintenanceWindow %s governing node %s: %w", name, s.node.Name, err)
		}
		ws = append(ws, &mw)
	}
	s.ws, s.wsLoaded = ws, true
	return ws, nil
}

// noteWindows records the governing windows and when the request may next
// start in them (minTimeRemaining included). The windows only accumulate:
// the forecast governs a request by the windows its labels select and
// those its status records, so a relabelled node keeps waiting for, and
// counting against, every window it was ever in (a window deleted drops
// out of the forecast, and so from here).
func (s *step) noteWindows() {
	prev := s.status.NextWindowStart
	s.status.NextWindowStart = nil
	if s.fc == nil || s.fc.Windows == nil {
		return
	}
	s.status.Windows = s.fc.Windows.Names
	if s.fc.Windows.Default {
		s.status.DefaultBudget = true
	}
	if s.fc.Windows.HasStart {
		s.status.NextWindowStart = windowStart(prev, s.fc.Windows.Start.Start, s.now)
	}
}

// windowStart is the nextWindowStart to record for a period starting at
// start. A period that has begun keeps the start already recorded for it:
// the engine reports an always-open period (or one open since before its
// horizon) as starting at the instant evaluated, which would rewrite the
// status at every reconcile; the recorded value is then when lull first
// saw the period open. A period still to come is recorded as it is.
func windowStart(prev *metav1.Time, start, now time.Time) *metav1.Time {
	start = start.UTC().Truncate(time.Second)
	if prev != nil && !start.After(now) && !prev.After(now) && prev.Time.Before(start) {
		return prev
	}
	return &metav1.Time{Time: start}
}
