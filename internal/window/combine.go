package window

import "time"

// maxCombineSteps bounds the search for a time all windows permit at once.
const maxCombineSteps = 10000

// EvaluateAll answers for a set of windows that all select one node: changes
// may start only when every window permits (the most restrictive wins).
// Next is the first period in which all permit at once. An empty set
// returns Reason NoWindows; the caller applies its default.
func EvaluateAll(ws []*Window, now time.Time) Result {
	switch len(ws) {
	case 0:
		return Result{Reason: ReasonNoWindows, Until: Forever}
	case 1:
		return ws[0].Evaluate(now)
	}
	results := make([]Result, len(ws))
	var blocking *Result
	for i, w := range ws {
		results[i] = w.Evaluate(now)
		if !results[i].Permitted && (blocking == nil || severity(results[i]) > severity(*blocking)) {
			blocking = &results[i]
		}
	}
	next, ok := nextAll(ws, now)
	if blocking == nil {
		// All permit now: the combined period began when the last of them
		// opened (zero: not known) and ends when the first closes.
		res := results[0]
		for _, r := range results[1:] {
			if r.Until.Before(res.Until) {
				res.Until = r.Until
			}
		}
		res.Since = next.Start
		if next.Start.IsZero() {
			next.Start = now
		}
		res.Next, res.HasNext = next, ok
		if ok {
			res.Until = next.End
		}
		return res
	}
	res := *blocking
	res.Next, res.HasNext = next, ok
	switch {
	case ok:
		res.Until = next.Start
	case res.Reason != ReasonInvalid && res.Reason != ReasonRestrictive:
		res.Until = Forever
		if res.Reason != ReasonOverride {
			res.Reason = ReasonNoWindow
		}
	}
	return res
}

// NextAll returns the first period, ending after t, in which every window
// permits; its Start may lie before t when all permit at t, and is t when
// that start is not known.
func NextAll(ws []*Window, t time.Time) (Interval, bool) {
	iv, ok := nextAll(ws, t)
	if ok && iv.Start.IsZero() {
		iv.Start = t
	}
	return iv, ok
}

// nextAll is NextAll with a Start that is not known left zero.
func nextAll(ws []*Window, t time.Time) (Interval, bool) {
	if len(ws) == 0 {
		return Interval{}, false
	}
	var limit time.Time
	for i, w := range ws {
		if l := t.Add(w.horizon); i == 0 || l.Before(limit) {
			limit = l
		}
	}
	for step := 0; step < maxCombineSteps && t.Before(limit); step++ {
		var lo, hi time.Time
		for i, w := range ws {
			iv, ok := w.nextPermitted(t)
			if !ok {
				return Interval{}, false
			}
			if i == 0 || iv.Start.After(lo) {
				lo = iv.Start
			}
			if i == 0 || iv.End.Before(hi) {
				hi = iv.End
			}
		}
		if lo.Before(hi) && hi.After(t) {
			return Interval{Start: lo, End: hi}, true
		}
		if !lo.After(t) {
			// All periods contain t but one ends at t; move past it.
			lo = hi
		}
		t = lo
	}
	return Interval{}, false
}

// severity orders the reasons a set of windows is closed, so the combined
// result names the most restrictive: an invalid window, then one closed
// indefinitely, then one closed until a time.
func severity(r Result) int {
	switch {
	case r.Reason == ReasonInvalid:
		return 3
	case r.Reason == ReasonRestrictive, !r.HasNext && r.Reason == ReasonOverride:
		return 2
	case r.Reason == ReasonNoWindow:
		return 1
	}
	return 0
}
