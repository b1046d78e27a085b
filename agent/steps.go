package agent

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/policy"
)

// The steps on systemd (RestartService, ReloadService, DaemonReload): each
// reads systemd's state before its command and, after it, until its effect
// is seen (settle). Reboot and PowerOff are issued as they are (Run).

// verifiable says why a step with command, whose effect the state command
// named flag reads, is not run: its command is empty (disabled), or the
// state command is (its effect could not be seen).
func verifiable(a lullv1alpha1.ActionStatus, command, flag, state string) error {
	if command == "" {
		return disabled(a)
	}
	if state == "" {
		return fmt.Errorf("%s cannot be verified on this agent (%s is empty), so it is not run", a.Type, flag)
	}
	return nil
}

// restart restarts the unit and sees that it happened: the unit's
// InvocationID, read before and after the command, changed, and the unit
// is active. A command that exits 0 without restarting the unit (a
// systemctl that ignored it, a wrapper that did nothing) fails the step,
// and the usual fallback applies.
func (c *Commands) restart(ctx context.Context, a lullv1alpha1.ActionStatus, changed []string) (string, error) {
	if err := verifiable(a, c.Restart, "--unit-state-command", c.UnitState); err != nil {
		return "", err
	}
	before, err := c.unitState(ctx, a, a.Unit)
	if err != nil {
		return "", fmt.Errorf("reading the state of unit %s before restarting it: %w", a.Unit, err)
	}
	if err := guardUnit(a, before); err != nil {
		return "", err
	}
	if err := c.guardDeps(ctx, a, before); err != nil {
		return "", err
	}
	if gone(before) && slices.ContainsFunc(changed, func(u string) bool { return policy.UnitName(u) == policy.UnitName(a.Unit) }) {
		// A unit the request removed (its file gone, systemd reloaded)
		// that no longer runs: what a restart would apply (its removal)
		// is done. A unit the request did not change and that does not
		// exist is a failed restart (a rule naming a unit the node lacks).
		return fmt.Sprintf("unit %s is gone (LoadState=%s) and not running: nothing to restart", a.Unit, before[propLoadState]), nil
	}
	// A oneshot's run may be seen only in the journal (journal.go): what
	// it says of the unit before the command, to tell a new run from an
	// old one.
	// systemd writes UNIT=<the unit's Id> in the journal, and a match is
	// exact: ask about the Id systemctl printed, not the spelling the
	// step used ("chronyd", an alias).
	oneshot, unitID := before[propType] == "oneshot", cmp.Or(before[propID], a.Unit)
	var ran unitRuns
	if oneshot {
		if ran, err = c.unitJournal(ctx, a, unitID); err != nil {
			return "", fmt.Errorf("before restarting oneshot unit %s: %w", a.Unit, err)
		}
	}
	out, err := c.run(ctx, a, c.Restart)
	if err != nil {
		return out, err
	}
	check := restartCheck{c: c, a: a, before: before, oneshot: oneshot, ran: ran}
	msg, err := settle(ctx, c, func() (restartSeen, error) {
		after, err := c.unitState(ctx, a, a.Unit)
		if err != nil {
			return restartSeen{}, fmt.Errorf("reading the state of unit %s after restarting it: %w", a.Unit, err)
		}
		var runs unitRuns
		if oneshot {
			if runs, err = c.unitJournal(ctx, a, unitID); err != nil {
				return restartSeen{}, fmt.Errorf("after restarting oneshot unit %s: %w", a.Unit, err)
			}
		}
		return restartSeen{after, runs}, nil
	}, check.judge)
	return verified(out, msg, err)
}

// restartSeen is what restart reads of its unit after the command: its
// state and, for a oneshot, what the journal says of its runs.
type restartSeen struct {
	p    props
	runs unitRuns
}

// restartCheck judges, for restart, whether the unit restarted: its state
// before the command, whether it is a oneshot, and (for a oneshot) its
// runs the journal showed before.
type restartCheck struct {
	c       *Commands
	a       lullv1alpha1.ActionStatus
	before  props
	oneshot bool
	ran     unitRuns
}

