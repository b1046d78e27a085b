package forecast

import (
	"time"

	"lull.dev/lull/internal/window"
)

// This file holds the windows' part of a forecast: the combined state of
// the MaintenanceWindows governing a node, and how it is evaluated.

// Windows is the combined state of the MaintenanceWindows selecting a node.
type Windows struct {
	// Names of the windows governing the node: those selecting it, and
	// those its request recorded (a label change never removes a window
	// from a request); empty means the default.
	Names []string
	// Default: the default budget (nodes no window selects) governs the
	// request, alone (no Names) or beside Names (DefaultToo).
	Default   bool
	Permitted bool
	// Reason and Message explain the state (window.Result).
	Reason  window.Reason
	Message string
	// Until is the next transition (window.Forever if none in the horizon).
	Until time.Time
	// Next is the current permitted period when Permitted, else the next.
	Next    window.Interval
	HasNext bool
	// MinTimeRemaining is the largest minTimeRemaining of the windows
	// (set by window MinTimeRemainingWindow): a request does not start with
	// less than this left of the permitted period.
	MinTimeRemaining       time.Duration
	MinTimeRemainingWindow string
	// TooLittleLeft: the windows permit now, but less than
	// MinTimeRemaining is left of the permitted period.
	TooLittleLeft bool
	// Left is the time left of the current permitted period (when
	// Permitted; window.Forever-bounded periods count as never closing).
	Left time.Duration
	// Start is the first period a request may start in: Next, unless less
	// than MinTimeRemaining is left of it, then the first later one that
	// is long enough. HasStart is false when none lies within the horizon.
	Start    window.Interval
	HasStart bool
}

func evaluate(ws []NamedWindow, noWindowOK, defaultToo bool, now time.Time) *Windows {
	if len(ws) == 0 {
		w := &Windows{Permitted: noWindowOK, Until: window.Forever, Reason: window.ReasonNoWindows, Default: true}
		if noWindowOK {
			w.Message = "no MaintenanceWindow selects the node; the default permits"
			w.Next, w.HasNext = window.Interval{Start: now, End: window.Forever}, true
			w.Start, w.HasStart, w.Left = w.Next, true, window.Forever.Sub(now)
		} else {
			w.Message = "no MaintenanceWindow selects the node; the default forbids"
		}
		return w
	}
	compiled := make([]*window.Window, len(ws))
	names := make([]string, len(ws))
	w := &Windows{Names: names, Default: defaultToo}
	for i, nw := range ws {
		compiled[i], names[i] = nw.Window, nw.Name
		if nw.MinTimeRemaining > w.MinTimeRemaining {
			w.MinTimeRemaining, w.MinTimeRemainingWindow = nw.MinTimeRemaining, nw.Name
		}
	}
	if defaultToo && !noWindowOK {
		// The default forbids, and it governs this request too.
		w.Reason, w.Until = window.ReasonNoWindows, window.Forever
		w.Message = "the request was made while no MaintenanceWindow selected the node, and the default forbids; it still governs the request"
		return w
	}
	r := window.EvaluateAll(compiled, now)
	w.Permitted, w.Reason, w.Message, w.Until, w.Next, w.HasNext = r.Permitted, r.Reason, r.Message(), r.Until, r.Next, r.HasNext
	if !r.HasNext {
		return w
	}
	w.Start, w.HasStart = startPeriod(compiled, r.Next, w.MinTimeRemaining, now)
	if r.Permitted {
		w.Left = run(compiled, r.Next, now.Add(w.MinTimeRemaining)).End.Sub(now)
		w.TooLittleLeft = w.Left < w.MinTimeRemaining
	}
	return w
}

// maxPeriodSteps bounds the walks over permitted periods below (a year
// of daily periods): a minTimeRemaining longer than every period is a
// misconfiguration that must not cost more.
const maxPeriodSteps = 400

// run extends the permitted period iv over the periods that follow it
// without a gap (so the time left is not cut at a boundary nothing
// closes at), as far as need or its end.
func run(ws []*window.Window, iv window.Interval, need time.Time) window.Interval {
	for step := 0; step < maxPeriodSteps && iv.End.Before(need) && !iv.Unbounded(); step++ {
		next, ok := window.NextAll(ws, iv.End)
		if !ok || next.Start.After(iv.End) || !next.End.After(iv.End) {
			break
		}
		iv.End = next.End
	}
	return iv
}

// startPeriod is the first permitted period, from next on, with at least
// need left from when a request could start in it (now, or its start); a
// period that never closes always has enough.
func startPeriod(ws []*window.Window, next window.Interval, need time.Duration, now time.Time) (window.Interval, bool) {
	if need > 0 && tooShort(ws, need) {
		return window.Interval{}, false
	}
	iv := next
	for step := 0; step < maxPeriodSteps; step++ {
		from := iv.Start
		if from.Before(now) {
			from = now
		}
		iv = run(ws, iv, from.Add(need))
		if iv.Unbounded() || iv.End.Sub(from) >= need {
			return iv, true
		}
		var ok bool
		if iv, ok = window.NextAll(ws, iv.End); !ok {
			return window.Interval{}, false
		}
	}
	return window.Interval{}, false
}

// tooShort reports whether no period in which all windows permit can last
// need: the periods of each window bound theirs, so one window whose
// periods are all shorter answers at once what the walk above would find
// only after maxPeriodSteps periods.
func tooShort(ws []*window.Window, need time.Duration) bool {
	for _, w := range ws {
		if longest, ok := w.LongestPeriod(); ok && longest < need {
			return true
		}
	}
	return false
}
