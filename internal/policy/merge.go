package policy

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// This file holds the merging of the steps the rules decided into a
// request's plan, in the canonical order.

// plan merges the steps each class's and each change's rule needs into
// the request's plan, in the catalog's order (api/v1alpha1/stepkinds.go):
// Cordon, Drain, WriteFiles, DaemonReload, service reloads (by unit),
// service restarts (by unit), Reboot, PowerOff. A Drain needs the node cordoned, and a Reboot or
// PowerOff needs it drained, so those are added with what needs them; a
// request that carries a configuration writes it (WriteFiles) before the
// steps that apply it. A Reboot makes daemon-reloads, reloads and restarts
// pointless, a PowerOff those and the Reboot, and a restart of a unit its
// reload: the step that covers them lists them. A step several classes or
// changes need is done once, with the longest timeout any of them gives; a
// unit is one unit however it is spelled ("chronyd", "chronyd.service").
// Writing a unit file or drop-in drains the node first: a unit runs
// anything as root, a reboot among it. The decision's action is the
// plan's most disruptive step, those added as needed included. critical
// are the node-critical units (nil: NodeCriticalUnits).
func plan(ds []decider, config string, critical []string) lullv1alpha1.Decision {
	p := &planner{d: lullv1alpha1.Decision{Action: lullv1alpha1.ActionNone}, steps: map[string]*lullv1alpha1.PlannedStep{}, counted: map[string]int{},
		critical: critical}
	for _, dc := range ds {
		p.decided(dc)
	}
	if config != "" {
		p.writeFiles(ds)
	}
	p.countMore()
	d := p.d
	if d.Rule == "" && len(ds) > 0 {
		d.Policy, d.Rule = ds[0].rule.Policy, ds[0].rule.Name
	}
	d.Steps = order(p.steps)
	for _, ps := range d.Steps {
		if ps.Type.Rank() > d.Action.Rank() {
			d.Action = ps.Type
		}
	}
	return d
}

// planner merges steps into a plan (see plan).
type planner struct {
	// d is the decision so far: its action, rule and drain options.
	d lullv1alpha1.Decision
	// steps are the steps needed, by label (lullv1alpha1.StepLabel).
	steps map[string]*lullv1alpha1.PlannedStep
	// counted is how many changes need each step, by label; a step lists
	// at most MaxStepChanges of them.
	counted map[string]int
	// critical are the node-critical units (nil: NodeCriticalUnits).
	critical []string
}

// stepKey is a step's key in the plan: its label, with the unit as
// systemd names it, so two spellings of one unit are one step.
func stepKey(t lullv1alpha1.DisruptionAction, unit string) string {
	if t.NamesUnit() && unit != "" {
		unit = UnitName(unit)
	}
	return lullv1alpha1.StepLabel(t, unit)
}

