// Package gate decides whether a maintenance request may start now: the
// policy decision, lull-agent on the node (for a plan with host steps),
// the node's windows (minTimeRemaining included, as the forecast decides
// them), the windows' health gates (alerts, blocking pods, recovery), the
// windows' disruption budget and the node's disruption lease, in that
// order. lull-drainer gates every request with
// it and `kubectl lull plan` previews with it, so the two cannot disagree
// about the order or the answer.
package gate

import (
	"context"
	"fmt"
	"strings"
	"time"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/forecast"
	"lull.dev/lull/internal/policy"
	"lull.dev/lull/internal/window"
	"lull.dev/lull/lease"
)

// Name names a gate.
type Name string

const (
	// Policy: the decided action is None; the request needs no lease,
	// window or budget and completes at once.
	Policy Name = "Policy"
	// Agent: the plan has host steps (WriteFiles, DaemonReload,
	// ReloadService, RestartService, Reboot, PowerOff)
	// and no lull-agent runs on the node; nothing is taken meanwhile.
	Agent Name = "Agent"
	// Window: the node's windows (or too little time left in them) keep
	// the request from starting.
	Window Name = "Window"
	// Health (health.go): a health gate of the node's windows holds it.
	// Budget: the windows' disruption budget is in use by other nodes.
	Budget Name = "Budget"
	// Lease: another actor holds the node's disruption lease.
	Lease Name = "Lease"
)

// Reasons the window gate gives (the WindowPermits condition's reasons).
const (
	ReasonUnknown        = "Unknown"
	ReasonWindowClosed   = "WindowClosed"
	ReasonTooLittleLeft  = "TooLittleTimeLeft"
	ReasonWindowOpen     = "WindowOpen"
	ReasonDeadlinePassed = "DeadlinePassed"
	ReasonBudgetInUse    = "BudgetInUse"
	ReasonHeldByOther    = "HeldByOther"
	ReasonNoDisruption   = "NoDisruptionNeeded"
	ReasonNoAgent        = "NoAgent"
)

// budgetRetry is when to look at a full budget again; a request finishing
// elsewhere wakes the drainer sooner.
const budgetRetry = 30 * time.Second

// agentRetry is when a request waiting for lull-agent looks again by
// itself (an agent lease appearing wakes it sooner).
const agentRetry = 15 * time.Second

// Request is the request being gated.
type Request struct {
	// Classes requested.
	Classes []string
	// Changes requested.
	Changes *lullv1alpha1.Changes
	// Started: lull has begun disrupting the node for this request. It
	// keeps its Decision and is never completed as needing nothing.
	Started bool
	// Decision recorded by a started request; nil: decide now.
	Decision *lullv1alpha1.Decision
	// Forecast for the node with this request (nil: not known yet).
	Forecast *forecast.Node
	// Now is the time of the decision.
	Now time.Time
}

// Checks are how the caller answers the gates that read or write the
// cluster: the drainer reserves a budget slot and takes the lease, the
// preview only looks.
type Checks struct {
	// Decide is the policies' decision for classes and changes
	// (forecast.Decide).
	Decide func(classes []string, changes *lullv1alpha1.Changes) lullv1alpha1.Decision
	// Agent reports whether lull-agent runs on the node, and if not why
	// (asked only for a plan with host steps; nil: not known, not asked).
	Agent func(ctx context.Context) (bool, string, error)
	// Health runs the health gates of the node's windows (CheckHealth;
	// nil: the windows have none).
	Health func(ctx context.Context) (HealthVerdict, error)
	// Budget counts the budget (and, for the drainer, takes a slot).
	Budget func(ctx context.Context) (budget.Result, error)
	// Lease returns who else holds the node's lease (nil: the request
	// may hold it; the drainer has then taken it).
	Lease func(ctx context.Context) (*lease.HeldError, error)
}

// Verdict is the gates' answer.
type Verdict struct {
	// Gate that keeps the request from starting (or, Policy, that ends
	// it at once); empty when it may start now.
	Gate Name
	// Reason and Message say why, as the request's status shows it.
	Reason, Message string
	// RetryAfter is when to look again (0: when woken).
	RetryAfter time.Duration
	// Decision is the policy decision the request goes by.
	Decision lullv1alpha1.Decision
	// Window is the window gate's answer, once reached.
	Window WindowVerdict
	// Health is the health gates' answer, once reached.
	Health HealthVerdict
	// Budget is the budget's answer, once reached.
	Budget budget.Result
	// Held is the other holder of the lease (Gate Lease).
	Held *lease.HeldError
}

// Start reports whether every gate lets the request start now.
func (v Verdict) Start() bool { return v.Gate == "" }

// Decide is the policy gate alone: the decision the request goes by, and
// whether it needs nothing (action None, not started).
func Decide(req Request, decide func([]string, *lullv1alpha1.Changes) lullv1alpha1.Decision) (lullv1alpha1.Decision, bool) {
	if req.Decision != nil {
		return *req.Decision, false
	}
	d := decide(req.Classes, req.Changes)
	return d, !req.Started && d.Action == lullv1alpha1.ActionNone
}

