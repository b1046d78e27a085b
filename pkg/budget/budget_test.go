package budget

import (
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
		"garbage":                        {ptr.To(intstr.FromString("half")), 10, 0, true},
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
