package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestPhasesListsTheEnum: Phases, which the metrics and the controllers
// enumerate, names exactly the phases the CRD's enum admits: every phase
// has its row in the lifecycle table.
func TestPhasesListsTheEnum(t *testing.T) {
	src, err := os.ReadFile("lifecycle.go")
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

// TestLifecycleCoversEveryPhase: each phase has exactly one row, and every
// row places its phase in a stage; the predicates agree with the stages.
func TestLifecycleCoversEveryPhase(t *testing.T) {
	seen := map[MaintenancePhase]int{}
	for _, row := range lifecycle {
		seen[row.phase]++
		if row.stage == 0 {
			t.Errorf("phase %s has no stage", row.phase)
		}
	}
	for p, n := range seen {
		if n != 1 {
			t.Errorf("phase %s has %d rows in lifecycle", p, n)
		}
	}
	for _, p := range Phases {
		n := 0
		for _, in := range []bool{p.Waiting(), p.Disrupting(), p.Finished(), p == PhaseUncordoning} {
			if in {
				n++
			}
		}
		if n != 1 {
			t.Errorf("phase %s is in %d of waiting, disrupting, uncordoning, finished; want exactly one", p, n)
		}
		if p.Holding() && !p.Disrupting() {
			t.Errorf("phase %s holds the node without disrupting it", p)
		}
		if p.InLine() && !p.Waiting() {
			t.Errorf("phase %s is in a budget's line but not waiting", p)
		}
	}
	if !MaintenancePhase("").Waiting() || !MaintenancePhase("").InLine() || MaintenancePhase("").OrPending() != PhasePending {
		t.Error(`phase "" (not seen yet) must read as Pending`)
	}
	if MaintenancePhase("NoSuchPhase").Waiting() || MaintenancePhase("NoSuchPhase").Disrupting() {
		t.Error("an unknown phase must be in no stage")
	}
}

// TestFollowLabel: the rule by which a label request follows its label.
func TestFollowLabel(t *testing.T) {
	byLabel := func(class string, started, complete bool) *NodeMaintenance {
		nm := &NodeMaintenance{Spec: NodeMaintenanceSpec{Classes: []string{class}, Complete: complete}}
		nm.Annotations = map[string]string{RequestedByAnnotation: RequestedByLabel}
		if started {
			nm.Status.StartedAt = &metav1.Time{}
		}
		return nm
	}
	cli := byLabel("a", false, false)
	cli.Annotations[RequestedByAnnotation] = RequestedByCLI
	for _, c := range []struct {
		name     string
		nm       *NodeMaintenance
		value    string
		labelled bool
		want     LabelChange
	}{
		{"same class", byLabel("a", false, false), "a", true, LabelUnchanged},
		{"new class before start", byLabel("a", false, false), "b", true, LabelReclassed},
		{"new class after start", byLabel("a", true, false), "b", true, LabelUnchanged},
		{"label removed", byLabel("a", true, false), "", false, LabelRemoved},
		{"completing", byLabel("a", false, true), "", false, LabelUnchanged},
		{"not made from the label", cli, "", false, LabelUnchanged},
	} {
		if got := c.nm.FollowLabel(c.value, c.labelled); got != c.want {
			t.Errorf("%s: FollowLabel = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestPlan: a recorded decision's plan is its steps; no decision is the
// default's cordon and drain.
func TestPlan(t *testing.T) {
	cordon, drain := PlannedStep{Type: ActionCordon}, PlannedStep{Type: ActionDrain}
	reboot, restart := PlannedStep{Type: StepReboot}, PlannedStep{Type: StepRestartService, Unit: "chronyd"}
	for name, tc := range map[string]struct {
		d                  *Decision
		want               Plan
		drain, host, takes bool
	}{
		"no decision":       {nil, Plan{cordon, drain}, true, false, false},
		"steps":             {&Decision{Action: StepReboot, Steps: []PlannedStep{cordon, drain, reboot}}, Plan{cordon, drain, reboot}, true, true, true},
		"None":              {&Decision{Action: ActionNone}, nil, false, false, false},
		"restart, no drain": {&Decision{Action: StepRestartService, Steps: []PlannedStep{restart}}, Plan{restart}, false, true, false},
	} {
		got := tc.d.Plan()
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Plan() = %v, want %v", name, got, tc.want)
		}
		if got.Has(ActionDrain) != tc.drain || got.HostSteps() != tc.host || got.TakesNodeDown() != tc.takes {
			t.Errorf("%s: drain %v host %v takes the node down %v, want %v %v %v", name,
				got.Has(ActionDrain), got.HostSteps(), got.TakesNodeDown(), tc.drain, tc.host, tc.takes)
		}
	}
}
