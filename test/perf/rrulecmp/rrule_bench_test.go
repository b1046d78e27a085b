// Package rrulecmp benchmarks lull's window engine against rrule-go's After
// for the same weekly rule anchored in 1970, in the same run.
package rrulecmp

import (
	"fmt"
	"testing"
	"time"

	"github.com/teambition/rrule-go"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/window"
)

const rule = "FREQ=WEEKLY;BYDAY=SA"

func instants(n int) []time.Time {
	base := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	out := make([]time.Time, n)
	for i := range out {
		out[i] = base.Add(time.Duration(i) * 7919 * time.Second)
	}
	return out
}

// TestSameAnswers checks both libraries agree on the next start before
// comparing their speed.
func TestSameAnswers(t *testing.T) {
	lull, ref := engines(t)
	for _, now := range instants(200) {
		next := lull.Evaluate(now).Next.Start
		if next.Before(now) {
			next = lull.Upcoming(next.Add(4*time.Hour), 1)[0].Start
		}
		want := ref.After(now, true)
		if !next.Equal(want) {
			t.Fatalf("at %s: lull next start %s, rrule-go %s", now, next, want)
		}
	}
}

func engines(tb testing.TB) (*window.Window, *rrule.RRule) {
	w, err := window.Compile(&lullv1alpha1.MaintenanceWindowSpec{Schedule: &lullv1alpha1.Schedule{
		TimeZone: "UTC", StartTime: "02:00", Duration: lullv1alpha1.Duration{Duration: 4 * time.Hour}, RRule: rule, Anchor: "1970-01-05",
	}}, window.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	opt, err := rrule.StrToROption(rule)
	if err != nil {
		tb.Fatal(err)
	}
	opt.Dtstart = time.Date(1970, 1, 3, 2, 0, 0, 0, time.UTC)
	r, err := rrule.NewRRule(*opt)
	if err != nil {
		tb.Fatal(err)
	}
	return w, r
}

// BenchmarkNextWindow1970 prints lull's speed-up over rrule-go's After for
// a weekly rule anchored in 1970.
func BenchmarkNextWindow1970(b *testing.B) {
	lull, ref := engines(b)
	ts := instants(1024)
	var ns [2]float64
	b.Run("lull", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_ = lull.Evaluate(ts[i%len(ts)])
		}
		ns[0] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	b.Run("rrule-go", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_ = ref.After(ts[i%len(ts)], true)
		}
		ns[1] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	if ns[0] > 0 {
		fmt.Printf("BenchmarkNextWindow1970: lull is %.0fx faster than rrule-go After (%.0f ns vs %.0f ns)\n", ns[1]/ns[0], ns[0], ns[1])
	}
}
