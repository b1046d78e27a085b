package maintenance

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

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
