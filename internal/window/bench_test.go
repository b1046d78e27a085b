package window

import (
	"fmt"
	"sort"
	"testing"
	"time"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

func benchWindow(anchor string) *Window {
	r := weekly(lullv1alpha1.Saturday, lullv1alpha1.Sunday)
	r.Interval = 2
	s := sched("Europe/Berlin", "02:00", 4*time.Hour, r)
	s.Schedule.Anchor = anchor
	s.Schedule.Exclude = []lullv1alpha1.Exclusion{{StartDate: "2026-12-19", EndDate: "2027-01-03", Reason: "freeze"}}
	return MustCompile(s)
}

// instants spreads evaluation times over a year so the benchmark covers
// permitted, restricted and excluded states.
func instants(n int) []time.Time {
	base := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	out := make([]time.Time, n)
	for i := range out {
		out[i] = base.Add(time.Duration(i) * 7919 * time.Second)
	}
	return out
}

func evalLoop(b *testing.B, w *Window) []time.Duration {
	ts := instants(4096)
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		_ = w.Evaluate(ts[i%len(ts)])
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	return lat
}

func p99(lat []time.Duration) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat[len(lat)*99/100]
}

// BenchmarkEvaluateAnchor compares a window anchored in 1970 with one
// anchored yesterday, in the same run, and reports the ratio: the cost must
// not grow as the anchor recedes.
func BenchmarkEvaluateAnchor(b *testing.B) {
	var perOp [2]float64
	for i, anchor := range []string{"2026-05-31", "1970-01-03"} {
		name := map[int]string{0: "anchor=yesterday", 1: "anchor=1970"}[i]
		b.Run(name, func(b *testing.B) {
			lat := evalLoop(b, benchWindow(anchor))
			perOp[i] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(float64(p99(lat).Nanoseconds()), "p99-ns")
		})
	}
	if perOp[0] > 0 {
		fmt.Printf("BenchmarkEvaluateAnchor: 1970-anchor / yesterday-anchor = %.2fx (%.0f ns vs %.0f ns per evaluation)\n",
			perOp[1]/perOp[0], perOp[1], perOp[0])
	}
}

// BenchmarkEvaluate1000Windows evaluates a set of 1,000 different windows
// for one node at one instant (the most restrictive wins).
func BenchmarkEvaluate1000Windows(b *testing.B) {
	ws := make([]*Window, 1000)
	days := []lullv1alpha1.Weekday{lullv1alpha1.Monday, lullv1alpha1.Tuesday, lullv1alpha1.Wednesday, lullv1alpha1.Thursday, lullv1alpha1.Friday, lullv1alpha1.Saturday, lullv1alpha1.Sunday}
	zones := []string{"UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Australia/Sydney"}
	for i := range ws {
		s := sched(zones[i%len(zones)], fmt.Sprintf("%02d:%02d", i%24, (i*7)%60), time.Duration(1+i%6)*time.Hour, weekly(days[i%7], days[(i+3)%7]))
		ws[i] = MustCompile(s)
	}
	ts := instants(512)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now := ts[i%len(ts)]
		for _, w := range ws {
			_ = w.Evaluate(now)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/window")
}

func BenchmarkCompile(b *testing.B) {
	r := weekly(lullv1alpha1.Saturday)
	spec := &lullv1alpha1.MaintenanceWindowSpec{Schedule: &lullv1alpha1.Schedule{TimeZone: "Europe/Berlin", StartTime: "02:00",
		Duration: lullv1alpha1.Duration{Duration: time.Hour}, Recurrence: r}}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Compile(spec, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
