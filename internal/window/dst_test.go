package window

import (
	"archive/zip"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// zoneNames lists every zone in the Go distribution's tz database, the same
// data time/tzdata embeds in our binaries.
func zoneNames(t *testing.T) []string {
	t.Helper()
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Skipf("go env GOROOT: %v", err)
	}
	zr, err := zip.OpenReader(filepath.Join(strings.TrimSpace(string(goroot)), "lib", "time", "zoneinfo.zip"))
	if err != nil {
		t.Skipf("tz database not found: %v", err)
	}
	defer zr.Close()
	var names []string
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/") || !strings.Contains(f.Name, "/") || strings.HasPrefix(f.Name, "Etc/") {
			continue
		}
		names = append(names, f.Name)
	}
	sort.Strings(names)
	return names
}

// transitions returns the instants in [from, to) at which loc's offset changes.
func transitions(loc *time.Location, from, to time.Time) []time.Time {
	var out []time.Time
	t := from
	for t.Before(to) {
		_, end := t.In(loc).ZoneBounds()
		if end.IsZero() || !end.Before(to) {
			break
		}
		_, o1 := end.Add(-time.Second).In(loc).Zone()
		_, o2 := end.In(loc).Zone()
		if o1 != o2 {
			out = append(out, end)
		}
		t = end
	}
	return out
}

// expectedStart computes, with nothing but the standard library's
// conversions, the instant a window starting at local y-m-d hh:mm begins:
// the earliest instant whose local wall clock is that time, or, when the
// wall time does not exist (spring-forward gap), the first instant after it.
func expectedStart(y int, m time.Month, d, hh, mm int, loc *time.Location) time.Time {
	want := time.Date(y, m, d, hh, mm, 0, 0, time.UTC)
	wallOf := func(t time.Time) time.Time {
		l := t.In(loc)
		return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), 0, 0, time.UTC)
	}
	guess := time.Date(y, m, d, hh, mm, 0, 0, loc)
	var best time.Time
	for delta := -4 * time.Hour; delta <= 4*time.Hour; delta += 15 * time.Minute {
		c := guess.Add(delta)
		if wallOf(c).Equal(want) && (best.IsZero() || c.Before(best)) {
			best = c
		}
	}
	if !best.IsZero() {
		return best.UTC()
	}
	for c := guess.Add(-4 * time.Hour).Truncate(time.Minute); ; c = c.Add(time.Minute) {
		if wallOf(c).After(want) {
			return c.UTC()
		}
	}
}

// TestDSTAllZones checks, for every zone and every offset transition from
// 2020 to 2040, daily windows whose start times lie around the transition:
// none is skipped or duplicated, they are in order, each lasts exactly its
// duration, and each starts where the independent computation says.
func TestDSTAllZones(t *testing.T) {
	from := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2040, 12, 31, 0, 0, 0, 0, time.UTC)
	zones, checked, trans := 0, 0, 0
	for _, name := range zoneNames(t) {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Errorf("LoadLocation(%s): %v", name, err)
			continue
		}
		ts := transitions(loc, from, to)
		if len(ts) == 0 {
			continue
		}
		zones++
		for _, tr := range ts {
			trans++
			_, before := tr.Add(-time.Second).In(loc).Zone()
			_, after := tr.In(loc).Zone()
			// Wall times just around the transition in both offsets.
			wallTimes := map[string]bool{}
			for _, off := range []int{before, after} {
				for _, dm := range []int{-90, -60, -30, -1, 0, 1, 30, 59, 60, 90} {
					w := tr.Add(time.Duration(off)*time.Second + time.Duration(dm)*time.Minute).UTC()
					wallTimes[fmt.Sprintf("%02d:%02d", w.Hour(), w.Minute())] = true
				}
			}
			local := tr.In(loc)
			day := dayOf(local.Year(), local.Month(), local.Day())
			for st := range wallTimes {
				checked++
				spec := &lullv1alpha1.MaintenanceWindowSpec{Schedule: &lullv1alpha1.Schedule{
					TimeZone: name, StartTime: st, Duration: lullv1alpha1.Duration{Duration: time.Hour},
					Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily},
				}}
				w, err := Compile(spec, Options{})
				if err != nil {
					t.Fatalf("%s %s: %v", name, st, err)
				}
				hh, mm, _ := parseHHMM(st)
				// Start the search well before the first expected window.
				y0, m0, d0 := civil(day - 2)
				search := expectedStart(y0, m0, d0, hh, mm, loc).Add(-time.Minute)
				got := w.Upcoming(search, 5)
				if len(got) != 5 {
					t.Errorf("%s start %s around %s: %d windows, want 5", name, st, tr, len(got))
					continue
				}
				for i, iv := range got {
					y, m, d := civil(day - 2 + i)
					want := expectedStart(y, m, d, hh, mm, loc)
					if !iv.Start.Equal(want) {
						t.Errorf("%s start %s on %04d-%02d-%02d (transition %s): got %s, want %s",
							name, st, y, m, d, tr.UTC(), iv.Start.UTC(), want)
					}
					if iv.End.Sub(iv.Start) != time.Hour {
						t.Errorf("%s start %s: window %v lasts %s, want 1h", name, st, iv, iv.End.Sub(iv.Start))
					}
					if i > 0 && !iv.Start.After(got[i-1].Start) {
						t.Errorf("%s start %s: windows out of order or duplicated: %v then %v", name, st, got[i-1], iv)
					}
				}
			}
		}
	}
	t.Logf("checked %d start times around %d transitions in %d zones", checked, trans, zones)
}