// Check runs the gates in order and stops at the first that is closed.
// An error (a budget or lease read or write that failed) decides nothing.
func Check(ctx context.Context, req Request, c Checks) (Verdict, error) {
	var v Verdict
	d, none := Decide(req, c.Decide)
	v.Decision = d
	if none {
		v.Gate, v.Reason = Policy, ReasonNoDisruption
		v.Message = policy.Describe(req.Classes, req.Changes, d) + ": completed at once, without lease, window or budget"
		return v, nil
	}
	if c.Agent != nil && d.Plan().HostSteps() && !req.Started {
		ok, why, err := c.Agent(ctx)
		if err != nil {
			return v, fmt.Errorf("agent gate: %w", err)
		}
		if !ok {
			v.Gate, v.Reason, v.RetryAfter = Agent, ReasonNoAgent, agentRetry
			v.Message = fmt.Sprintf("the plan (%s) has steps lull-agent carries out on the node: %s", policy.StepsLine(d.Steps), why)
			return v, nil
		}
	}
	v.Window = CheckWindow(req.Forecast, req.Now)
	if v.Window.Wait {
		v.Gate, v.Reason, v.Message, v.RetryAfter = Window, v.Window.Reason, v.Window.Message, v.Window.RetryAfter
		return v, nil
	}
	if c.Health != nil && !req.Started {
		h, err := c.Health(ctx)
		if err != nil {
			return v, fmt.Errorf("health gate: %w", err)
		}
		v.Health = h
		if h.Hold {
			v.Gate, v.Reason, v.Message, v.RetryAfter = Health, h.Reason, h.Message, h.RetryAfter
			return v, nil
		}
	}
	b, err := c.Budget(ctx)
	if err != nil {
		return v, fmt.Errorf("budget gate: %w", err)
	}
	v.Budget = b
	if !b.Free {
		v.Gate, v.Reason, v.Message, v.RetryAfter = Budget, ReasonBudgetInUse, b.Message, budgetRetry
		return v, nil
	}
	held, err := c.Lease(ctx)
	if err != nil {
		return v, fmt.Errorf("lease gate: %w", err)
	}
	if held != nil {
		v.Gate, v.Reason, v.Message, v.Held = Lease, ReasonHeldByOther, held.Error(), held
		// The holder's renewals wake the drainer through the lease watch;
		// expiry is judged by observation, so look again after one duration.
		v.RetryAfter = held.Duration
		if v.RetryAfter <= 0 || v.RetryAfter > time.Minute {
			v.RetryAfter = time.Minute
		}
	}
	return v, nil
}

// WindowVerdict is the window gate's answer for a request now.
type WindowVerdict struct {
	// Wait is true while the windows keep the request from starting.
	Wait bool
	// Reason and Message as the WindowPermits condition shows them.
	Reason, Message string
	// RetryAfter is when the answer changes by itself (0: not known).
	RetryAfter time.Duration
	// Opens is when the request may start, if known: now, the forecast's
	// next start (a period long enough for minTimeRemaining) or the
	// deadline, whichever comes first.
	Opens time.Time
}

// CheckWindow is the window gate: the node's forecast decides whether its
// windows (with their minTimeRemaining) or its deadline let the request
// start now, and otherwise when.
func CheckWindow(fc *forecast.Node, now time.Time) WindowVerdict {
	switch {
	case fc == nil:
		return WindowVerdict{Wait: true, Reason: ReasonUnknown, Message: "the node's forecast is not known yet", RetryAfter: time.Second}
	case fc.PastDeadline:
		return WindowVerdict{Reason: ReasonDeadlinePassed, Message: "the request's deadline has passed; windows no longer gate it", Opens: now}
	case fc.WindowOpen:
		return WindowVerdict{Reason: ReasonWindowOpen, Message: "the node's windows permit changes to start", Opens: now}
	}
	v := WindowVerdict{Wait: true, Reason: ReasonWindowClosed, Message: "no window opens within the search horizon"}
	if w := fc.Windows; w != nil {
		v = closedWindows(w, now)
	}
	if fc.Maintenance != nil && !fc.Maintenance.Deadline.IsZero() {
		v.Message += fmt.Sprintf(" (deadline %s)", fc.Maintenance.Deadline.UTC().Format(time.RFC3339))
		if v.Opens.IsZero() || fc.Maintenance.Deadline.Before(v.Opens) {
			v.Opens = fc.Maintenance.Deadline
		}
	}
	return v
}

// closedWindows explains windows that keep a request from starting:
// closed, or open with less than their minTimeRemaining left.
func closedWindows(w *forecast.Windows, now time.Time) WindowVerdict {
	v := WindowVerdict{Wait: true, Reason: ReasonWindowClosed, Message: w.Message}
	if w.TooLittleLeft {
		v.Reason = ReasonTooLittleLeft
		v.Message = fmt.Sprintf("only %s left in window %s; minTimeRemaining is %s",
			w.Left.Round(time.Second), w.MinTimeRemainingWindow, w.MinTimeRemaining)
	}
	if w.HasStart {
		next := w.Start.Start.UTC().Format(time.RFC3339)
		if w.TooLittleLeft {
			v.Message += "; next opens at " + next
		} else {
			v.Message = fmt.Sprintf("window(s) %s closed; next opens at %s", strings.Join(w.Names, ","), next)
		}
		v.Opens = w.Start.Start
	}
	// The answer changes by itself at the windows' next transition.
	if w.Until.Before(window.Forever) {
		v.RetryAfter = w.Until.Sub(now)
	}
	return v
}
