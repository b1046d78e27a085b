package policy

import (
	"sort"
	"strings"
	"time"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// Default timeouts of the host steps (a rule's step may set its own).
const (
	DefaultRestartTimeout  = 5 * time.Minute
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
	return DefaultRestartTimeout
}

// NodeCriticalUnits are the systemd units whose restart disrupts every pod
// on the node: the kubelet and the container runtimes. The admission guard
// refuses a RestartService of these (its list is configurable, see
// docs/security.md); a plan that has one anyway drains the node first, as
// for a reboot.
var NodeCriticalUnits = []string{"kubelet.service", "containerd.service", "crio.service", "docker.service", "cri-docker.service"}

// NodeCritical reports whether restarting unit disrupts the whole node: a
// node-critical unit, or a systemd target (reboot.target, poweroff.target,
// multi-user.target... start or stop many units at once). A unit without
// a suffix is a service, as systemctl reads it.
func NodeCritical(unit string) bool {
	if strings.HasSuffix(unit, ".target") {
		return true
	}
	if !strings.Contains(unit, ".") {
		unit += ".service"
	}
	for _, u := range NodeCriticalUnits {
		if unit == u {
			return true
		}
	}
	return false
}

// rank orders steps by how disruptive they are, and so the plan's order
// (service restarts come after the drain; rank is only for Most).
var rank = map[lullv1alpha1.DisruptionAction]int{
	lullv1alpha1.ActionNone:         0,
	lullv1alpha1.StepRestartService: 1,
	lullv1alpha1.ActionCordon:       2,
	lullv1alpha1.ActionDrain:        3,
	lullv1alpha1.StepReboot:         4,
	lullv1alpha1.StepPowerOff:       5,
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
		out[i] = lullv1alpha1.StepLabel(st.Type, st.Unit)
	}
	return out
}

// plan merges the steps each class's rule needs into the request's plan,
// in the canonical order: Cordon, Drain, service restarts (by unit),
// Reboot, PowerOff. A Drain needs the node cordoned, and a Reboot or
// PowerOff needs it drained, so those are added with the classes that need
// them; a Reboot makes service restarts pointless and a PowerOff makes both
// pointless (the node stays down): the step that covers them lists them. A
// step several classes need is done once, with the longest timeout any of
// them gives.
func plan(classes []string, rules []*Rule) lullv1alpha1.Decision {
	d := lullv1alpha1.Decision{Action: lullv1alpha1.ActionNone}
	steps := map[string]*lullv1alpha1.PlannedStep{}
	need := func(t lullv1alpha1.DisruptionAction, unit string, timeout *lullv1alpha1.Duration, class string) {
		key := lullv1alpha1.StepLabel(t, unit)
		ps := steps[key]
		if ps == nil {
			ps = &lullv1alpha1.PlannedStep{Type: t, Unit: unit}
			steps[key] = ps
		}
		if n := len(ps.Classes); n == 0 || ps.Classes[n-1] != class {
			ps.Classes = append(ps.Classes, class)
		}
		if t.HostStep() && timeout != nil && timeout.Err() == nil && (ps.Timeout == nil || timeout.Duration > ps.Timeout.Duration) {
			ps.Timeout = &lullv1alpha1.Duration{Duration: timeout.Duration}
		}
	}
	for i, class := range classes {
		r := rules[i]
		d.Classes = append(d.Classes, lullv1alpha1.ClassDecision{Class: class, Policy: r.Policy, Rule: r.Name, Steps: labels(r.StepList())})
		for _, st := range r.StepList() {
			switch st.Type {
			case lullv1alpha1.ActionNone:
				continue
			case lullv1alpha1.StepReboot, lullv1alpha1.StepPowerOff:
				need(lullv1alpha1.ActionCordon, "", nil, class)
				need(lullv1alpha1.ActionDrain, "", nil, class)
			case lullv1alpha1.ActionDrain:
				need(lullv1alpha1.ActionCordon, "", nil, class)
			case lullv1alpha1.StepRestartService:
				if NodeCritical(st.Unit) {
					// Restarting what runs the node's pods (or a target,
					// such as reboot.target) disrupts every pod on it:
					// drained first, as a reboot would be.
					need(lullv1alpha1.ActionCordon, "", nil, class)
					need(lullv1alpha1.ActionDrain, "", nil, class)
				}
			}
			need(st.Type, st.Unit, st.Timeout, class)
			if rank[st.Type] > rank[d.Action] {
				d.Action, d.Policy, d.Rule = st.Type, r.Policy, r.Name
			}
		}
		if r.Drain != nil && d.Timeout == nil && d.Escalation == "" {
			// An unreadable timeout (stored before admission checked it)
			// is left out: the request then uses the drainer's.
			if r.Drain.Timeout != nil && r.Drain.Timeout.Err() == nil {
				t := *r.Drain.Timeout
				d.Timeout = &t
			}
			d.Escalation = r.Drain.Escalation
		}
	}
	if d.Action == lullv1alpha1.ActionNone && len(rules) > 0 {
		d.Policy, d.Rule = rules[0].Policy, rules[0].Name
	}
	d.Steps = order(steps)
	return d
}

