package integration

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/windowcontroller"
	"lull.dev/lull/internal/window"
	"lull.dev/lull/test/framework"
)

func weekendWindow(name string) *lullv1alpha1.MaintenanceWindow {
	return &lullv1alpha1.MaintenanceWindow{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: lullv1alpha1.MaintenanceWindowSpec{
			Schedule: &lullv1alpha1.Schedule{
				TimeZone: "Europe/Berlin", StartTime: "02:00", Duration: lullv1alpha1.Duration{Duration: 4 * time.Hour},
				Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Weekly, DaysOfWeek: []lullv1alpha1.Weekday{lullv1alpha1.Saturday, lullv1alpha1.Sunday}},
			},
		},
	}
}

// TestWindowAdmission: structurally invalid windows are rejected by the API
// server with a message that says what to fix.
func TestWindowAdmission(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*lullv1alpha1.MaintenanceWindow)
		want   string
	}{
		{"weekly without days", func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Schedule.Recurrence.DaysOfWeek = nil }, "a Weekly recurrence needs daysOfWeek"},
		{"recurrence and rrule", func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Schedule.RRule = "FREQ=DAILY" }, "set exactly one of schedule.recurrence and schedule.rrule"},
		{"schedule strategy without schedule", func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Schedule = nil }, "strategy Schedule needs a schedule"},
		{"bad start time", func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Schedule.StartTime = "25:00" }, "spec.schedule.startTime"},
		{"zero duration", func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Schedule.Duration = lullv1alpha1.Duration{} }, "duration must be more than 0 and at most 744h"},
		{"bad maxUnavailable", func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.MaxUnavailable = ptrIntStr(intstr.FromString("half")) }, "maxUnavailable must be a node count from 0 to 100000 or a percentage"},
		{"exclusion dates reversed", func(w *lullv1alpha1.MaintenanceWindow) {
			w.Spec.Schedule.Exclude = []lullv1alpha1.Exclusion{{StartDate: "2026-12-31", EndDate: "2026-12-01"}}
		}, "exclusion endDate must not be before startDate"},
		{"exclusion mixing dates and instants", func(w *lullv1alpha1.MaintenanceWindow) {
			w.Spec.Schedule.Exclude = []lullv1alpha1.Exclusion{{StartDate: "2026-12-01", End: &metav1.Time{Time: time.Now()}}}
		}, "an exclusion needs either startDate and endDate"},
		{"sixth Monday", func(w *lullv1alpha1.MaintenanceWindow) {
			w.Spec.Schedule.Recurrence = &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Monthly, Weekdays: []lullv1alpha1.OrdinalWeekday{{Ordinal: 6, Day: lullv1alpha1.Monday}}}
		}, "ordinal must be 1..5 or -5..-1"},
		{"unknown strategy", func(w *lullv1alpha1.MaintenanceWindow) { w.Spec.Strategy = "Sometimes" }, `Unsupported value: "Sometimes"`},
		{"override without expiry", func(w *lullv1alpha1.MaintenanceWindow) {
			w.Spec.Override = &lullv1alpha1.Override{Strategy: lullv1alpha1.OverridePermissive}
		}, "spec.override.until"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := weekendWindow("invalid-" + string(rune('a'+i)))
			tc.mutate(w)
			err := cp.Client.Create(t.Context(), w)
			require.Error(t, err, "must be rejected at admission")
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func ptrIntStr(v intstr.IntOrString) *intstr.IntOrString { return &v }

// TestWindowStatusController drives a window through a transition with a
// fake clock, and reports an unknown zone as Ready=False.
func TestWindowStatusController(t *testing.T) {
	// Friday 2026-11-27 12:00 UTC; the window opens Saturday 02:00 Berlin = 01:00 UTC.
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	wake := make(chan event.GenericEvent, 1)
	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{Scheme: framework.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}})
	require.NoError(t, err)
	require.NoError(t, (&windowcontroller.Reconciler{Client: mgr.GetClient(), Clock: clk, Metrics: windowcontroller.NewCollector(clk), Wake: wake}).SetupWithManager(mgr))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = mgr.Start(ctx) }()

	w := weekendWindow("weekend")
	require.NoError(t, cp.Client.Create(ctx, w))
	got := waitWindow(t, "weekend", func(w *lullv1alpha1.MaintenanceWindow) bool {
		return condStatus(w, windowcontroller.ConditionPermitted) == metav1.ConditionFalse && w.Status.Next != nil
	})
	require.Equal(t, time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC), got.Status.Next.Start.UTC())
	require.Equal(t, time.Date(2026, 11, 28, 5, 0, 0, 0, time.UTC), got.Status.Next.End.UTC())
	require.Equal(t, metav1.ConditionTrue, condStatus(got, windowcontroller.ConditionReady))
	require.NotEmpty(t, got.Status.Upcoming)

	clk.SetTime(time.Date(2026, 11, 28, 2, 0, 0, 0, time.UTC))
	wake <- event.GenericEvent{Object: w}
	got = waitWindow(t, "weekend", func(w *lullv1alpha1.MaintenanceWindow) bool {
		return condStatus(w, windowcontroller.ConditionPermitted) == metav1.ConditionTrue
	})
	require.Equal(t, lullv1alpha1.StatePermitted, got.Status.Current.State)
	require.Equal(t, time.Date(2026, 11, 28, 5, 0, 0, 0, time.UTC), got.Status.Current.Until.UTC())

	bad := weekendWindow("mars")
	bad.Spec.Schedule.TimeZone = "Mars/Olympus_Mons"
	require.NoError(t, cp.Client.Create(ctx, bad), "zone names are checked by the controller, not at admission")
	got = waitWindow(t, "mars", func(w *lullv1alpha1.MaintenanceWindow) bool {
		return condStatus(w, windowcontroller.ConditionReady) == metav1.ConditionFalse
	})
	ready := meta.FindStatusCondition(got.Status.Conditions, windowcontroller.ConditionReady)
	require.Contains(t, ready.Message, "unknown time zone")
	require.Equal(t, metav1.ConditionFalse, condStatus(got, windowcontroller.ConditionPermitted), "an invalid window is restrictive")
}

