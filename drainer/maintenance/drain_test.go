package maintenance

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

func TestWindowEndMostCautiousWins(t *testing.T) {
	w := func(p lullv1alpha1.WindowEndPolicy) *lullv1alpha1.MaintenanceWindow {
		return &lullv1alpha1.MaintenanceWindow{Spec: lullv1alpha1.MaintenanceWindowSpec{WindowEnd: p}}
	}
	for name, tc := range map[string]struct {
		ws   []*lullv1alpha1.MaintenanceWindow
		want lullv1alpha1.WindowEndPolicy
	}{
		"no window never pauses": {nil, lullv1alpha1.WindowEndContinue},
		"unset means Pause":      {[]*lullv1alpha1.MaintenanceWindow{w("")}, lullv1alpha1.WindowEndPause},
		"continue alone":         {[]*lullv1alpha1.MaintenanceWindow{w(lullv1alpha1.WindowEndContinue)}, lullv1alpha1.WindowEndContinue},
		"pause beats continue":   {[]*lullv1alpha1.MaintenanceWindow{w(lullv1alpha1.WindowEndContinue), w(lullv1alpha1.WindowEndPause)}, lullv1alpha1.WindowEndPause},
		"abort beats everything": {[]*lullv1alpha1.MaintenanceWindow{w(lullv1alpha1.WindowEndPause), w(lullv1alpha1.WindowEndAbort), w(lullv1alpha1.WindowEndContinue)}, lullv1alpha1.WindowEndAbort},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, windowEnd(tc.ws))
		})
	}
}

func TestMaxUnavailable(t *testing.T) {
	for name, tc := range map[string]struct {
		v       *intstr.IntOrString
		nodes   int
		want    int
		wantErr bool
	}{
		"default is one":                 {nil, 10, 1, false},
		"count":                          {ptr.To(intstr.FromInt32(3)), 10, 3, false},
		"zero freezes":                   {ptr.To(intstr.FromInt32(0)), 10, 0, false},
		"percent rounds down":            {ptr.To(intstr.FromString("25%")), 10, 2, false},
		"small percent still allows one": {ptr.To(intstr.FromString("5%")), 10, 1, false},
		"garbage":                        {ptr.To(intstr.FromString("half")), 10, 0, true},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := maxUnavailable(&lullv1alpha1.MaintenanceWindow{Spec: lullv1alpha1.MaintenanceWindowSpec{MaxUnavailable: tc.v}}, tc.nodes)
			if tc.wantErr {
				assert.Error(t, err)
				return
			}
			assert.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestRenewBookkeeping(t *testing.T) {
	var m memo
	now := t0()
	assert.True(t, m.renewDue("n", now, 20e9), "never renewed")
	m.renewed("n", now)
	assert.False(t, m.renewDue("n", now.Add(10e9), 20e9))
	assert.True(t, m.renewDue("n", now.Add(20e9), 20e9))
	m.forget("n")
	assert.True(t, m.renewDue("n", now, 20e9))
}

func t0() time.Time { return time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC) }
