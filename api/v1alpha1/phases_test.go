package v1alpha1

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestPhasesListsTheEnum: Phases, which the metrics and the controllers
// enumerate, names exactly the phases the CRD's enum admits.
func TestPhasesListsTheEnum(t *testing.T) {
	src, err := os.ReadFile("nodemaintenance_types.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^// \+kubebuilder:validation:Enum=(.*)\ntype MaintenancePhase string`).FindSubmatch(src)
	if m == nil {
		t.Fatal("the MaintenancePhase enum marker is missing")
	}
	enum := strings.Split(string(m[1]), ";")
	if len(enum) != len(Phases) {
		t.Fatalf("enum has %d phases, Phases %d: %v vs %v", len(enum), len(Phases), enum, Phases)
	}
	seen := map[MaintenancePhase]bool{}
	for _, p := range Phases {
		seen[p] = true
	}
	for _, e := range enum {
		if !seen[MaintenancePhase(e)] {
			t.Errorf("phase %s is in the enum but not in Phases", e)
		}
	}
}