// judge is restart's verdict on s, what settle read after the command:
// a message when the restart is seen, an error when it failed or (final)
// was not seen in time, neither while it may still come.
func (r restartCheck) judge(s restartSeen, final bool) (string, error) {
	was := r.before[propInvocationID]
	after := s.p
	id, active := after[propInvocationID], after[propActiveState]
	restarted := id != "" && id != was
	if r.oneshot && !restarted && r.ran != nil {
		if msg, err := s.runs.ranAgain(r.a.Unit, r.ran); msg != "" || err != nil {
			return msg, err
		}
	}
	switch {
	case restarted && active == "active":
		return fmt.Sprintf("unit %s restarted (InvocationID %s, was %s) and active", r.a.Unit, id, orNone(was)), nil
	case r.ranAgainInactive(after):
		// A oneshot service without RemainAfterExit that something
		// keeps loaded (a target that wants it) is inactive once it
		// has run, and systemd clears its InvocationID: its state
		// changed since (it ran again) and it succeeded.
		return fmt.Sprintf("oneshot unit %s ran again (state changed at %s, was %s) and succeeded", r.a.Unit,
			after[propStateChange], orNone(r.before[propStateChange])), nil
	case restarted && active == "failed":
		return "", fmt.Errorf("unit %s was restarted (InvocationID %s) but failed", r.a.Unit, id)
	case !final:
		return "", nil
	}
	return "", r.notSeen(after, restarted)
}

// ranAgainInactive reports whether a oneshot unit, inactive after a
// successful run, shows a state change other than the one before the
// command.
func (r restartCheck) ranAgainInactive(after props) bool {
	return ranOnce(after) && after[propStateChange] != "" && after[propStateChange] != "0" && after[propStateChange] != r.before[propStateChange]
}

// notSeen is restart's error once settle's time is up and the restart was
// not seen (after: the unit's state read last): it did not restart, or
// restarted and is not active.
func (r restartCheck) notSeen(after props, restarted bool) error {
	id, active := after[propInvocationID], after[propActiveState]
	switch {
	case !restarted && r.oneshot && r.ran == nil:
		return fmt.Errorf("%s exited 0 but whether oneshot unit %s ran again cannot be seen: systemd unloads a oneshot that ran and that nothing references, "+
			"so its run is seen only in the journal, and --unit-journal-command is empty", r.c.Restart, r.a.Unit)
	case !restarted && r.oneshot:
		return fmt.Errorf("%s exited 0 but oneshot unit %s did not run again: neither its state (%s=%s, was %s) nor systemd's journal shows a new run; %s",
			r.c.Restart, r.a.Unit, propStateChange, orNone(after[propStateChange]), orNone(r.before[propStateChange]), chrootHint)
	case !restarted:
		return fmt.Errorf("%s exited 0 but did not restart unit %s: its InvocationID is still %s (%s); %s",
			r.c.Restart, r.a.Unit, orNone(id), active, chrootHint)
	}
	return fmt.Errorf("unit %s was restarted (InvocationID %s) but is %s, not active, %s after the command", r.a.Unit, id, active, r.c.settle())
}

// reload reloads the unit and sees that it happened: the unit went
// through reloading (its StateChangeTimestampMonotonic, read before and
// after the command, advanced), the reload succeeded (ReloadResult, when
// systemd reports it) and the unit is active again under the same
// InvocationID. A new InvocationID is a restart, not a reload (a reload
// command that restarts, or the unit restarted meanwhile): the step fails
// and says so, since what the reload was for (a unit that keeps running
// while it takes its new configuration) did not happen.
func (c *Commands) reload(ctx context.Context, a lullv1alpha1.ActionStatus) (string, error) {
	if err := verifiable(a, c.Reload, "--unit-state-command", c.UnitState); err != nil {
		return "", err
	}
	before, err := c.unitState(ctx, a, a.Unit)
	if err != nil {
		return "", fmt.Errorf("reading the state of unit %s before reloading it: %w", a.Unit, err)
	}
	if err := guardUnit(a, before); err != nil {
		return "", err
	}
	if err := c.guardDeps(ctx, a, before); err != nil {
		return "", err
	}
	since, err := before.timestamp(c.UnitState, propStateChange)
	if err != nil {
		return "", fmt.Errorf("reading the state of unit %s before reloading it: %w (a reload is seen by the unit's state changing)", a.Unit, err)
	}
	w := &unitReloadWatch{c: c, a: a, since: since, was: before[propInvocationID]}
	out, err := c.run(ctx, a, c.Reload)
	if err != nil {
		return out, err
	}
	msg, err := settle(ctx, c, func() (unitReloadSeen, error) { return w.read(ctx) }, w.judge)
	return verified(out, msg, err)
}