// TestWindowStatusTimes: through the API server, an always-open window's
// next start stays when the controller saw it open (not the last
// reconcile), and a schedule that never closes has no end.
func TestWindowStatusTimes(t *testing.T) {
	opened := time.Date(2026, 3, 12, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(opened)
	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{Scheme: framework.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	require.NoError(t, err)
	require.NoError(t, (&windowcontroller.Reconciler{Client: mgr.GetClient(), Clock: clk, Metrics: windowcontroller.NewCollector(clk)}).SetupWithManager(mgr))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = mgr.Start(ctx) }()

	always := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "always-open"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{Strategy: lullv1alpha1.StrategyPermissive}}
	daily := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "daily-24h"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{Schedule: &lullv1alpha1.Schedule{StartTime: "00:00",
			Duration: lullv1alpha1.Duration{Duration: 24 * time.Hour}, Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}}}}
	for _, w := range []*lullv1alpha1.MaintenanceWindow{always, daily} {
		require.NoError(t, cp.Client.Create(ctx, w))
		got := waitWindow(t, w.Name, func(w *lullv1alpha1.MaintenanceWindow) bool {
			return condStatus(w, windowcontroller.ConditionPermitted) == metav1.ConditionTrue && w.Status.Next != nil
		})
		require.Equal(t, opened, got.Status.Next.Start.UTC(), "%s: opened when the controller first saw it", w.Name)
		require.Nil(t, got.Status.Next.End, "%s never closes", w.Name)
		require.Nil(t, got.Status.Current.Until, "%s never closes", w.Name)
	}

	// An hour later a spec change that leaves them open (a budget) makes
	// the controller reconcile both again; observedGeneration shows it did.
	clk.Step(time.Hour)
	for _, name := range []string{always.Name, daily.Name} {
		var w lullv1alpha1.MaintenanceWindow
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: name}, &w))
		w.Spec.MaxUnavailable = ptrIntStr(intstr.FromInt32(2))
		require.NoError(t, cp.Client.Update(ctx, &w))
		got := waitWindow(t, name, func(mw *lullv1alpha1.MaintenanceWindow) bool {
			return mw.Status.ObservedGeneration == w.Generation && mw.Status.Next != nil
		})
		require.Equal(t, opened, got.Status.Next.Start.UTC(), "%s: the start must not follow the reconcile", name)
		require.Nil(t, got.Status.Next.End)
	}
}

func condStatus(w *lullv1alpha1.MaintenanceWindow, t string) metav1.ConditionStatus {
	if c := meta.FindStatusCondition(w.Status.Conditions, t); c != nil {
		return c.Status
	}
	return ""
}

func waitWindow(t *testing.T, name string, ok func(*lullv1alpha1.MaintenanceWindow) bool) *lullv1alpha1.MaintenanceWindow {
	t.Helper()
	var last lullv1alpha1.MaintenanceWindow
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := cp.Client.Get(ctx, client.ObjectKey{Name: name}, &last); err != nil {
			return false, nil
		}
		return ok(&last), nil
	})
	require.NoError(t, err, "window %s: last status %+v", name, last.Status)
	return &last
}

