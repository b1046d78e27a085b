package window

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

func instantExclusion(t *testing.T, start, end, reason string) lullv1alpha1.Exclusion {
	return lullv1alpha1.Exclusion{Start: &metav1.Time{Time: mustTime(t, start)}, End: &metav1.Time{Time: mustTime(t, end)}, Reason: reason}
}

// TestNestedExclusions is issue 28's first bug: an exclusion lying inside
// an earlier-starting one disabled the rest of the outer one (a change
// freeze with a one-day note inside it), in either order and whether the
// inner one is written as dates or instants.
func TestNestedExclusions(t *testing.T) {
	freeze := lullv1alpha1.Exclusion{StartDate: "2026-03-01", EndDate: "2026-03-10", Reason: "freeze"}
	cases := map[string][]lullv1alpha1.Exclusion{
		"instants inside dates (the issue's spec)":  {freeze, instantExclusion(t, "2026-03-02T00:00:00Z", "2026-03-03T00:00:00Z", "inner")},
		"dates inside dates":                        {freeze, {StartDate: "2026-03-02", EndDate: "2026-03-02", Reason: "inner"}},
		"dates inside dates, inner listed first":    {{StartDate: "2026-03-02", EndDate: "2026-03-02", Reason: "inner"}, freeze},
		"instants inside dates, inner listed first": {instantExclusion(t, "2026-03-02T00:00:00Z", "2026-03-03T00:00:00Z", "inner"), freeze},
	}
	for name, exclude := range cases {
		t.Run(name, func(t *testing.T) {
			spec := sched("UTC", "10:00", time.Hour, daily(1))
			spec.Schedule.Exclude = exclude
			w := MustCompile(spec)

			now := mustTime(t, "2026-03-05T10:30:00Z")
			r := w.Evaluate(now)
			got := report(r, now)
			want := reported{Permitted: false, Since: "2026-02-28T11:00:00Z", Until: "2026-03-11T10:00:00Z",
				NextStart: "2026-03-11T10:00:00Z", NextEnd: "2026-03-11T11:00:00Z", SecondsUntil: 6*86400 - 1800}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Evaluate(%s) (-want,+got):\n%s", now, diff)
			}
			if r.Reason != ReasonExcluded || r.Detail != "freeze" {
				t.Errorf("reason %s %q, want Excluded \"freeze\" (the exclusion that starts first)", r.Reason, r.Detail)
			}
			if diff := cmp.Diff([]string{"2026-02-28T10:00:00Z/1h0m0s", "2026-03-11T10:00:00Z/1h0m0s", "2026-03-12T10:00:00Z/1h0m0s"},
				starts(w, mustTime(t, "2026-02-28T00:00:00Z"), 3)); diff != "" {
				t.Errorf("Upcoming (-want,+got):\n%s", diff)
			}
			// Inside the inner exclusion the outer one, which started
			// first, is named.
			if r := w.Evaluate(mustTime(t, "2026-03-02T10:30:00Z")); r.Permitted || r.Detail != "freeze" {
				t.Errorf("at 03-02T10:30Z: permitted %v, detail %q; want closed by \"freeze\"", r.Permitted, r.Detail)
			}
		})
	}
}

// TestExclusionSet: the segments cover exactly the union of the
// exclusions, and each is named after the exclusion covering it that
// starts first.
func TestExclusionSet(t *testing.T) {
	at := func(h int) time.Time { return time.Date(2026, 1, 1, h, 0, 0, 0, time.UTC) }
	set := newExclusionSet([]exclusion{
		{start: at(5), end: at(9), reason: "late"},
		{start: at(0), end: at(4), reason: "outer"},
		{start: at(1), end: at(2), reason: "inner"},
		{start: at(3), end: at(6), reason: "overlap"},
		{start: at(9), end: at(10), reason: "touching"},
		{start: at(12), end: at(13), reason: "alone"},
		{start: at(12), end: at(14), reason: "same start, listed later"},
	})
	type seg struct {
		From, To int
		Reason   string
	}
	var got []seg
	for _, e := range set {
		got = append(got, seg{e.start.Hour(), e.end.Hour(), e.reason})
	}
	want := []seg{{0, 4, "outer"}, {4, 6, "overlap"}, {6, 9, "late"}, {9, 10, "touching"}, {12, 13, "alone"}, {13, 14, "same start, listed later"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("segments (-want,+got):\n%s", diff)
	}
	var pieces []seg
	set.forEachPiece(Interval{Start: at(0), End: at(16)}, func(p Interval) bool {
		pieces = append(pieces, seg{p.Start.Hour(), p.End.Hour(), ""})
		return true
	})
	if diff := cmp.Diff([]seg{{10, 12, ""}, {14, 16, ""}}, pieces); diff != "" {
		t.Errorf("pieces (-want,+got):\n%s", diff)
	}
	for h := 0; h < 16; h++ {
		_, in := set.at(at(h))
		inPiece := (h >= 10 && h < 12) || h >= 14
		if in == inPiece {
			t.Errorf("at %02d:00: excluded %v, but a permitted piece says %v", h, in, inPiece)
		}
	}
}