// order lays the steps out in the canonical order, folding the steps a
// Reboot or PowerOff makes pointless into it, and defaults host steps'
// timeouts.
func order(steps map[string]*lullv1alpha1.PlannedStep) []lullv1alpha1.PlannedStep {
	var restarts []*lullv1alpha1.PlannedStep
	for _, ps := range steps {
		if ps.Type == lullv1alpha1.StepRestartService {
			restarts = append(restarts, ps)
		}
	}
	sort.Slice(restarts, func(i, j int) bool { return restarts[i].Unit < restarts[j].Unit })
	last := steps[string(lullv1alpha1.StepPowerOff)]
	if last == nil {
		last = steps[string(lullv1alpha1.StepReboot)]
	}
	var out []lullv1alpha1.PlannedStep
	add := func(ps *lullv1alpha1.PlannedStep) {
		if ps.Type.HostStep() && ps.Timeout == nil {
			ps.Timeout = &lullv1alpha1.Duration{Duration: DefaultTimeout(ps.Type)}
		}
		out = append(out, *ps)
	}
	for _, t := range []lullv1alpha1.DisruptionAction{lullv1alpha1.ActionCordon, lullv1alpha1.ActionDrain} {
		if ps := steps[string(t)]; ps != nil {
			add(ps)
		}
	}
	for _, ps := range restarts {
		if last != nil {
			last.Covers = append(last.Covers, covered(ps))
			continue
		}
		add(ps)
	}
	if rb := steps[string(lullv1alpha1.StepReboot)]; rb != nil {
		if last != rb {
			last.Covers = append(last.Covers, covered(rb))
		} else {
			add(rb)
		}
	}
	if po := steps[string(lullv1alpha1.StepPowerOff)]; po != nil {
		add(po)
	}
	return out
}

// covered names a step another makes pointless, with its classes.
func covered(ps *lullv1alpha1.PlannedStep) string {
	s := lullv1alpha1.StepLabel(ps.Type, ps.Unit)
	if len(ps.Classes) > 0 {
		s += " (" + strings.Join(ps.Classes, ", ") + ")"
	}
	return s
}

// Planned is the plan a recorded decision stands for: its steps; for a
// decision recorded before plans had steps, its action (Cordon; Cordon and
// Drain); for none, the built-in default's, Cordon and Drain. The drainer
// carries a request out by it and kubectl lull plan previews it.
func Planned(d *lullv1alpha1.Decision) []lullv1alpha1.PlannedStep {
	switch {
	case d == nil:
		return []lullv1alpha1.PlannedStep{{Type: lullv1alpha1.ActionCordon}, {Type: lullv1alpha1.ActionDrain}}
	case len(d.Steps) > 0:
		return d.Steps
	case d.Action == lullv1alpha1.ActionCordon:
		return []lullv1alpha1.PlannedStep{{Type: lullv1alpha1.ActionCordon}}
	case d.Action == lullv1alpha1.ActionDrain:
		return []lullv1alpha1.PlannedStep{{Type: lullv1alpha1.ActionCordon}, {Type: lullv1alpha1.ActionDrain}}
	}
	return nil
}

// Has reports whether the plan has a step of type t.
func Has(steps []lullv1alpha1.PlannedStep, t lullv1alpha1.DisruptionAction) bool {
	for _, st := range steps {
		if st.Type == t {
			return true
		}
	}
	return false
}

// TakesNodeDown reports whether steps reboot or power off the node: every
// pod on it stops, so the drain before must evict every evictable pod,
// whatever the request's podSelector says (a narrower drain would stop
// the other pods without their PodDisruptionBudgets being asked).
func TakesNodeDown(steps []lullv1alpha1.PlannedStep) bool {
	return Has(steps, lullv1alpha1.StepReboot) || Has(steps, lullv1alpha1.StepPowerOff)
}