// TestRRuleAdmission: the API server refuses an RRULE whose grammar is
// wrong, or that uses a part lull refuses, with a message that says what
// to fix; the window engine checks the rest (ranges, the combinations RFC
// 5545 forbids) and makes such a window Ready=False. Admission is never
// stricter than the engine: every rule of the engine's corpus
// (internal/window/testdata/rrule: RFC 5545's examples, python-dateutil's tests
// and 400 random rules), and every rule below, is refused at admission
// only if the engine refuses it too.
func TestRRuleAdmission(t *testing.T) {
	refusals := map[string]string{
		"FREQ=WEEKLY;BYDAY=SAT,SUN":            "rrule must be NAME=VALUE parts separated by ';'",
		"FREQ=YEARLY;BYEASTER=0":               "rrule must be NAME=VALUE parts separated by ';'",
		"FREQ=WEEKLY;BYDAY=SA;":                "rrule must be NAME=VALUE parts separated by ';'",
		"FREQ=DAILY;UNTIL=2026-12-31":          "rrule must be NAME=VALUE parts separated by ';'",
		"FREQ=WEEKLY;INTERVAL=+2":              "rrule must be NAME=VALUE parts separated by ';'",
		"FREQ=MONTHLY;BYMONTHDAY=1, 15":        "rrule must be NAME=VALUE parts separated by ';'",
		"FREQ=WEEKLY BYDAY=SA":                 "rrule FREQ must be DAILY, WEEKLY, MONTHLY or YEARLY",
		"FREQ=FORTNIGHTLY":                     "rrule FREQ must be DAILY, WEEKLY, MONTHLY or YEARLY",
		"FREQ=HOURLY;INTERVAL=3":               "rrule FREQ must be DAILY, WEEKLY, MONTHLY or YEARLY: a window starts at most once a day",
		"RRULE:FREQ=minutely":                  "rrule FREQ must be DAILY, WEEKLY, MONTHLY or YEARLY",
		"FREQ=DAILY;BYHOUR=9":                  "rrule must not have BYHOUR, BYMINUTE, BYSECOND or DTSTART",
		"DTSTART=20260101T000000;FREQ=DAILY":   "rrule must not have BYHOUR, BYMINUTE, BYSECOND or DTSTART",
		"BYDAY=MO":                             "rrule needs FREQ",
		"":                                     "set exactly one of schedule.recurrence and schedule.rrule",
		" rrule:freq = monthly ; byday=-1fr  ": "",
		"FREQ=YEARLY;UNTIL=20261231t235900z":   "",
		"FREQ=MONTHLY;BYDAY=+1MO;BYSETPOS=+1":  "",
	}
	rules := map[string]bool{}
	for rule := range refusals {
		rules[rule] = true
	}
	for _, file := range []string{"rfc5545.json", "dateutil.json", "dateutil-random.json"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "internal", "window", "testdata", "rrule", file))
		require.NoError(t, err)
		var examples []struct {
			RRule string `json:"rrule"`
		}
		require.NoError(t, json.Unmarshal(data, &examples), file)
		for _, ex := range examples {
			rules[ex.RRule] = true
		}
	}
	engineRefused, admissionRefused := 0, 0
	for _, rule := range slices.Sorted(maps.Keys(rules)) {
		w := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "rrule"}, Spec: lullv1alpha1.MaintenanceWindowSpec{
			Strategy: lullv1alpha1.StrategySchedule,
			Schedule: &lullv1alpha1.Schedule{TimeZone: "UTC", StartTime: "02:00", Duration: lullv1alpha1.Duration{Duration: time.Hour}, RRule: rule}}}
		_, engineErr := window.Compile(&w.Spec, window.Options{})
		admissionErr := cp.Client.Create(t.Context(), w, client.DryRunAll)
		if engineErr != nil {
			engineRefused++
		}
		if admissionErr != nil {
			admissionRefused++
			require.Error(t, engineErr, "%q: refused at admission (%v) but the window engine accepts it", rule, admissionErr)
		}
		if want, ok := refusals[rule]; ok {
			if want == "" {
				require.NoError(t, admissionErr, "%q", rule)
				require.NoError(t, engineErr, "%q", rule)
				continue
			}
			require.Error(t, admissionErr, "%q: must be refused at admission", rule)
			require.Contains(t, admissionErr.Error(), want, "%q", rule)
		}
	}
	t.Logf("%d rules: the engine refuses %d, admission %d of them", len(rules), engineRefused, admissionRefused)
}