// unitReloadWatch sees a reload's effect on its unit: since is the unit's
// StateChangeTimestampMonotonic and was its InvocationID before the
// command.
type unitReloadWatch struct {
	c     *Commands
	a     lullv1alpha1.ActionStatus
	since uint64
	was   string
}

// unitReloadSeen is what a read of the unit after the command saw: its
// properties, and its StateChangeTimestampMonotonic.
type unitReloadSeen struct {
	p       props
	changed uint64
}

// read reads the unit's state after the command.
func (w *unitReloadWatch) read(ctx context.Context) (unitReloadSeen, error) {
	after, err := w.c.unitState(ctx, w.a, w.a.Unit)
	if err != nil {
		return unitReloadSeen{}, fmt.Errorf("reading the state of unit %s after reloading it: %w", w.a.Unit, err)
	}
	changed, err := after.timestamp(w.c.UnitState, propStateChange)
	if err != nil {
		return unitReloadSeen{}, fmt.Errorf("reading the state of unit %s after reloading it: %w", w.a.Unit, err)
	}
	return unitReloadSeen{after, changed}, nil
}

// judge says whether what was seen is the reload done (a message), failed
// (an error) or not yet (neither; final: it must decide).
func (w *unitReloadWatch) judge(s unitReloadSeen, final bool) (string, error) {
	unit := w.a.Unit
	id, active := s.p[propInvocationID], s.p[propActiveState]
	result, hasResult := s.p[propReloadResult]
	reloaded := s.changed > w.since
	switch {
	case id != w.was:
		return "", fmt.Errorf("unit %s was restarted, not reloaded: its InvocationID is %s, was %s (%s)", unit, orNone(id), orNone(w.was), active)
	case reloaded && active == "failed":
		return "", fmt.Errorf("unit %s failed while reloading (ActiveState failed)", unit)
	case reloaded && active == "active" && hasResult && result != "success":
		return "", fmt.Errorf("unit %s went through a reload that failed: ReloadResult=%s (the unit is still active, InvocationID %s)", unit, result, orNone(id))
	case reloaded && active == "active":
		how := "ReloadResult success"
		if !hasResult {
			how = "no ReloadResult reported"
		}
		return fmt.Sprintf("unit %s reloaded (%s, InvocationID %s unchanged) and active", unit, how, orNone(id)), nil
	case !final:
		return "", nil
	case !reloaded:
		return "", fmt.Errorf("%s exited 0 but did not reload unit %s: it never went through reloading (%s still %d, ActiveState %s); %s",
			w.c.Reload, unit, propStateChange, s.changed, active, chrootHint)
	}
	return "", fmt.Errorf("unit %s went through a reload but is %s, not active, %s after the command", unit, active, w.c.settle())
}

// daemonReload has systemd load its unit files again and sees that it
// happened: systemd's UnitsLoadTimestampMonotonic, read before and after
// the command, advanced, and none of units (the request's changed units)
// reports NeedDaemonReload=yes, that is, systemd runs them from their
// unit files as they are on disk now.
func (c *Commands) daemonReload(ctx context.Context, a lullv1alpha1.ActionStatus, units []string) (string, error) {
	if err := verifiable(a, c.DaemonReload, "--manager-state-command", c.ManagerState); err != nil {
		return "", err
	}
	if len(units) > 0 && c.UnitState == "" {
		return "", fmt.Errorf("%s cannot be verified on this agent (--unit-state-command is empty: it says whether the changed units %s still need a daemon-reload), so it is not run",
			a.Type, listUnits(units))
	}
	before, err := c.managerState(ctx, a)
	if err != nil {
		return "", fmt.Errorf("reading systemd's state before the daemon-reload: %w", err)
	}
	out, err := c.run(ctx, a, c.DaemonReload)
	if err != nil {
		return out, err
	}
	w := &daemonReloadWatch{c: c, a: a, before: before, units: units, pending: units}
	msg, err := settle(ctx, c, func() (daemonReloadSeen, error) { return w.read(ctx) }, w.judge)
	return verified(out, msg, err)
}

