package budget

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

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
		"0% freezes too":                 {ptr.To(intstr.FromString("0%")), 10, 0, false},
		"0% of no nodes":                 {ptr.To(intstr.FromString("0%")), 0, 0, false},
		"100% is every node":             {ptr.To(intstr.FromString("100%")), 7, 7, false},
		"percent rounds down, 99%":       {ptr.To(intstr.FromString("99%")), 7, 6, false},
		"1% of one node is one":          {ptr.To(intstr.FromString("1%")), 1, 1, false},
		"count above the nodes":          {ptr.To(intstr.FromInt32(50)), 3, 50, false},
		"garbage":                        {ptr.To(intstr.FromString("half")), 10, 0, true},
		"above 100%":                     {ptr.To(intstr.FromString("150%")), 10, 0, true},
		"negative count":                 {ptr.To(intstr.FromInt32(-1)), 10, 0, true},
		"negative percent":               {ptr.To(intstr.FromString("-5%")), 10, 0, true},
		"percent with a fraction":        {ptr.To(intstr.FromString("2.5%")), 10, 0, true},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := MaxUnavailable(&lullv1alpha1.MaintenanceWindow{Spec: lullv1alpha1.MaintenanceWindowSpec{MaxUnavailable: tc.v}}, tc.nodes)
			if tc.wantErr {
				assert.Error(t, err)
				return
			}
			assert.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestFrozen(t *testing.T) {
	mw := func(name string, v *intstr.IntOrString) *lullv1alpha1.MaintenanceWindow {
		w := &lullv1alpha1.MaintenanceWindow{Spec: lullv1alpha1.MaintenanceWindowSpec{MaxUnavailable: v}}
		w.Name = name
		return w
	}
	_, frozen := Frozen([]*lullv1alpha1.MaintenanceWindow{mw("default", nil), mw("two", ptr.To(intstr.FromInt32(2))), mw("five", ptr.To(intstr.FromString("5%")))})
	assert.False(t, frozen)
	msg, frozen := Frozen([]*lullv1alpha1.MaintenanceWindow{mw("open", nil), mw("freeze", ptr.To(intstr.FromString("0%")))})
	assert.True(t, frozen)
	assert.Equal(t, "window freeze is frozen: maxUnavailable 0% allows no node to be disrupted", msg)
	msg, frozen = Frozen([]*lullv1alpha1.MaintenanceWindow{mw("zero", ptr.To(intstr.FromInt32(0)))})
	assert.True(t, frozen)
	assert.Equal(t, "window zero is frozen: maxUnavailable 0 allows no node to be disrupted", msg)
}

func TestHolders(t *testing.T) {
	nm := func(node string, phase lullv1alpha1.MaintenancePhase, windows ...string) *lullv1alpha1.NodeMaintenance {
		return &lullv1alpha1.NodeMaintenance{Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: node},
			Status: lullv1alpha1.NodeMaintenanceStatus{Phase: phase, Windows: windows}}
	}
	all := []*lullv1alpha1.NodeMaintenance{
		nm("z", lullv1alpha1.PhaseDraining, "a", "b"), nm("y", lullv1alpha1.PhaseCordoning, "b"),
		nm("x", lullv1alpha1.PhaseWaitingForBudget, "a"), nm("w", lullv1alpha1.PhaseDrained),
		nm("v", lullv1alpha1.PhaseCompleted, "a"), nm("u", lullv1alpha1.PhaseDraining, "c"),
	}
	assert.Equal(t, []string{"z"}, Holders([]string{"a"}, slices.Values(all)))
	assert.Equal(t, []string{"y", "z"}, Holders([]string{"b"}, slices.Values(all)))
	assert.Equal(t, []string{"u", "y", "z"}, Holders([]string{"b", "c"}, slices.Values(all)))
	assert.Equal(t, []string{"w"}, Holders(Budgets(nil, false), slices.Values(all)), "the default budget: requests no window governs")
	assert.Equal(t, "m; held by a, b", WithHolders("m", []string{"a", "b"}))
	assert.Equal(t, "m", WithHolders("m", nil))
}
