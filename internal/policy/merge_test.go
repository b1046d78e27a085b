package policy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// A plan keeps every step it is given: laid out, or listed in the covers
// of a step that makes it pointless; a kind the catalog does not know
// (RunCommand, stored by a newer lull) is laid out last, not dropped.
func TestOrderKeepsEveryKind(t *testing.T) {
	for _, down := range []bool{false, true} {
		steps := map[string]*lullv1alpha1.PlannedStep{}
		for _, a := range append(lullv1alpha1.StepKinds(), "RunCommand") {
			if a == lullv1alpha1.ActionNone || (!down && a.TakesNodeDown()) {
				continue
			}
			unit := ""
			if a.NamesUnit() {
				unit = "chronyd"
			}
			steps[stepKey(a, unit)] = &lullv1alpha1.PlannedStep{Type: a, Unit: unit, Classes: []string{"c"}}
		}
		out := order(steps)
		seen := map[string]bool{}
		for _, ps := range out {
			seen[lullv1alpha1.StepLabel(ps.Type, ps.Unit)] = true
			for _, c := range ps.Covers {
				seen[strings.TrimSuffix(c, " (c)")] = true
			}
		}
		for _, ps := range steps {
			label := lullv1alpha1.StepLabel(ps.Type, ps.Unit)
			require.True(t, seen[label], "down=%v: step %s was dropped from the plan %+v", down, label, out)
		}
		require.Equal(t, lullv1alpha1.DisruptionAction("RunCommand"), out[len(out)-1].Type)
	}
}
