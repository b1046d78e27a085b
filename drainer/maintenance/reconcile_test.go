package maintenance

import (
	"testing"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// Every phase has a unit that carries it on, and a unit agrees with the
// lifecycle: a phase added without one fails here.
func TestEveryPhaseHasAUnit(t *testing.T) {
	for _, p := range lullv1alpha1.Phases {
		u := unitOf(p)
		if u == 0 {
			t.Errorf("phase %s has no unit", p)
		}
		if (u == unitGate) != p.Waiting() {
			t.Errorf("phase %s: unit %d, waiting %v", p, u, p.Waiting())
		}
		if p.Holding() && u != unitDrain && u != unitHold && u != unitAct && u != unitPoweredOff {
			t.Errorf("phase %s holds the node but its unit %d does not keep the hold", p, u)
		}
	}
	if unitOf("") != unitGate {
		t.Error(`a request not seen yet ("") goes through the gates`)
	}
}
