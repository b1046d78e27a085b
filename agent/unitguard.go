package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/policy"
)

// A restart is judged by what the unit is on the node, not by how the
// request spells it: before it restarts or reloads a unit, lull-agent
// reads the unit's identity and settings from systemd (UnitState) and
// refuses — the step fails, and the drainer falls back to a drained
// reboot — when starting it would take the node down: an Id or alias that
// is a target, a slice or a unit that reboots, powers off, exits or
// sleeps (internal/policy.HostActionUnit); a dependency on a shutdown or sleep
// target or such a unit; or an action systemd takes on the unit's success,
// failure or timeout (SuccessAction=reboot-force, FailureAction=poweroff).
// The planner and the admission guard refuse what the name alone tells;
// an alias, a drop-in or a unit file written since is only known here.

// Property keys of `systemctl show` the guard reads.
const (
	propID    = "Id"
	propNames = "Names"
)

// unitActions are the properties naming what systemd does to the machine
// when the unit succeeds, fails or times out ("none" or empty: nothing).
var unitActions = []string{"SuccessAction", "FailureAction", "JobTimeoutAction", "StartLimitAction"}

// unitDeps are the properties naming units a start of the unit starts too.
var unitDeps = []string{"Requires", "Requisite", "Wants", "BindsTo", "Upholds", "OnSuccess", "OnFailure", "Triggers"}

// unitReach are the properties naming units a restart or start of the
// unit restarts or stops with it: those part of it or bound to it, and
// those it conflicts with. A node-critical unit among them (the kubelet,
// a runtime) is restarted or stopped without a drain.
var unitReach = []string{"ConsistsOf", "RequiredBy", "BoundBy", "PropagatesStopTo", "PropagatesReloadTo", "Conflicts"}

// unitCommands are the properties holding the commands a restart or
// reload runs. A command that reboots, powers off, halts, kexecs or
// isolates the machine (a heuristic on its words: a unit runs anything,
// and only what a unit file says, not what its programs do, is known
// here) is refused.
var unitCommands = []string{"ExecCondition", "ExecStartPre", "ExecStart", "ExecStartPost", "ExecReload", "ExecStop", "ExecStopPost"}

// UnitGuardProperties are the properties the guard reads, for the
// unit-state command (options.go prints them with the rest).
var UnitGuardProperties = slices.Concat([]string{propID, propNames}, unitActions, unitDeps, unitReach, unitCommands)

// downWords are the words of a command line that take the machine down.
var downWords = []string{"reboot", "poweroff", "halt", "kexec", "shutdown", "suspend", "hibernate", "hybrid-sleep",
	"suspend-then-hibernate", "isolate", "soft-reboot", "telinit"}

// guardUnit returns why the step must not act on its unit, as systemd
// described it (p, the unit-state command's output before the step);
// nil when nothing in it takes the node down. A state command that does
// not say what the unit is (no Id) is refused: lull-agent cannot tell.
func guardUnit(a lullv1alpha1.ActionStatus, p props) error {
	id := p[propID]
	if id == "" {
		return refusal(a, "the unit-state command printed no Id (lull-agent cannot tell what the unit is; print "+
			strings.Join(UnitGuardProperties, ",")+" as systemctl show does)")
	}
	for _, name := range append([]string{id}, strings.Fields(p[propNames])...) {
		if policy.HostActionUnit(name) {
			return refusal(a, fmt.Sprintf("it is %s (a target, a slice, or a unit that reboots, powers off, exits or sleeps)", policy.UnitName(name)))
		}
	}
	if err := guardOwn(a, p); err != nil {
		return err
	}
	for _, k := range unitDeps {
		for _, dep := range strings.Fields(p[k]) {
			if policy.PullsNodeDown(dep) {
				return refusal(a, fmt.Sprintf("its %s names %s", k, dep))
			}
		}
	}
	for _, k := range unitReach {
		for _, u := range strings.Fields(p[k]) {
			if name := policy.UnitName(u); strings.HasSuffix(name, ".target") || strings.HasSuffix(name, ".slice") {
				// A target or slice restarted or stopped with the unit
				// (multi-user.target requiring it; Conflicts=shutdown.target,
				// which every service has) runs nothing itself.
				continue
			}
			if policy.NodeCritical(u) {
				return refusal(a, fmt.Sprintf("its %s names %s, which a %s of it restarts or stops with it", k, u, strings.ToLower(string(a.Type))))
			}
		}
	}
	return nil
}

