package forecast

import (
	"fmt"
	"time"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/policy"
	"lull.dev/lull/internal/window"
)

// Lease is a held node disruption lease as the forecast sees it.
type Lease struct {
	Holder    string
	Operation string
	Reason    string
	// Since is the lease's acquire time (the holder's clock; for people).
	Since time.Time
	// Expires is when the lease counts as expired if nobody renews it:
	// the time this process first saw the current version plus the
	// lease's duration, on this process's clock.
	Expires time.Time
}

// Maintenance is a node's requested maintenance.
type Maintenance struct {
	// Name of the NodeMaintenance; empty while the request is only a
	// label the drainer has not yet turned into an object.
	Name string
	// Classes requested (the label's one class, or the request's).
	Classes []string
	// Changes requested (the request's spec.changes).
	Changes *lullv1alpha1.Changes
	Phase   lullv1alpha1.MaintenancePhase
	// Deadline after which windows no longer gate the request (zero: none).
	Deadline time.Time
	// Started: lull has begun disrupting the node for this request (it
	// may since have lost the lease while its cordon stays).
	Started bool
	// Decision is what the DisruptionPolicies decide for Classes now (a
	// started request keeps the decision its status records).
	Decision lullv1alpha1.Decision
}

// Node is one node's disruption forecast. Values are immutable once
// published in a Snapshot.
type Node struct {
	Name string
	// LabelClass is the node's maintenance label value when computed, and
	// HasLabel whether it had the label; a lookup compares them with the
	// node the caller holds to notice a label the forecast has not seen yet.
	LabelClass string
	HasLabel   bool

	// Lease is the node's held, unexpired disruption lease, if any.
	Lease *Lease
	// Maintenance is the node's active maintenance request, if any.
	Maintenance *Maintenance
	// Windows is set when a maintenance is requested.
	Windows *Windows

	// Disruption is the earliest time the node is expected to be disrupted;
	// zero when no disruption is expected.
	Disruption time.Time
	// Certain is true when the node is being disrupted now (leased, or
	// cordoned/draining/drained by a maintenance); false for a forecast.
	Certain bool
	// WindowOpen is true when a requested maintenance may start (or, once
	// started, continue) now: its windows permit, or its deadline passed.
	WindowOpen bool
	// PastDeadline is true once the request's deadline has passed: windows
	// no longer gate it.
	PastDeadline bool
	// Reason explains the forecast in one line for people.
	Reason string

	// validUntil is when the forecast changes without any event (window
	// transition, lease expiry, deadline); zero means never.
	validUntil time.Time
	// quiet marks a labelled node with nothing forecast (its class needs
	// nothing, or its request is complete). The forecast keeps it so a
	// lookup knows which label it was computed for; readers see nil.
	quiet bool
}

// Leased reports whether someone holds the node's disruption lease.
func (n *Node) Leased() bool { return n != nil && n.Lease != nil }

// Requested reports whether maintenance of the node has been requested
// and not completed. Only tests ask it (the integration tests' view of
// the forecast, from another package): lull's components read
// n.Maintenance and the window fields themselves.
func (n *Node) Requested() bool { return n != nil && n.Maintenance != nil }

// Disrupting reports whether the node is leased or cordoned, draining or
// drained by a maintenance.
func (n *Node) Disrupting() bool { return n != nil && n.Certain }

// ValidUntil is when the forecast changes without any event; zero means not
// before the next event.
func (n *Node) ValidUntil() time.Time { return n.validUntil }

// Input is everything a node's forecast depends on.
type Input struct {
	Name string
	// Labels of the node (nil when the node is unknown).
	Labels     map[string]string
	LabelKey   string
	Lease      *Lease
	NM         *lullv1alpha1.NodeMaintenance
	Windows    []NamedWindow
	NoWindowOK bool
	// DefaultToo: the request was made (or went on) while no window
	// selected the node, so the default's permission is needed as well
	// as that of the windows selecting it now (NodeMaintenanceStatus.DefaultBudget).
	DefaultToo bool
	// WindowsUnknown: the MaintenanceWindows have not been read yet. A
	// requested node then counts as open for maintenance, the cautious
	// answer for placing pods (the drainer never acts before its caches
	// sync).
	WindowsUnknown bool
	// Policies decide the requested class's action; a request whose class
	// needs nothing (None) and has not started is no disruption. Nil: every
	// class drains.
	Policies *policy.Set
}

// NamedWindow is a compiled MaintenanceWindow.
type NamedWindow struct {
	Name   string
	Window *window.Window
	// MinTimeRemaining is the window's spec.minTimeRemaining (0: none).
	MinTimeRemaining time.Duration
}

// Compute derives a node's forecast at now. It is a pure function: the
// scheduler plugin, the drainer and the preview all call it.
func Compute(now time.Time, in Input) *Node {
	n := &Node{Name: in.Name}
	n.LabelClass, n.HasLabel = in.Labels[in.LabelKey]
	if in.Lease != nil && now.Before(in.Lease.Expires) {
		l := *in.Lease
		n.Lease = &l
		n.validUntil = l.Expires
	}
	n.Maintenance = maintenanceOf(in.NM, n.LabelClass, n.HasLabel)
	if m := n.Maintenance; m != nil && in.Policies != nil {
		m.Decision = in.Policies.Decide(m.Classes, m.Changes)
		if !m.Started && !m.Phase.Disrupting() && m.Decision.Action == lullv1alpha1.ActionNone {
			// The drainer completes such a request at once, touching nothing.
			n.Maintenance = nil
		}
	}
	n.certainNow(now)
	if n.Maintenance != nil {
		// Windows are evaluated for a disrupting node too: the drainer
		// needs them to act when a window closes mid-drain.
		n.windowsNow(now, in)
	}
	return n
}

