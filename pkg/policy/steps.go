package policy

import (
	"fmt"
	"sort"
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

// plan merges the steps each class's and each change's rule needs into
// the request's plan, in the canonical order: Cordon, Drain, WriteFiles,
// DaemonReload, service reloads (by unit), service restarts (by unit),
// Reboot, PowerOff. A Drain needs the node cordoned, and a Reboot or
// PowerOff needs it drained, so those are added with what needs them; a
// request that carries a configuration writes it (WriteFiles) before the
// steps that apply it. A Reboot makes daemon-reloads, reloads and restarts
// pointless, a PowerOff those and the Reboot, and a restart of a unit its
// reload: the step that covers them lists them. A step several classes or
// changes need is done once, with the longest timeout any of them gives.
func plan(ds []decider, config string) lullv1alpha1.Decision {
	d := lullv1alpha1.Decision{Action: lullv1alpha1.ActionNone}
	steps := map[string]*lullv1alpha1.PlannedStep{}
	counted := map[string]int{}
	need := func(t lullv1alpha1.DisruptionAction, unit string, timeout *lullv1alpha1.Duration, who string, change bool) {
		key := lullv1alpha1.StepLabel(t, unit)
		ps := steps[key]
		if ps == nil {
			ps = &lullv1alpha1.PlannedStep{Type: t, Unit: unit}
			steps[key] = ps
		}
		if change {
			if n := len(ps.Changes); n == 0 || ps.Changes[n-1] != who {
				counted[key]++
				if len(ps.Changes) < lullv1alpha1.MaxStepChanges {
					ps.Changes = append(ps.Changes, who)
				}
			}
		} else if n := len(ps.Classes); n == 0 || ps.Classes[n-1] != who {
			ps.Classes = append(ps.Classes, who)
		}
		if t.HostStep() && timeout != nil && timeout.Err() == nil && (ps.Timeout == nil || timeout.Duration > ps.Timeout.Duration) {
			ps.Timeout = &lullv1alpha1.Duration{Duration: timeout.Duration}
		}
	}
	for _, dc := range ds {
		r := dc.rule
		for _, st := range dc.steps {
			switch st.Type {
			case lullv1alpha1.ActionNone:
				continue
			case lullv1alpha1.StepReboot, lullv1alpha1.StepPowerOff:
				need(lullv1alpha1.ActionCordon, "", nil, dc.who, dc.change)
				need(lullv1alpha1.ActionDrain, "", nil, dc.who, dc.change)
			case lullv1alpha1.ActionDrain:
				need(lullv1alpha1.ActionCordon, "", nil, dc.who, dc.change)
			case lullv1alpha1.StepRestartService:
				if NodeCritical(st.Unit) {
					// Restarting what runs the node's pods (or a target,
					// such as reboot.target) disrupts every pod on it:
					// drained first, as a reboot would be.
					need(lullv1alpha1.ActionCordon, "", nil, dc.who, dc.change)
					need(lullv1alpha1.ActionDrain, "", nil, dc.who, dc.change)
				}
			}
			need(st.Type, st.Unit, st.Timeout, dc.who, dc.change)
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
	if config != "" {
		ws := &lullv1alpha1.PlannedStep{Type: lullv1alpha1.StepWriteFiles, Unit: ""}
		steps[string(lullv1alpha1.StepWriteFiles)] = ws
		for _, dc := range ds {
			if dc.change && (strings.HasPrefix(dc.who, string(lullv1alpha1.ChangeFile)+" ") || strings.HasPrefix(dc.who, string(lullv1alpha1.ChangeUnit)+" ")) {
				counted[string(lullv1alpha1.StepWriteFiles)]++
				if len(ws.Changes) < lullv1alpha1.MaxStepChanges {
					ws.Changes = append(ws.Changes, dc.who)
				}
			}
		}
		if rank[lullv1alpha1.StepWriteFiles] > rank[d.Action] {
			d.Action = lullv1alpha1.StepWriteFiles
		}
	}
	for key, n := range counted {
		if ps := steps[key]; n > len(ps.Changes) {
			ps.Changes = append(ps.Changes, fmt.Sprintf("and %d more", n-len(ps.Changes)))
		}
	}
	if d.Rule == "" && len(ds) > 0 {
		d.Policy, d.Rule = ds[0].rule.Policy, ds[0].rule.Name
	}
	d.Steps = order(steps)
	return d
}

// order lays the steps out in the canonical order, folding the steps a
// Reboot or PowerOff (or a restart of the same unit) makes pointless into
// it, and defaults host steps' timeouts.
func order(steps map[string]*lullv1alpha1.PlannedStep) []lullv1alpha1.PlannedStep {
	byUnit := func(t lullv1alpha1.DisruptionAction) []*lullv1alpha1.PlannedStep {
		var out []*lullv1alpha1.PlannedStep
		for _, ps := range steps {
			if ps.Type == t {
				out = append(out, ps)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Unit < out[j].Unit })
		return out
	}
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
	for _, t := range []lullv1alpha1.DisruptionAction{lullv1alpha1.ActionCordon, lullv1alpha1.ActionDrain, lullv1alpha1.StepWriteFiles} {
		if ps := steps[string(t)]; ps != nil {
			add(ps)
		}
	}
	// What the node going down makes pointless, or a restart of the same
	// unit makes pointless for a reload.
	var pointless []*lullv1alpha1.PlannedStep
	if dr := steps[string(lullv1alpha1.StepDaemonReload)]; dr != nil {
		pointless = append(pointless, dr)
	}
	restarts := map[string]*lullv1alpha1.PlannedStep{}
	for _, rs := range byUnit(lullv1alpha1.StepRestartService) {
		restarts[UnitName(rs.Unit)] = rs
	}
	for _, ps := range byUnit(lullv1alpha1.StepReloadService) {
		if rs := restarts[UnitName(ps.Unit)]; rs != nil && last == nil {
			rs.Covers = append(rs.Covers, covered(ps))
			continue
		}
		pointless = append(pointless, ps)
	}
	pointless = append(pointless, byUnit(lullv1alpha1.StepRestartService)...)
	for _, ps := range pointless {
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

// covered names a step another makes pointless, with its classes, or
// with its changes when no class needs it.
func covered(ps *lullv1alpha1.PlannedStep) string {
	s := lullv1alpha1.StepLabel(ps.Type, ps.Unit)
	switch {
	case len(ps.Classes) > 0:
		s += " (" + strings.Join(ps.Classes, ", ") + ")"
	case len(ps.Changes) > 0:
		s += " (" + strings.Join(ps.Changes, ", ") + ")"
	}
	return s
}
