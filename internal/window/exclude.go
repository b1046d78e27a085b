package window

import (
	"slices"
	"sort"
	"time"
)

// exclusion is one entry of schedule.exclude as a half-open range of
// instants [start, end).
type exclusion struct {
	start, end time.Time
	reason     string
}

// exclusionSet is a schedule's exclusions cut into disjoint segments in
// ascending order, each with the reason status gives for it: that of the
// exclusion, among those covering the segment, that starts first (the
// first listed among those that start together). Segments may touch.
//
// Both the walk that cuts permitted pieces out of a run and the question
// "which exclusion holds at t" read this one structure. Exclusions as
// written may nest or overlap (a change freeze with a one-day note inside
// it), and a list sorted by start alone is not sorted by end, so it cannot
// be binary-searched by end; disjoint segments can.
type exclusionSet []exclusion

func newExclusionSet(in []exclusion) exclusionSet {
	if len(in) == 0 {
		return nil
	}
	ex := slices.Clone(in)
	sort.SliceStable(ex, func(i, j int) bool { return ex[i].start.Before(ex[j].start) })
	bounds := make([]time.Time, 0, 2*len(ex))
	for _, e := range ex {
		bounds = append(bounds, e.start, e.end)
	}
	slices.SortFunc(bounds, func(a, b time.Time) int { return a.Compare(b) })
	bounds = slices.CompactFunc(bounds, func(a, b time.Time) bool { return a.Equal(b) })
	var out exclusionSet
	for i := 0; i+1 < len(bounds); i++ {
		lo, hi := bounds[i], bounds[i+1]
		for _, e := range ex {
			if e.start.After(lo) || e.end.Before(hi) {
				continue
			}
			if n := len(out); n > 0 && out[n-1].end.Equal(lo) && out[n-1].reason == e.reason {
				out[n-1].end = hi
			} else {
				out = append(out, exclusion{start: lo, end: hi, reason: e.reason})
			}
			break
		}
	}
	return out
}

// at returns the exclusion segment covering t, if any.
func (x exclusionSet) at(t time.Time) (exclusion, bool) {
	i := sort.Search(len(x), func(i int) bool { return x[i].end.After(t) })
	if i < len(x) && !t.Before(x[i].start) {
		return x[i], true
	}
	return exclusion{}, false
}

// forEachPiece calls fn with the permitted pieces of raw (raw minus the
// exclusions) in ascending order until fn returns false.
func (x exclusionSet) forEachPiece(raw Interval, fn func(piece Interval) bool) {
	i := sort.Search(len(x), func(i int) bool { return x[i].end.After(raw.Start) })
	start := raw.Start
	for ; i < len(x) && x[i].start.Before(raw.End); i++ {
		e := x[i]
		if e.start.After(start) && !fn(Interval{Start: start, End: e.start}) {
			return
		}
		if e.end.After(start) {
			start = e.end
		}
	}
	if start.Before(raw.End) {
		fn(Interval{Start: start, End: raw.End})
	}
}
