package policy

import (
	"strings"
	"time"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// Default timeouts of the host steps (a rule's step may set its own).
const (
	DefaultHostStepTimeout = 5 * time.Minute
	DefaultRebootTimeout   = 15 * time.Minute
	DefaultPowerOffTimeout = 5 * time.Minute
)

// DefaultTimeout is the timeout of a host step that sets none.
func DefaultTimeout(t lullv1alpha1.DisruptionAction) time.Duration {
	switch t {
	case lullv1alpha1.StepReboot:
		return DefaultRebootTimeout
	case lullv1alpha1.StepPowerOff:
		return DefaultPowerOffTimeout
	}
	return DefaultHostStepTimeout
}

// NodeCriticalUnits are the systemd units whose restart disrupts every pod
// on the node: the kubelet and the container runtimes. The admission guard
// refuses a RestartService of these (its list is configurable, see
// docs/security.md); a plan that has one anyway drains the node first, as
// for a reboot.
var NodeCriticalUnits = []string{"kubelet.service", "containerd.service", "crio.service", "docker.service", "cri-docker.service"}

// UnitName is a unit as systemd names it: without a type suffix it is a
// service ("chronyd" is chronyd.service), as systemctl reads it.
func UnitName(unit string) string {
	if i := strings.LastIndexByte(unit, '.'); i > 0 {
		switch unit[i+1:] {
		case "service", "socket", "device", "mount", "automount", "swap", "target", "path", "timer", "slice", "scope":
			return unit
		}
	}
	return unit + ".service"
}

// NodeCritical reports whether restarting unit disrupts the whole node: a
// node-critical unit, or a systemd target (reboot.target, poweroff.target,
// multi-user.target... start or stop many units at once). A unit without
// a suffix is a service, as systemctl reads it.
func NodeCritical(unit string) bool {
	if strings.HasSuffix(unit, ".target") {
		return true
	}
	unit = UnitName(unit)
	for _, u := range NodeCriticalUnits {
		if unit == u {
			return true
		}
	}
	return false
}

// rank orders steps by how disruptive they are (only for Most and a
// decision's Action; the plan's order is canonical, see plan).
var rank = map[lullv1alpha1.DisruptionAction]int{
	lullv1alpha1.ActionNone:         0,
	lullv1alpha1.StepWriteFiles:     1,
	lullv1alpha1.StepDaemonReload:   2,
	lullv1alpha1.StepReloadService:  3,
	lullv1alpha1.StepRestartService: 4,
	lullv1alpha1.ActionCordon:       5,
	lullv1alpha1.ActionDrain:        6,
	lullv1alpha1.StepReboot:         7,
	lullv1alpha1.StepPowerOff:       8,
}

// StepList is the rule's steps: steps, or action as a one-step list.
func (r *Rule) StepList() []lullv1alpha1.Step {
	if len(r.Steps) > 0 {
		return r.Steps
	}
	if r.Action == "" {
		return nil
	}
	return []lullv1alpha1.Step{{Type: r.Action}}
}

// Most is the rule's most disruptive step.
func (r *Rule) Most() lullv1alpha1.DisruptionAction {
	most := lullv1alpha1.ActionNone
	for _, st := range r.StepList() {
		if rank[st.Type] > rank[most] {
			most = st.Type
		}
	}
	return most
}

func labels(steps []lullv1alpha1.Step) []string {
	out := make([]string, len(steps))
	for i, st := range steps {
		out[i] = stepLabel(st)
	}
	return out
}

// stepLabel is a rule's step as people write it; a unit step without a
// unit acts on the changed unit.
func stepLabel(st lullv1alpha1.Step) string {
	if st.Type.NamesUnit() && st.Unit == "" {
		return string(st.Type) + " (the changed unit)"
	}
	return lullv1alpha1.StepLabel(st.Type, st.Unit)
}

// HostActionUnit reports whether acting on unit takes the node down, or
// every unit in it: a systemd target or slice, or a unit that reboots or
// powers off. The admission guard refuses such a unit in a rule; a plan
// that meets one anyway (a changed unit a rule restarts) reboots instead.
func HostActionUnit(unit string) bool {
	switch {
	case strings.HasSuffix(unit, ".target"), strings.HasSuffix(unit, ".slice"):
		return true
	}
	switch unit {
	case "systemd-reboot.service", "systemd-poweroff.service", "systemd-halt.service", "systemd-kexec.service", "systemd-soft-reboot.service":
		return true
	}
	return false
}

// decider is what one rule decided: for a class (who is the class) or a
// change (who is the change), with its steps as carried out (a unit step
// without a unit acts on the changed unit).
type decider struct {
	who    string
	change bool
	rule   *Rule
	steps  []lullv1alpha1.Step
}

// resolve is a rule's steps for one change: a RestartService or
// ReloadService without a unit acts on the changed unit; one on a unit
// that takes the node down reboots it instead (drained first).
func resolve(r *Rule, c *lullv1alpha1.Change) []lullv1alpha1.Step {
	in := r.StepList()
	out := make([]lullv1alpha1.Step, 0, len(in))
	for _, st := range in {
		if st.Type.NamesUnit() && st.Unit == "" {
			if c == nil || c.Kind != lullv1alpha1.ChangeUnit {
				// Admission refuses this outside a units rule; should one
				// get through, the disruptive action.
				out = append(out, lullv1alpha1.Step{Type: lullv1alpha1.ActionDrain}, lullv1alpha1.Step{Type: lullv1alpha1.StepReboot})
				continue
			}
			st.Unit = c.Name
			if HostActionUnit(st.Unit) {
				out = append(out, lullv1alpha1.Step{Type: lullv1alpha1.ActionDrain}, lullv1alpha1.Step{Type: lullv1alpha1.StepReboot})
				continue
			}
		}
		out = append(out, st)
	}
	return out
}
