package policy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

func steps(name, class string, ss ...lullv1alpha1.Step) lullv1alpha1.DisruptionRule {
	return lullv1alpha1.DisruptionRule{Name: name, Class: class, Steps: ss}
}

func restart(unit string, timeout time.Duration) lullv1alpha1.Step {
	s := lullv1alpha1.Step{Type: lullv1alpha1.StepRestartService, Unit: unit}
	if timeout > 0 {
		s.Timeout = &lullv1alpha1.Duration{Duration: timeout}
	}
	return s
}

var (
	drainStep  = lullv1alpha1.Step{Type: lullv1alpha1.ActionDrain}
	rebootStep = lullv1alpha1.Step{Type: lullv1alpha1.StepReboot}
	offStep    = lullv1alpha1.Step{Type: lullv1alpha1.StepPowerOff}
)

// TestPlan: how the classes of a request merge into one plan.
func TestPlan(t *testing.T) {
	s := Merge([]lullv1alpha1.DisruptionPolicy{pol("p", 0,
		exact("ssh", "ssh-keys", lullv1alpha1.ActionNone),
		steps("chrony", "chrony-config", restart("chronyd", 0)),
		steps("chrony-slow", "chrony-slow", restart("chronyd", 20*time.Minute)),
		steps("sshd", "sshd-config", restart("sshd", time.Minute)),
		steps("runtime", "runtime-config", restart("containerd", 0)),
		steps("target", "sneaky", restart("reboot.target", 0)),
		steps("kernel", "kernel-update", drainStep, rebootStep),
		steps("reboot-only", "firmware", rebootStep),
		steps("hw", "hardware", drainStep, offStep),
		exact("cfg", "node-config", lullv1alpha1.ActionCordon),
		glob("gpu", "gpu-*", lullv1alpha1.ActionDrain),
	)})
	for _, tc := range []struct {
		name    string
		classes []string
		plan    string
		action  lullv1alpha1.DisruptionAction
		rule    string
		covers  []string // of the last step
	}{
		{"only None", []string{"ssh-keys"}, "nothing", lullv1alpha1.ActionNone, "p/ssh", nil},
		{"only restart", []string{"chrony-config"}, "RestartService chronyd", lullv1alpha1.StepRestartService, "p/chrony", nil},
		{"identical classes", []string{"chrony-config", "chrony-config"}, "RestartService chronyd", lullv1alpha1.StepRestartService, "p/chrony", nil},
		{"two restarts, by unit", []string{"sshd-config", "chrony-config"}, "RestartService chronyd, RestartService sshd", lullv1alpha1.StepRestartService, "p/sshd", nil},
		{"restart and reboot", []string{"chrony-config", "kernel-update"}, "Cordon, Drain, Reboot", lullv1alpha1.StepReboot, "p/kernel",
			[]string{"RestartService chronyd (chrony-config)"}},
		{"acceptance", []string{"ssh-keys", "chrony-config", "kernel-update"}, "Cordon, Drain, Reboot", lullv1alpha1.StepReboot, "p/kernel",
			[]string{"RestartService chronyd (chrony-config)"}},
		// The action is the plan's most disruptive step, the drain a
		// node-critical restart needs included.
		{"a node-critical unit is drained first", []string{"runtime-config"}, "Cordon, Drain, RestartService containerd", lullv1alpha1.ActionDrain, "p/runtime", nil},
		// Restarting a target is a reboot in disguise: a drained reboot.
		{"a target is a drained reboot", []string{"sneaky"}, "Cordon, Drain, Reboot", lullv1alpha1.StepReboot, "p/target", nil},
		{"reboot alone is drained first", []string{"firmware"}, "Cordon, Drain, Reboot", lullv1alpha1.StepReboot, "p/reboot-only", nil},
		{"power off covers reboot and restarts", []string{"kernel-update", "hardware", "sshd-config"}, "Cordon, Drain, PowerOff", lullv1alpha1.StepPowerOff, "p/hw",
			[]string{"RestartService sshd (sshd-config)", "Reboot (kernel-update)"}},
		{"cordon and restart", []string{"node-config", "chrony-config"}, "Cordon, RestartService chronyd", lullv1alpha1.ActionCordon, "p/cfg", nil},
		{"missing class: the built-in default", []string{"unknown"}, "Cordon, Drain", lullv1alpha1.ActionDrain, lullv1alpha1.DefaultRuleName, nil},
		{"pattern and restart", []string{"gpu-fw", "chrony-config"}, "Cordon, Drain, RestartService chronyd", lullv1alpha1.ActionDrain, "p/gpu", nil},
		{"no class", nil, "nothing", lullv1alpha1.ActionNone, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := s.Decide(tc.classes, nil)
			require.Equal(t, tc.plan, StepsLine(d.Steps))
			require.Equal(t, tc.action, d.Action)
			require.Equal(t, tc.rule, d.RuleRef())
			require.Len(t, d.Classes, len(tc.classes))
			if n := len(d.Steps); n > 0 {
				require.Equal(t, tc.covers, d.Steps[n-1].Covers)
			}
		})
	}
}

