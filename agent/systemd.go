package agent

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// What systemd says of its state, read with the UnitState and
// ManagerState commands (`systemctl show`): the before and after of the
// steps on systemd (steps.go).

// Property keys of `systemctl show` the steps read.
const (
	propInvocationID     = "InvocationID"
	propActiveState      = "ActiveState"
	propNeedDaemonReload = "NeedDaemonReload"
	propReloadResult     = "ReloadResult"
	propStateChange      = "StateChangeTimestampMonotonic"
	propUnitsLoad        = "UnitsLoadTimestampMonotonic"
	propType             = "Type"
	propResult           = "Result"
	propLoadState        = "LoadState"
)

// ranOnce reports whether a unit's state (after a restart) is a oneshot
// service that ran to its end successfully: Type=oneshot, inactive (no
// RemainAfterExit), Result=success. Such a unit is restarted when it ran
// again, not when it is active.
func ranOnce(p props) bool {
	return p[propType] == "oneshot" && p[propActiveState] == "inactive" && p[propResult] == "success"
}

// gone reports whether the unit no longer exists (its file removed and
// systemd reloaded: LoadState not-found) and does not run.
func gone(p props) bool {
	return p[propLoadState] == "not-found" && p[propActiveState] == "inactive"
}

// props is what a state command printed: `systemctl show`'s KEY=value
// lines, by key.
type props map[string]string

func parseProps(out string) props {
	p := props{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			p[k] = v
		}
	}
	return p
}

// timestamp is the monotonic timestamp key (microseconds since boot) in
// what command printed.
func (p props) timestamp(command, key string) (uint64, error) {
	v, ok := p[key]
	if !ok {
		return 0, fmt.Errorf("%s printed no %s", command, key)
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s printed %s=%q, not a number", command, key, v)
	}
	return n, nil
}

// unitState runs UnitState for unit and reads its output.
func (c *Commands) unitState(ctx context.Context, a lullv1alpha1.ActionStatus, unit string) (props, error) {
	out, err := c.output(ctx, a.Type, unit, c.UnitState)
	if err != nil {
		return nil, err
	}
	p := parseProps(out)
	if p[propActiveState] == "" {
		return p, fmt.Errorf("%s printed no ActiveState (want KEY=value lines with InvocationID and ActiveState, as systemctl show prints them): %q", c.UnitState, lastLine(out))
	}
	return p, nil
}

// managerState runs ManagerState and reads systemd's
// UnitsLoadTimestampMonotonic from its output.
func (c *Commands) managerState(ctx context.Context, a lullv1alpha1.ActionStatus) (uint64, error) {
	out, err := c.output(ctx, a.Type, a.Unit, c.ManagerState)
	if err != nil {
		return 0, err
	}
	n, err := parseProps(out).timestamp(c.ManagerState, propUnitsLoad)
	if err != nil {
		return 0, fmt.Errorf("%w (want a KEY=value line, as systemctl show prints it): %q", err, lastLine(out))
	}
	return n, nil
}