// daemonReloadWatch sees a daemon-reload's effect: before is systemd's
// UnitsLoadTimestampMonotonic before the command, units the request's
// changed units.
type daemonReloadWatch struct {
	c      *Commands
	a      lullv1alpha1.ActionStatus
	before uint64
	units  []string
	// pending are the units not yet seen to need no daemon-reload since
	// systemd reloaded, with what they said last.
	pending []string
}

// daemonReloadSeen is what a read after the command saw: systemd's
// UnitsLoadTimestampMonotonic, the units that still need a daemon-reload
// and what each said (NeedDaemonReload).
type daemonReloadSeen struct {
	loaded  uint64
	pending []string
	need    map[string]string
}

// read reads systemd's state after the command and, once it has reloaded,
// that of each unit still pending.
func (w *daemonReloadWatch) read(ctx context.Context) (daemonReloadSeen, error) {
	loaded, err := w.c.managerState(ctx, w.a)
	if err != nil {
		return daemonReloadSeen{}, fmt.Errorf("reading systemd's state after the daemon-reload: %w", err)
	}
	s := daemonReloadSeen{loaded: loaded, pending: w.pending, need: map[string]string{}}
	if loaded <= w.before {
		return s, nil
	}
	s.pending = nil
	for _, u := range w.pending {
		p, err := w.c.unitState(ctx, w.a, u)
		if err != nil {
			return s, fmt.Errorf("reading the state of unit %s after the daemon-reload: %w", u, err)
		}
		need, ok := p[propNeedDaemonReload]
		if !ok {
			return s, fmt.Errorf("%s printed no %s for unit %s, so whether it still needs a daemon-reload cannot be seen", w.c.UnitState, propNeedDaemonReload, u)
		}
		if need != "no" {
			s.pending, s.need[u] = append(s.pending, u), need
		}
	}
	w.pending = s.pending
	return s, nil
}

// judge says whether what was seen is the daemon-reload done (a message),
// failed (an error) or not yet (neither; final: it must decide).
func (w *daemonReloadWatch) judge(s daemonReloadSeen, final bool) (string, error) {
	reloaded := s.loaded > w.before
	switch {
	case reloaded && len(s.pending) == 0:
		msg := fmt.Sprintf("systemd reloaded its units (%s %d, was %d)", propUnitsLoad, s.loaded, w.before)
		if len(w.units) == 0 {
			return msg + "; the request changes no unit", nil
		}
		return fmt.Sprintf("%s; no changed unit needs a daemon-reload (%s)", msg, listUnits(w.units)), nil
	case !final:
		return "", nil
	case !reloaded:
		return "", fmt.Errorf("%s exited 0 but systemd did not reload its units: %s is %d, was %d before the command; %s",
			w.c.DaemonReload, propUnitsLoad, s.loaded, w.before, chrootHint)
	}
	return "", fmt.Errorf("systemd reloaded its units (%s %d, was %d), but %s after the command these still need a daemon-reload: %s (a unit file changed again after the reload?)",
		propUnitsLoad, s.loaded, w.before, w.c.settle(), listUnits(s.still()))
}

// still names the units that still need a daemon-reload, with what each
// said.
func (s daemonReloadSeen) still() []string {
	still := make([]string, len(s.pending))
	for i, u := range s.pending {
		still[i] = fmt.Sprintf("%s (%s=%s)", u, propNeedDaemonReload, orNone(s.need[u]))
	}
	return still
}

// chrootHint is why a systemctl that exited 0 may have done nothing.
const chrootHint = "a systemctl that takes itself for being in a chroot ignores the command and exits 0"