// Host steps get their timeouts: the longest any class gives, else the
// default; each step names the classes that need it.
func TestPlanTimeoutsAndClasses(t *testing.T) {
	s := Merge([]lullv1alpha1.DisruptionPolicy{pol("p", 0,
		steps("chrony", "chrony-config", restart("chronyd", 0)),
		steps("chrony-slow", "chrony-slow", restart("chronyd", 20*time.Minute)),
		steps("kernel", "kernel-update", drainStep, rebootStep),
	)})
	d := s.Decide([]string{"chrony-config", "chrony-slow"}, nil)
	require.Len(t, d.Steps, 1)
	require.Equal(t, 20*time.Minute, d.Steps[0].Timeout.Duration, "the longest")
	require.Equal(t, []string{"chrony-config", "chrony-slow"}, d.Steps[0].Classes)

	d = s.Decide([]string{"chrony-config"}, nil)
	require.Equal(t, lullv1alpha1.DefaultHostStepTimeout, d.Steps[0].Timeout.Duration)

	d = s.Decide([]string{"kernel-update"}, nil)
	require.Nil(t, d.Steps[0].Timeout, "cordon has no timeout")
	require.Equal(t, lullv1alpha1.DefaultRebootTimeout, d.Steps[2].Timeout.Duration)
	require.Equal(t, []string{"kernel-update"}, d.Steps[0].Classes, "the reboot's class needs the cordon")
}

func TestNodeCritical(t *testing.T) {
	for unit, want := range map[string]bool{"kubelet": true, "kubelet.service": true, "containerd.service": true, "reboot.target": true,
		"multi-user.target": true, "chronyd": false, "chronyd.service": false, "kubelet.socket": false, "lull-tour.service": false,
		// the mounts, the network daemons and the bus (issue 41)
		"var-lib-kubelet.mount": true, "run-containerd.mount": true, "NetworkManager": true, "systemd-networkd.service": true,
		"dbus": true, "dbus-broker.service": true, "networkd-dispatcher.service": false,
		// units that take the node down, however spelled (issue 43)
		"systemd-reboot": true, "systemd-exit": true, "systemd-suspend.service": true} {
		require.Equal(t, want, NodeCritical(unit), unit)
	}
	require.True(t, CriticalIn([]string{"k3s*"}, "k3s-agent"), "an admin's list, with patterns")
	require.False(t, CriticalIn([]string{"k3s*"}, "kubelet"), "an admin's list replaces the default")
	require.True(t, CriticalIn([]string{"k3s*"}, "systemd-reboot"), "a unit that takes the node down is critical whatever the list")
}

// A unit that takes the node down is judged by what systemctl will act
// on, not by its spelling: the bare name of a reboot, power-off, exit or
// sleep service is one (issues 41 and 43).
func TestHostActionUnitBySystemdName(t *testing.T) {
	for unit, want := range map[string]bool{
		"systemd-reboot": true, "systemd-reboot.service": true, "systemd-poweroff": true, "systemd-halt": true, "systemd-kexec": true,
		"systemd-soft-reboot": true, "systemd-exit": true, "systemd-exit.service": true, "exit.target": true, " systemd-reboot ": true,
		"systemd-suspend": true, "systemd-hibernate": true, "systemd-hybrid-sleep": true, "systemd-suspend-then-hibernate": true,
		"rescue": true, "emergency.service": true, "system.slice": true, "reboot.target": true,
		"chronyd": false, "systemd-reboot.timer": false, "kubelet": false,
	} {
		require.Equal(t, want, HostActionUnit(unit), unit)
	}
}