// guardOwn is the part of guardUnit that reads only what the unit is,
// does on success, failure or timeout, and runs.
func guardOwn(a lullv1alpha1.ActionStatus, p props) error {
	name := p[propID]
	for _, n := range append([]string{name}, strings.Fields(p[propNames])...) {
		if n != "" && policy.HostActionUnit(n) && !strings.HasSuffix(policy.UnitName(n), ".target") && !strings.HasSuffix(policy.UnitName(n), ".slice") {
			return refusal(a, fmt.Sprintf("%s is %s", orNone(name), policy.UnitName(n)))
		}
	}
	for _, k := range unitActions {
		if v := p[k]; v != "" && v != "none" {
			return refusal(a, fmt.Sprintf("%s's %s is %s", orNone(name), k, v))
		}
	}
	for _, k := range unitCommands {
		if w := downWord(p[k]); w != "" {
			return refusal(a, fmt.Sprintf("%s's %s runs %q", orNone(name), k, w))
		}
	}
	return nil
}

// downWord returns the first word of the command lines in v (systemctl
// show's "{ path=… ; argv[]=… ; … }" form, or plain) that takes the
// machine down; "" if none.
func downWord(v string) string {
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ' ' || r == ';' || r == '{' || r == '}' || r == '\t' }) {
		f = strings.Trim(strings.TrimPrefix(strings.TrimPrefix(f, "argv[]="), "path="), `"'`)
		base := f[strings.LastIndexByte(f, '/')+1:]
		if slices.Contains(downWords, base) || strings.Contains(f, "sysrq-trigger") ||
			(strings.Contains(base, ".") && policy.PullsNodeDown(base)) {
			return f
		}
	}
	return ""
}

// maxGuardedDeps bounds the units read through the dependencies; a unit
// that pulls in more is refused (fail closed), not waved through.
const maxGuardedDeps = 64

// guardDeps walks what a start of the step's unit starts too (unitDeps,
// transitively, targets included: starting a target starts what it
// wants) and refuses when one of those units would take the node down by
// what it is, does or runs, or by a dependency of its own on a shutdown
// target (guardOwn, and the dependency check of guardUnit). A unit
// already active is not started again, and neither are its
// dependencies: the walk stops there. Slices run nothing. More than
// maxGuardedDeps units to read is refused.
func (c *Commands) guardDeps(ctx context.Context, a lullv1alpha1.ActionStatus, p props) error {
	seen := map[string]bool{policy.UnitName(a.Unit): true}
	if id := p[propID]; id != "" {
		seen[policy.UnitName(id)] = true
	}
	type pulled struct{ unit, via string }
	queue := []pulled{}
	push := func(from props, via string) {
		for _, k := range unitDeps {
			for _, dep := range strings.Fields(from[k]) {
				if name := policy.UnitName(dep); !seen[name] && !strings.HasSuffix(name, ".slice") {
					seen[name] = true
					queue = append(queue, pulled{dep, via + " " + k + "=" + dep})
				}
			}
		}
	}
	push(p, a.Unit)
	for read := 0; len(queue) > 0; read++ {
		if read >= maxGuardedDeps {
			return fmt.Errorf("refusing to %s unit %s: a start of it pulls in more than %d units, more than lull-agent reads to see that none takes the node down; the drainer falls back to a drained reboot",
				strings.ToLower(strings.TrimSuffix(string(a.Type), "Service")), a.Unit, maxGuardedDeps)
		}
		d := queue[0]
		queue = queue[1:]
		dp, err := c.unitState(ctx, a, d.unit)
		if err != nil {
			return fmt.Errorf("reading unit %s, which %s of %s pulls in (%s): %w", d.unit, strings.ToLower(string(a.Type)), a.Unit, d.via, err)
		}
		if err := guardOwn(a, dp); err != nil {
			return fmt.Errorf("%w (pulled in: %s)", err, d.via)
		}
		if dp[propActiveState] == "active" {
			continue // a start of it is no job: nothing it pulls in starts
		}
		for _, k := range unitDeps {
			for _, dep := range strings.Fields(dp[k]) {
				if policy.PullsNodeDown(dep) {
					return fmt.Errorf("refusing to %s unit %s: it pulls in %s, whose %s names %s, which takes the node down without a drain; the drainer falls back to a drained reboot",
						strings.ToLower(strings.TrimSuffix(string(a.Type), "Service")), a.Unit, d.unit, k, dep)
				}
			}
		}
		push(dp, d.via)
	}
	return nil
}

// refusal is the error of a step the guard refuses: why its unit would
// take the node down, and what happens instead.
func refusal(a lullv1alpha1.ActionStatus, why string) error {
	return fmt.Errorf("refusing to %s unit %s: %s, which takes the node down without a drain; the drainer falls back to a drained reboot",
		strings.ToLower(strings.TrimSuffix(string(a.Type), "Service")), a.Unit, why)
}
