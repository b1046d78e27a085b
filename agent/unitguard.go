package agent

import (
	"fmt"
	"strings"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/pkg/policy"
)

// A restart is judged by what the unit is on the node, not by how the
// request spells it: before it restarts or reloads a unit, lull-agent
// reads the unit's identity and settings from systemd (UnitState) and
// refuses — the step fails, and the drainer falls back to a drained
// reboot — when starting it would take the node down: an Id or alias that
// is a target, a slice or a unit that reboots, powers off, exits or
// sleeps (pkg/policy.HostActionUnit); a dependency on a shutdown or sleep
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
var unitDeps = []string{"Requires", "Requisite", "Wants", "BindsTo", "OnSuccess", "OnFailure"}

// UnitGuardProperties are the properties the guard reads, for the
// unit-state command (options.go prints them with the rest).
var UnitGuardProperties = append(append([]string{propID, propNames}, unitActions...), unitDeps...)

// guardUnit returns why the step must not act on its unit, as systemd
// described it (p, the unit-state command's output before the step);
// nil when nothing in it takes the node down. A state command that does
// not say what the unit is (no Id) is refused: lull-agent cannot tell.
func guardUnit(a lullv1alpha1.ActionStatus, p props) error {
	refuse := func(why string) error {
		return fmt.Errorf("refusing to %s unit %s: %s, which takes the node down without a drain; the drainer falls back to a drained reboot",
			strings.ToLower(strings.TrimSuffix(string(a.Type), "Service")), a.Unit, why)
	}
	id := p[propID]
	if id == "" {
		return refuse("the unit-state command printed no Id (lull-agent cannot tell what the unit is; print " +
			strings.Join(UnitGuardProperties, ",") + " as systemctl show does)")
	}
	for _, name := range append([]string{id}, strings.Fields(p[propNames])...) {
		if policy.HostActionUnit(name) {
			return refuse(fmt.Sprintf("it is %s (a target, a slice, or a unit that reboots, powers off, exits or sleeps)", policy.UnitName(name)))
		}
	}
	for _, k := range unitActions {
		if v := p[k]; v != "" && v != "none" {
			return refuse(fmt.Sprintf("its %s is %s", k, v))
		}
	}
	for _, k := range unitDeps {
		for _, dep := range strings.Fields(p[k]) {
			if policy.PullsNodeDown(dep) {
				return refuse(fmt.Sprintf("its %s names %s", k, dep))
			}
		}
	}
	return nil
}
