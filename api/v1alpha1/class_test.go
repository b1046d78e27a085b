package v1alpha1

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidateClass(t *testing.T) {
	for _, tc := range []struct {
		class string
		want  string // part of the error; "" for valid
	}{
		{class: "kernel-update"},
		{class: "fw_2.1"},
		{class: "a"},
		{class: strings.Repeat("a", MaxClassLength)},
		{class: "", want: "the maintenance class is empty"},
		{class: "Kernel_Update", want: `"Kernel_Update" is not a valid maintenance class: use lower-case letters`},
		{class: "-x", want: "starting and ending with a letter or digit"},
		{class: "x.", want: "starting and ending with a letter or digit"},
		{class: "a b", want: "is not a valid maintenance class"},
		{class: strings.Repeat("a", MaxClassLength+1), want: "longer than 63 characters"},
	} {
		err := ValidateClass(tc.class)
		if tc.want == "" {
			require.NoError(t, err, tc.class)
			continue
		}
		require.ErrorContains(t, err, tc.want, tc.class)
	}
}