// Restarting a unit that takes the node down, in a rule or as the changed
// unit, however it is spelled, is a drained reboot.
func TestHostActionUnitPlansADrainedReboot(t *testing.T) {
	s := Merge([]lullv1alpha1.DisruptionPolicy{pol("p", 0,
		steps("sneaky", "sneaky", restart("systemd-exit", 0)),
		lullv1alpha1.DisruptionRule{Name: "unit-files", Units: []string{"*"}, Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepDaemonReload}, {Type: lullv1alpha1.StepRestartService}}},
	)})
	d := s.Decide([]string{"sneaky"}, nil)
	require.Equal(t, "Cordon, Drain, Reboot", StepsLine(d.Steps))
	for _, unit := range []string{"systemd-reboot", "systemd-poweroff", "systemd-exit.service", "systemd-suspend", "exit.target"} {
		d = s.Decide(nil, &lullv1alpha1.Changes{Units: []string{unit}})
		require.Equal(t, "Cordon, Drain, Reboot", StepsLine(d.Steps), unit)
		require.Equal(t, lullv1alpha1.StepReboot, d.Action, unit)
	}
}

// One unit is one step however it is spelled (issue 44): a change that
// restarts "chronyd" and one that restarts "chronyd.service" restart it
// once.
func TestOneUnitOneStep(t *testing.T) {
	s := Merge([]lullv1alpha1.DisruptionPolicy{pol("p", 0,
		steps("chrony", "chrony-config", restart("chronyd", 0)),
		steps("chrony-unit", "chrony-unit", restart("chronyd.service", 10*time.Minute)),
	)})
	d := s.Decide([]string{"chrony-config", "chrony-unit"}, nil)
	require.Equal(t, "RestartService chronyd", StepsLine(d.Steps))
	require.Equal(t, []string{"chrony-config", "chrony-unit"}, d.Steps[0].Classes)
	require.Equal(t, 10*time.Minute, d.Steps[0].Timeout.Duration, "the longest timeout of either spelling")
}

// Writing a unit file or drop-in drains the node first, whatever its rule
// says (issue 41): a unit runs anything as root when systemd reads it.
func TestUnitWriteDrainsFirst(t *testing.T) {
	s := Merge([]lullv1alpha1.DisruptionPolicy{pol("p", 0,
		lullv1alpha1.DisruptionRule{Name: "unit-files", Units: []string{"*"}, Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepDaemonReload}, {Type: lullv1alpha1.StepRestartService}}},
		lullv1alpha1.DisruptionRule{Name: "chrony-files", Files: []string{"/etc/chrony/**"}, Steps: []lullv1alpha1.Step{restart("chrony", 0)}},
	)})
	d := s.Decide(nil, &lullv1alpha1.Changes{Units: []string{"chronyd.service"}, Config: "cfg"})
	require.Equal(t, "Cordon, Drain, WriteFiles, DaemonReload, RestartService chronyd.service", StepsLine(d.Steps))
	require.Equal(t, lullv1alpha1.ActionDrain, d.Action)
	d = s.Decide(nil, &lullv1alpha1.Changes{Units: []string{"chronyd.service"}})
	require.Equal(t, "DaemonReload, RestartService chronyd.service", StepsLine(d.Steps), "declared, not written: the rule decides")
	d = s.Decide(nil, &lullv1alpha1.Changes{Files: []string{"/etc/chrony/chrony.conf"}, Config: "cfg"})
	require.Equal(t, "WriteFiles, RestartService chrony", StepsLine(d.Steps), "a data file written: the rule decides")
}

// A file written under systemd's directories is drained for as a unit is,
// whatever it is declared as (a unit's file as a file, system.conf).
func TestSystemdFileWriteDrainsFirst(t *testing.T) {
	s := Merge([]lullv1alpha1.DisruptionPolicy{pol("p", 0,
		lullv1alpha1.DisruptionRule{Name: "etc", Files: []string{"/etc/**"}, Action: lullv1alpha1.ActionNone},
	)})
	for _, f := range []string{"/etc/systemd/system/evil.service", "/etc/systemd/system.conf", "/etc/systemd/system/x.service.d/a.conf"} {
		d := s.Decide(nil, &lullv1alpha1.Changes{Files: []string{f}, Config: "c"})
		require.Equal(t, "Cordon, Drain, WriteFiles", StepsLine(d.Steps), f)
	}
}