// need adds the step t (on unit) to the plan, needed by who (a class, or
// a change); it keeps the longest timeout a host step is given.
func (p *planner) need(t lullv1alpha1.DisruptionAction, unit string, timeout *lullv1alpha1.Duration, who string, change bool) {
	key := stepKey(t, unit)
	ps := p.steps[key]
	if ps == nil {
		ps = &lullv1alpha1.PlannedStep{Type: t, Unit: unit}
		p.steps[key] = ps
	}
	if change {
		if n := len(ps.Changes); n == 0 || ps.Changes[n-1] != who {
			p.counted[key]++
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

// decided adds the steps one rule decided, each with the steps it needs
// first, and takes the rule's drain options unless an earlier rule gave
// them.
func (p *planner) decided(dc decider) {
	r := dc.rule
	for _, st := range dc.steps {
		if st.Type == lullv1alpha1.ActionNone {
			continue
		}
		p.needFirst(st, dc)
		p.need(st.Type, st.Unit, st.Timeout, dc.who, dc.change)
		if st.Type.Rank() > p.d.Action.Rank() {
			p.d.Action, p.d.Policy, p.d.Rule = st.Type, r.Policy, r.Name
		}
	}
	if r.Drain != nil && p.d.Timeout == nil && p.d.Escalation == "" {
		// An unreadable timeout (stored before admission checked it)
		// is left out: the request then uses the drainer's.
		if r.Drain.Timeout != nil && r.Drain.Timeout.Err() == nil {
			t := *r.Drain.Timeout
			p.d.Timeout = &t
		}
		p.d.Escalation = r.Drain.Escalation
	}
}

// needFirst adds what the step st needs done before it (the catalog's
// Cordons and Drains: a Drain needs the node cordoned, a Reboot or a
// PowerOff needs it drained), and a drain before a restart or reload of a
// node-critical unit.
func (p *planner) needFirst(st lullv1alpha1.Step, dc decider) {
	k, _ := st.Type.Kind()
	// Restarting what runs the node's pods (or a target, such as
	// reboot.target) disrupts every pod on it: drained first, as a reboot
	// would be.
	drains := k.Drains || k.NamesUnit && CriticalIn(p.critical, st.Unit)
	if k.Cordons || drains {
		p.need(lullv1alpha1.ActionCordon, "", nil, dc.who, dc.change)
	}
	if drains && st.Type != lullv1alpha1.ActionDrain {
		p.need(lullv1alpha1.ActionDrain, "", nil, dc.who, dc.change)
	}
}

// writeFiles adds the WriteFiles step of a request that carries a
// configuration, needed by the changes of files and units. A unit file or
// drop-in written drains the node first, whatever its rule says: what a
// unit runs, it runs as root when systemd next reads it (ExecStartPre=
// systemctl reboot, SuccessAction=reboot-force), which no rule can see.
func (p *planner) writeFiles(ds []decider) {
	ws := &lullv1alpha1.PlannedStep{Type: lullv1alpha1.StepWriteFiles, Unit: ""}
	p.steps[string(lullv1alpha1.StepWriteFiles)] = ws
	for _, dc := range ds {
		unit := dc.change && (strings.HasPrefix(dc.who, string(lullv1alpha1.ChangeUnit)+" ") || systemdFile(dc.who))
		if unit {
			p.need(lullv1alpha1.ActionCordon, "", nil, dc.who, true)
			p.need(lullv1alpha1.ActionDrain, "", nil, dc.who, true)
		}
		if unit || dc.change && strings.HasPrefix(dc.who, string(lullv1alpha1.ChangeFile)+" ") {
			p.counted[string(lullv1alpha1.StepWriteFiles)]++
			if len(ws.Changes) < lullv1alpha1.MaxStepChanges {
				ws.Changes = append(ws.Changes, dc.who)
			}
		}
	}
	if lullv1alpha1.StepWriteFiles.Rank() > p.d.Action.Rank() {
		p.d.Action = lullv1alpha1.StepWriteFiles
	}
}

// countMore ends the changes of a step needed by more than it lists with
// how many more.
func (p *planner) countMore() {
	for key, n := range p.counted {
		if ps := p.steps[key]; n > len(ps.Changes) {
			ps.Changes = append(ps.Changes, fmt.Sprintf("and %d more", n-len(ps.Changes)))
		}
	}
}

// order lays the steps out in the catalog's order (by unit within one
// kind), folding into the plan's last step that takes the node down (a
// PowerOff, else a Reboot) the steps it makes pointless, and a reload of a
// unit the plan restarts into the restart; it defaults host steps'
// timeouts. Every step is either laid out or listed in the covers of one
// that is: a kind is never dropped (TestOrderKeepsEveryKind).
func order(steps map[string]*lullv1alpha1.PlannedStep) []lullv1alpha1.PlannedStep {
	all := make([]*lullv1alpha1.PlannedStep, 0, len(steps))
	for _, ps := range steps {
		all = append(all, ps)
	}
	sort.Slice(all, func(i, j int) bool {
		oi, oj := kindOrder(all[i].Type), kindOrder(all[j].Type)
		if oi != oj {
			return oi < oj
		}
		return all[i].Unit < all[j].Unit
	})
	var last *lullv1alpha1.PlannedStep
	restarts := map[string]*lullv1alpha1.PlannedStep{}
	for _, ps := range all {
		if ps.Type.TakesNodeDown() {
			last = ps
		}
		if ps.Type == lullv1alpha1.StepRestartService {
			restarts[UnitName(ps.Unit)] = ps
		}
	}
	// Where each step goes first, then the layout: a step is copied into
	// the plan once its covers are complete.
	kept := make([]*lullv1alpha1.PlannedStep, 0, len(all))
	for _, ps := range all {
		k, _ := ps.Type.Kind()
		switch {
		case last != nil && ps != last && k.Pointless:
			last.Covers = append(last.Covers, covered(ps))
		case last == nil && ps.Type == lullv1alpha1.StepReloadService && restarts[UnitName(ps.Unit)] != nil:
			rs := restarts[UnitName(ps.Unit)]
			rs.Covers = append(rs.Covers, covered(ps))
		default:
			kept = append(kept, ps)
		}
	}
	out := make([]lullv1alpha1.PlannedStep, 0, len(kept))
	for _, ps := range kept {
		if ps.Type.HostStep() && ps.Timeout == nil {
			ps.Timeout = &lullv1alpha1.Duration{Duration: ps.Type.DefaultTimeout()}
		}
		out = append(out, *ps)
	}
	return out
}

// kindOrder is a step's place in a plan; a kind lull does not know goes
// last (it is kept, not dropped).
func kindOrder(t lullv1alpha1.DisruptionAction) int {
	if k, ok := t.Kind(); ok {
		return k.Order
	}
	return math.MaxInt
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

// systemdDirs are where systemd reads units, drop-ins, generators and its
// own configuration: a file written there runs as root like a unit.
var systemdDirs = []string{"/etc/systemd/", "/run/systemd/", "/usr/lib/systemd/", "/lib/systemd/", "/usr/local/lib/systemd/",
	"/etc/init.d/", "/etc/rc.d/", "/etc/rc.local"} // SysV scripts systemd turns into services

// systemdFile reports whether who is a change of a file under
// systemdDirs (a unit's file declared as a file, system.conf, a
// generator): it is drained for as a unit is.
func systemdFile(who string) bool {
	name, ok := strings.CutPrefix(who, string(lullv1alpha1.ChangeFile)+" ")
	return ok && slices.ContainsFunc(systemdDirs, func(d string) bool { return strings.HasPrefix(name, d) })
}
