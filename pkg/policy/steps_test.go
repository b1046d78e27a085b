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
		{"a node-critical unit is drained first", []string{"runtime-config"}, "Cordon, Drain, RestartService containerd", lullv1alpha1.StepRestartService, "p/runtime", nil},
		{"a target is drained first", []string{"sneaky"}, "Cordon, Drain, RestartService reboot.target", lullv1alpha1.StepRestartService, "p/target", nil},
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
	require.Equal(t, DefaultHostStepTimeout, d.Steps[0].Timeout.Duration)

	d = s.Decide([]string{"kernel-update"}, nil)
	require.Nil(t, d.Steps[0].Timeout, "cordon has no timeout")
	require.Equal(t, DefaultRebootTimeout, d.Steps[2].Timeout.Duration)
	require.Equal(t, []string{"kernel-update"}, d.Steps[0].Classes, "the reboot's class needs the cordon")
}

func TestNodeCritical(t *testing.T) {
	for unit, want := range map[string]bool{"kubelet": true, "kubelet.service": true, "containerd.service": true, "reboot.target": true,
		"multi-user.target": true, "chronyd": false, "chronyd.service": false, "kubelet.socket": false, "lull-tour.service": false} {
		require.Equal(t, want, NodeCritical(unit), unit)
	}
}
