package policy

import (
	"slices"
	"strings"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// NodeCriticalUnits are the systemd units whose restart disrupts every pod
// on the node: the kubelet and the container runtimes, the mounts pods'
// volumes and the kubelet's directories live on, the network daemons that
// carry pod traffic, and the bus they all talk through. "*" matches any
// characters. The admission guard refuses a RestartService of these in a
// rule that does not drain (its list, lull-admission's criticalUnits, is
// configurable and defaults to this one; see docs/security.md); a plan
// that has one anyway drains the node first, as for a reboot.
var NodeCriticalUnits = []string{
	"kubelet.service", "containerd.service", "crio.service", "docker.service", "cri-docker.service",
	"*.mount", "*.automount", "*.swap",
	"NetworkManager.service", "systemd-networkd.service", "networking.service", "network.service", "wicked.service",
	"nftables.service", "firewalld.service", "iptables.service", "ip6tables.service",
	"dbus.service", "dbus-broker.service",
	// storage: their restart logs out the sessions pods' volumes use
	"open-iscsi.service", "iscsid.service", "multipathd.service",
	// a socket's restart stops the service bound to it
	"docker.socket", "containerd.socket", "dbus.socket",
}

// HostActionUnits are the services that take the node down when started:
// they reboot, power off, halt, kexec, exit the service manager (which
// powers a machine off) or put the machine to sleep. Restarting one is a
// host action in disguise; systemd targets and slices are too (see
// HostActionUnit).
var HostActionUnits = []string{
	"systemd-reboot.service", "systemd-poweroff.service", "systemd-halt.service", "systemd-kexec.service",
	"systemd-soft-reboot.service", "systemd-exit.service",
	"systemd-suspend.service", "systemd-hibernate.service", "systemd-hybrid-sleep.service", "systemd-suspend-then-hibernate.service",
	"rescue.service", "emergency.service",
}

// ShutdownTargets are the targets that take the node down when started
// (or that only a machine going down reaches). A unit that pulls one in
// (Requires, Wants, BindsTo, Requisite, OnSuccess, OnFailure) takes the
// node down with it when started: lull-agent reads a unit's dependencies
// before it restarts or reloads it (agent/unitguard.go).
var ShutdownTargets = []string{
	"shutdown.target", "reboot.target", "poweroff.target", "halt.target", "kexec.target", "exit.target", "soft-reboot.target",
	"final.target", "umount.target", "ctrl-alt-del.target",
	"sleep.target", "suspend.target", "hibernate.target", "hybrid-sleep.target", "suspend-then-hibernate.target",
	"rescue.target", "emergency.target",
}

// PullsNodeDown reports whether starting unit (a dependency of the unit
// being restarted) takes the node down: a shutdown target or a
// HostActionUnits service.
func PullsNodeDown(unit string) bool {
	unit = UnitName(unit)
	return slices.Contains(ShutdownTargets, unit) || slices.Contains(HostActionUnits, unit)
}

// unitTypes are systemd's unit type suffixes.
var unitTypes = []string{"service", "socket", "device", "mount", "automount", "swap", "target", "path", "timer", "slice", "scope"}

// UnitName is a unit as systemd names it: without a type suffix it is a
// service ("chronyd" is chronyd.service), as systemctl reads it; spaces
// around it are not part of it. Every comparison of units goes through it,
// so two spellings of one unit are one unit.
func UnitName(unit string) string {
	unit = strings.TrimSpace(unit)
	if i := strings.LastIndexByte(unit, '.'); i > 0 && slices.Contains(unitTypes, unit[i+1:]) {
		return unit
	}
	return unit + ".service"
}

// unitMatches reports whether unit (as UnitName gives it) is named by
// pattern, a unit name in which "*" matches any characters; a pattern
// without a type suffix names a service, and "*" alone every unit. The
// admission guard reads criticalUnits the same way (its variable
// "critical", checked against this by TestGuardReadsCriticalUnitsAsThePlanners).
func unitMatches(pattern, unit string) bool {
	if strings.TrimSpace(pattern) == "*" {
		return true
	}
	pattern = UnitName(pattern)
	if !strings.Contains(pattern, "*") {
		return pattern == unit
	}
	parts := strings.Split(pattern, "*")
	if !strings.HasPrefix(unit, parts[0]) {
		return false
	}
	rest := unit[len(parts[0]):]
	for i, p := range parts[1:] {
		if i == len(parts)-2 {
			return strings.HasSuffix(rest, p) && len(rest) >= len(p)
		}
		j := strings.Index(rest, p)
		if j < 0 {
			return false
		}
		rest = rest[j+len(p):]
	}
	return true
}

// CriticalIn reports whether restarting unit disrupts the whole node, with
// critical the node-critical units (patterns, NodeCriticalUnits when nil):
// one of those, or a unit whose restart takes the node down
// (HostActionUnit). A unit without a suffix is a service, as systemctl
// reads it.
func CriticalIn(critical []string, unit string) bool {
	if HostActionUnit(unit) {
		return true
	}
	if critical == nil {
		critical = NodeCriticalUnits
	}
	unit = UnitName(unit)
	return slices.ContainsFunc(critical, func(p string) bool { return unitMatches(p, unit) })
}

// NodeCritical is CriticalIn with the default list, NodeCriticalUnits.
func NodeCritical(unit string) bool { return CriticalIn(nil, unit) }

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
		if st.Type.Rank() > most.Rank() {
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
//
// The unit is judged by its canonical name (UnitName): "systemd-reboot" is
// systemd-reboot.service, as systemctl reads it. An alias of such a unit
// under another name is only known on the node: lull-agent reads the
// unit's identity there before it restarts anything (agent/systemd.go).
func HostActionUnit(unit string) bool {
	unit = UnitName(unit)
	if strings.HasSuffix(unit, ".target") || strings.HasSuffix(unit, ".slice") {
		return true
	}
	return slices.Contains(HostActionUnits, unit)
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
// that takes the node down (HostActionUnit, however it is spelled)
// reboots it instead, drained first.
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
		}
		if st.Type.NamesUnit() && HostActionUnit(st.Unit) {
			out = append(out, lullv1alpha1.Step{Type: lullv1alpha1.ActionDrain}, lullv1alpha1.Step{Type: lullv1alpha1.StepReboot})
			continue
		}
		out = append(out, st)
	}
	return out
}
