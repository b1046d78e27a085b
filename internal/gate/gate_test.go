package gate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/forecast"
	"lull.dev/lull/internal/window"
	"lull.dev/lull/lease"
)

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// calls records which gates were asked, in order.
type calls []string

func (c *calls) checks(action lullv1alpha1.DisruptionAction, free bool, held *lease.HeldError) Checks {
	return Checks{
		Decide: func([]string, *lullv1alpha1.Changes) lullv1alpha1.Decision {
			*c = append(*c, "decide")
			return lullv1alpha1.Decision{Action: action, Policy: "p", Rule: "r"}
		},
		Budget: func(context.Context) (budget.Result, error) {
			*c = append(*c, "budget")
			if !free {
				return budget.Result{Message: "window w allows 1 node(s) disrupted at once; 1 in use"}, nil
			}
			return budget.Result{Free: true}, nil
		},
		Lease: func(context.Context) (*lease.HeldError, error) {
			*c = append(*c, "lease")
			return held, nil
		},
	}
}

func open() *forecast.Node {
	return &forecast.Node{WindowOpen: true, Maintenance: &forecast.Maintenance{Classes: []string{"kernel-update"}}}
}

func closed() *forecast.Node {
	next := window.Interval{Start: t0.Add(2 * time.Hour), End: t0.Add(4 * time.Hour)}
	return &forecast.Node{Maintenance: &forecast.Maintenance{Classes: []string{"kernel-update"}}, Disruption: next.Start,
		Windows: &forecast.Windows{Names: []string{"noon"}, Until: next.Start, Next: next, HasNext: true, Start: next, HasStart: true}}
}

func tooLittle() *forecast.Node {
	next := window.Interval{Start: t0.Add(24 * time.Hour), End: t0.Add(26 * time.Hour)}
	return &forecast.Node{Maintenance: &forecast.Maintenance{Classes: []string{"kernel-update"}}, Disruption: next.Start,
		Windows: &forecast.Windows{Names: []string{"noon"}, Permitted: true, Until: t0.Add(10 * time.Minute),
			Next: window.Interval{Start: t0.Add(-time.Hour), End: t0.Add(10 * time.Minute)}, HasNext: true,
			MinTimeRemaining: 30 * time.Minute, MinTimeRemainingWindow: "noon", TooLittleLeft: true, Left: 10 * time.Minute,
			Start: next, HasStart: true}}
}

// The gates run in the drainer's order and stop at the first closed one:
// a closed gate never asks the ones after it (no budget slot or lease is
// taken for a request that waits for its window).
func TestCheckOrder(t *testing.T) {
	held := &lease.HeldError{Node: "n1", Holder: "fw-updater", Duration: 10 * time.Minute}
	for name, tc := range map[string]struct {
		req       Request
		action    lullv1alpha1.DisruptionAction
		free      bool
		held      *lease.HeldError
		wantGate  Name
		wantCalls []string
		reason    string
		message   string
		retry     time.Duration
	}{
		"None completes at once": {req: Request{Forecast: closed()}, action: lullv1alpha1.ActionNone,
			wantGate: Policy, wantCalls: []string{"decide"}, reason: ReasonNoDisruption,
			message: "completed at once, without lease, window or budget"},
		"a started request keeps its decision and is never None": {
			req:    Request{Started: true, Decision: &lullv1alpha1.Decision{Action: lullv1alpha1.ActionNone}, Forecast: open()},
			action: lullv1alpha1.ActionDrain, free: true, wantCalls: []string{"budget", "lease"}},
		"window closed": {req: Request{Forecast: closed()}, action: lullv1alpha1.ActionDrain,
			wantGate: Window, wantCalls: []string{"decide"}, reason: ReasonWindowClosed,
			message: "window(s) noon closed; next opens at 2026-11-21T12:00:00Z", retry: 2 * time.Hour},
		"too little left": {req: Request{Forecast: tooLittle()}, action: lullv1alpha1.ActionDrain,
			wantGate: Window, wantCalls: []string{"decide"}, reason: ReasonTooLittleLeft,
			message: "only 10m0s left in window noon; minTimeRemaining is 30m0s; next opens at 2026-11-22T10:00:00Z", retry: 10 * time.Minute},
		"forecast not known": {req: Request{}, action: lullv1alpha1.ActionDrain,
			wantGate: Window, wantCalls: []string{"decide"}, reason: ReasonUnknown, retry: time.Second},
		"budget full": {req: Request{Forecast: open()}, action: lullv1alpha1.ActionDrain,
			wantGate: Budget, wantCalls: []string{"decide", "budget"}, reason: ReasonBudgetInUse, message: "1 in use", retry: 30 * time.Second},
		"leased by another": {req: Request{Forecast: open()}, action: lullv1alpha1.ActionDrain, free: true, held: held,
			wantGate: Lease, wantCalls: []string{"decide", "budget", "lease"}, reason: ReasonHeldByOther,
			message: `node n1 is leased by "fw-updater"`, retry: time.Minute},
		"every gate open": {req: Request{Forecast: open()}, action: lullv1alpha1.ActionCordon, free: true,
			wantCalls: []string{"decide", "budget", "lease"}},
	} {
		t.Run(name, func(t *testing.T) {
			var c calls
			tc.req.Classes, tc.req.Now = []string{"kernel-update"}, t0
			v, err := Check(context.Background(), tc.req, c.checks(tc.action, tc.free, tc.held))
			require.NoError(t, err)
			require.Equal(t, tc.wantGate, v.Gate)
			require.Equal(t, tc.wantGate == "", v.Start())
			require.Equal(t, tc.wantCalls, []string(c))
			require.Equal(t, tc.reason, v.Reason)
			require.Contains(t, v.Message, tc.message)
			require.Equal(t, tc.retry, v.RetryAfter)
		})
	}
}

// The window gate says when the request may start: the forecast's next
// start, or the deadline when it comes first.
func TestCheckWindowOpens(t *testing.T) {
	require.Equal(t, t0.Add(24*time.Hour), CheckWindow(tooLittle(), t0).Opens)
	fc := closed()
	fc.Maintenance.Deadline = t0.Add(time.Hour)
	v := CheckWindow(fc, t0)
	require.True(t, v.Wait)
	require.Equal(t, t0.Add(time.Hour), v.Opens)
	require.Contains(t, v.Message, "(deadline 2026-11-21T11:00:00Z)")

	fc.PastDeadline, fc.WindowOpen = true, true
	v = CheckWindow(fc, t0)
	require.False(t, v.Wait)
	require.Equal(t, ReasonDeadlinePassed, v.Reason)
	require.Equal(t, t0, v.Opens)
}

// A failed budget or lease read decides nothing.
func TestCheckErrors(t *testing.T) {
	var c calls
	checks := c.checks(lullv1alpha1.ActionDrain, true, nil)
	checks.Budget = func(context.Context) (budget.Result, error) { return budget.Result{}, errors.New("etcd unavailable") }
	_, err := Check(context.Background(), Request{Classes: []string{"k"}, Forecast: open(), Now: t0}, checks)
	require.ErrorContains(t, err, "budget gate: etcd unavailable")
	checks = c.checks(lullv1alpha1.ActionDrain, true, nil)
	checks.Lease = func(context.Context) (*lease.HeldError, error) { return nil, errors.New("forbidden") }
	_, err = Check(context.Background(), Request{Classes: []string{"k"}, Forecast: open(), Now: t0}, checks)
	require.ErrorContains(t, err, "lease gate: forbidden")
}
