package window

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/util/intstr"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// The engine refuses what admission refuses, so a value stored before
// admission checked it makes the window invalid (and closed) with a
// message naming the field, and accepts the boundary values admission
// accepts.
func TestCompileChecksWhatAdmissionChecks(t *testing.T) {
	daily := &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}
	ok := func(mutate func(*lullv1alpha1.MaintenanceWindowSpec)) *lullv1alpha1.MaintenanceWindowSpec {
		s := sched("UTC", "02:00", time.Hour, daily)
		mutate(s)
		return s
	}
	for name, tc := range map[string]struct {
		spec *lullv1alpha1.MaintenanceWindowSpec
		want string // "" valid
	}{
		"minTimeRemaining soon": {ok(func(s *lullv1alpha1.MaintenanceWindowSpec) {
			s.MinTimeRemaining = &lullv1alpha1.Duration{Invalid: `"soon"`}
		}), `spec.minTimeRemaining: Invalid value: "\"soon\"": "soon" is not a Go duration`},
		"minTimeRemaining negative": {ok(func(s *lullv1alpha1.MaintenanceWindowSpec) {
			s.MinTimeRemaining = lullv1alpha1.NewDuration(-time.Second)
		}), "must be from 0s to 744h"},
		"minTimeRemaining 744h": {ok(func(s *lullv1alpha1.MaintenanceWindowSpec) {
			s.MinTimeRemaining = lullv1alpha1.NewDuration(744 * time.Hour)
		}), ""},
		"duration four hours": {ok(func(s *lullv1alpha1.MaintenanceWindowSpec) {
			s.Schedule.Duration = lullv1alpha1.Duration{Invalid: `"four hours"`}
		}), `spec.schedule.duration: Invalid value: "\"four hours\"": "four hours" is not a Go duration`},
		"maxUnavailable 150%": {ok(func(s *lullv1alpha1.MaintenanceWindowSpec) { s.MaxUnavailable = ptrTo(intstr.FromString("150%")) }), "spec.maxUnavailable"},
		"maxUnavailable -1":   {ok(func(s *lullv1alpha1.MaintenanceWindowSpec) { s.MaxUnavailable = ptrTo(intstr.FromInt32(-1)) }), "spec.maxUnavailable"},
		"maxUnavailable 0%":   {ok(func(s *lullv1alpha1.MaintenanceWindowSpec) { s.MaxUnavailable = ptrTo(intstr.FromString("0%")) }), ""},
		"maxUnavailable 0":    {ok(func(s *lullv1alpha1.MaintenanceWindowSpec) { s.MaxUnavailable = ptrTo(intstr.FromInt32(0)) }), ""},
		"maxUnavailable 100%": {ok(func(s *lullv1alpha1.MaintenanceWindowSpec) { s.MaxUnavailable = ptrTo(intstr.FromString("100%")) }), ""},
		"override Schedule": {ok(func(s *lullv1alpha1.MaintenanceWindowSpec) {
			s.Override = &lullv1alpha1.Override{Strategy: "Schedule"}
		}), `spec.override.strategy: Unsupported value: "Schedule"`},
		"anchor 2026-02-30": {ok(func(s *lullv1alpha1.MaintenanceWindowSpec) { s.Schedule.Anchor = "2026-02-30" }), "spec.schedule.anchor"},
		"anchor 2028-02-29": {ok(func(s *lullv1alpha1.MaintenanceWindowSpec) { s.Schedule.Anchor = "2028-02-29" }), ""},
	} {
		t.Run(name, func(t *testing.T) {
			errs := Validate(tc.spec)
			if tc.want == "" {
				assert.Empty(t, errs)
				return
			}
			assert.Contains(t, errs.ToAggregate().Error(), tc.want)
		})
	}
}

func ptrTo[T any](v T) *T { return &v }