// certainNow marks a node that is being disrupted now: leased, or
// cordoned, draining or drained by a maintenance.
func (n *Node) certainNow(now time.Time) {
	switch {
	case n.Lease != nil:
		n.Certain, n.Disruption = true, now
		n.Reason = fmt.Sprintf("node is leased for disruption by %q", n.Lease.Holder)
		if n.Lease.Operation != "" {
			n.Reason += " for " + n.Lease.Operation
		}
		if n.Lease.Reason != "" {
			n.Reason += " (" + n.Lease.Reason + ")"
		}
	case n.Maintenance != nil && n.Maintenance.Phase.Disrupting():
		n.Certain, n.Disruption = true, now
		n.Reason = fmt.Sprintf("node is under maintenance %s (%s, phase %s)", n.Maintenance.Name, n.Maintenance.What(), n.Maintenance.Phase)
	}
}

// windowsNow decides whether the requested maintenance may start (or
// continue) now, and otherwise when it may: its windows, their
// minTimeRemaining and its deadline.
func (n *Node) windowsNow(now time.Time, in Input) {
	m := n.Maintenance
	what := fmt.Sprintf("node awaits maintenance (%s)", m.What())
	pastDeadline := !m.Deadline.IsZero() && !now.Before(m.Deadline)
	if !m.Deadline.IsZero() && !pastDeadline {
		n.bound(m.Deadline)
	}
	n.PastDeadline = pastDeadline
	if in.WindowsUnknown {
		n.WindowOpen = true
		if !n.Certain {
			n.Disruption = now
			n.Reason = what + " and its MaintenanceWindows are not read yet"
		}
		return
	}
	w := evaluate(in.Windows, in.NoWindowOK, in.DefaultToo, now)
	n.Windows = w
	n.bound(w.Until)
	if w.Permitted && !w.TooLittleLeft && w.MinTimeRemaining > 0 && w.Left < window.Forever.Sub(now) {
		// The first instant with less than the minimum left: requests
		// wait from then on.
		n.bound(now.Add(w.Left - w.MinTimeRemaining + time.Nanosecond))
	}
	// A started request continues whatever is left of the window.
	n.WindowOpen = pastDeadline || (w.Permitted && (!w.TooLittleLeft || m.Started))
	if n.Certain {
		return
	}
	switch {
	case pastDeadline:
		n.Disruption = now
		n.Reason = what + " and its deadline has passed"
	case n.WindowOpen:
		n.Disruption = now
		n.Reason = what + " and its window is open"
	default:
		n.Reason = what + " " + n.startLater(w, m.Deadline)
	}
}

// startLater sets Disruption to when a request that may not start now
// may: the next period long enough, or the deadline if that comes
// first. It returns why, for Reason.
func (n *Node) startLater(w *Windows, deadline time.Time) string {
	start, ok := w.Start.Start, w.HasStart
	if !deadline.IsZero() && (!ok || deadline.Before(start)) {
		start, ok = deadline, true
	}
	var why string
	if w.TooLittleLeft {
		why = fmt.Sprintf("but only %s is left in window %s; minTimeRemaining is %s; ",
			w.Left.Round(time.Second), w.MinTimeRemainingWindow, w.MinTimeRemaining)
	}
	if !ok {
		if why == "" {
			why = "but "
		}
		if w.HasNext && w.MinTimeRemaining > 0 {
			return why + fmt.Sprintf("no window period ahead is as long as minTimeRemaining %s (window %s)", w.MinTimeRemaining, w.MinTimeRemainingWindow)
		}
		return why + "no window opens within the horizon"
	}
	n.Disruption = start
	if why != "" {
		return why + "next opens at " + start.UTC().Format(time.RFC3339)
	}
	return "from " + start.UTC().Format(time.RFC3339)
}

func (n *Node) bound(t time.Time) {
	if t.IsZero() || !t.Before(window.Forever) {
		return
	}
	if n.validUntil.IsZero() || t.Before(n.validUntil) {
		n.validUntil = t
	}
}

// What says what the maintenance changes, for people.
func (m *Maintenance) What() string { return lullv1alpha1.What(m.Classes, m.Changes) }

// maintenanceOf derives the active request from the node's NodeMaintenance
// and its label. The label alone counts as a request from the moment it is
// visible, before the drainer has created the object; a NodeMaintenance
// marked complete ends the request even while the label lingers.
func maintenanceOf(nm *lullv1alpha1.NodeMaintenance, labelClass string, hasLabel bool) *Maintenance {
	if nm != nil && nm.DeletionTimestamp == nil && !nm.Spec.Complete && !nm.Status.Phase.Finished() {
		m := &Maintenance{Name: nm.Name, Classes: nm.Spec.Classes, Changes: nm.Spec.Changes, Phase: nm.Status.Phase.OrPending(), Started: nm.Status.StartedAt != nil}
		if nm.Spec.Deadline != nil {
			m.Deadline = nm.Spec.Deadline.Time
		}
		return m
	}
	if hasLabel && (nm == nil || !nm.Spec.Complete) {
		return &Maintenance{Classes: []string{labelClass}, Phase: lullv1alpha1.PhasePending}
	}
	return nil
}
