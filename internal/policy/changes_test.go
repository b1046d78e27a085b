package policy

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

func onFiles(name string, globs []string, ss ...lullv1alpha1.Step) lullv1alpha1.DisruptionRule {
	return lullv1alpha1.DisruptionRule{Name: name, Files: globs, Steps: ss}
}

var (
	noneStep     = lullv1alpha1.Step{Type: lullv1alpha1.ActionNone}
	daemonReload = lullv1alpha1.Step{Type: lullv1alpha1.StepDaemonReload}
	// restartChanged restarts the changed unit (a units rule's step).
	restartChanged = lullv1alpha1.Step{Type: lullv1alpha1.StepRestartService}
)

func changePolicy() *Set {
	return Merge([]lullv1alpha1.DisruptionPolicy{pol("site", 0,
		onFiles("registry", []string{"/etc/containerd/certs.d/**"}, noneStep),
		onFiles("chrony", []string{"/etc/chrony.conf", "/etc/chrony.d/*.conf"}, restart("chronyd", 0)),
		onFiles("sshd", []string{"/etc/ssh/sshd_config"}, drainStep, restart("sshd", 0)),
		onFiles("nginx", []string{"/etc/nginx/**"}, lullv1alpha1.Step{Type: lullv1alpha1.StepReloadService, Unit: "nginx"}),
		lullv1alpha1.DisruptionRule{Name: "keys", SSHKeys: []string{"*"}, Action: lullv1alpha1.ActionNone},
		lullv1alpha1.DisruptionRule{Name: "units", Units: []string{"*"}, Steps: []lullv1alpha1.Step{daemonReload, restartChanged}},
		lullv1alpha1.DisruptionRule{Name: "hugepages", KernelArguments: []string{"hugepages*"}, Steps: []lullv1alpha1.Step{drainStep, rebootStep}},
		lullv1alpha1.DisruptionRule{Name: "image", OSImage: ptr.To(true), Steps: []lullv1alpha1.Step{drainStep, rebootStep}},
		exact("kernel", "kernel-update", lullv1alpha1.ActionDrain),
	)})
}

// TestDecideChanges: each change is decided by the first rule that
// matches it, and the plan is the canonical union of all decisions.
func TestDecideChanges(t *testing.T) {
	s := changePolicy()
	for _, tc := range []struct {
		name    string
		classes []string
		changes lullv1alpha1.Changes
		plan    string
		action  lullv1alpha1.DisruptionAction
		rules   []string // per change, in List order
		covers  []string // of the last step
	}{
		{name: "a change no rule matches: drain and reboot", changes: lullv1alpha1.Changes{Files: []string{"/etc/unknown.conf"}},
			plan: "Cordon, Drain, Reboot", action: lullv1alpha1.StepReboot, rules: []string{"(default)"}},
		{name: "None only", changes: lullv1alpha1.Changes{Files: []string{"/etc/containerd/certs.d/reg.example/hosts.toml"}, SSHKeys: []string{"core"}},
			plan: "nothing", action: lullv1alpha1.ActionNone, rules: []string{"site/registry", "site/keys"}},
		{name: "RestartService only", changes: lullv1alpha1.Changes{Files: []string{"/etc/chrony.conf", "/etc/chrony.d/pool.conf"}},
			plan: "RestartService chronyd", action: lullv1alpha1.StepRestartService, rules: []string{"site/chrony", "site/chrony"}},
		{name: "a glob stays within its segment", changes: lullv1alpha1.Changes{Files: []string{"/etc/chrony.d/sub/pool.conf"}},
			plan: "Cordon, Drain, Reboot", action: lullv1alpha1.StepReboot, rules: []string{"(default)"}},
		{name: "Drain and RestartService", changes: lullv1alpha1.Changes{Files: []string{"/etc/ssh/sshd_config", "/etc/chrony.conf"}},
			plan: "Cordon, Drain, RestartService chronyd, RestartService sshd", action: lullv1alpha1.ActionDrain, rules: []string{"site/sshd", "site/chrony"}},
		{name: "None with a reboot: the reboot", changes: lullv1alpha1.Changes{SSHKeys: []string{"core"}, KernelArguments: []string{"hugepages=16"}},
			plan: "Cordon, Drain, Reboot", action: lullv1alpha1.StepReboot, rules: []string{"site/keys", "site/hugepages"}},
		{name: "restart with a reboot: the reboot wins, restarts dropped", changes: lullv1alpha1.Changes{Files: []string{"/etc/chrony.conf"}, OSImage: "quay.io/os@sha256:1"},
			plan: "Cordon, Drain, Reboot", action: lullv1alpha1.StepReboot, rules: []string{"site/chrony", "site/image"},
			covers: []string{"RestartService chronyd (file /etc/chrony.conf)"}},
		{name: "drain and restart with a reboot", changes: lullv1alpha1.Changes{Files: []string{"/etc/ssh/sshd_config"}, KernelArguments: []string{"quiet"}},
			plan: "Cordon, Drain, Reboot", action: lullv1alpha1.StepReboot, rules: []string{"site/sshd", "(default)"},
			covers: []string{"RestartService sshd (file /etc/ssh/sshd_config)"}},
		{name: "a changed unit: daemon-reload, then its restart", changes: lullv1alpha1.Changes{Units: []string{"chronyd.service", "sshd.service"}},
			plan: "DaemonReload, RestartService chronyd.service, RestartService sshd.service", action: lullv1alpha1.StepRestartService,
			rules: []string{"site/units", "site/units"}},
		{name: "a changed node-critical unit is drained first", changes: lullv1alpha1.Changes{Units: []string{"kubelet.service"}},
			plan: "Cordon, Drain, DaemonReload, RestartService kubelet.service", action: lullv1alpha1.ActionDrain, rules: []string{"site/units"}},
		{name: "a changed target reboots instead of restarting", changes: lullv1alpha1.Changes{Units: []string{"multi-user.target"}},
			plan: "Cordon, Drain, Reboot", action: lullv1alpha1.StepReboot, rules: []string{"site/units"}, covers: []string{"DaemonReload (unit multi-user.target)"}},
		{name: "reload and restart of one unit: the restart", changes: lullv1alpha1.Changes{Files: []string{"/etc/nginx/nginx.conf"}, Units: []string{"nginx.service"}},
			plan: "DaemonReload, RestartService nginx.service", action: lullv1alpha1.StepRestartService, rules: []string{"site/nginx", "site/units"},
			covers: []string{"ReloadService nginx (file /etc/nginx/nginx.conf)"}},
		{name: "extensions and kernel types are never matched", changes: lullv1alpha1.Changes{Extensions: []string{"usbguard"}, KernelType: "realtime"},
			plan: "Cordon, Drain, Reboot", action: lullv1alpha1.StepReboot, rules: []string{"(default)", "(default)"}},
		{name: "classes and changes merge", classes: []string{"kernel-update"}, changes: lullv1alpha1.Changes{Files: []string{"/etc/chrony.conf"}},
			plan: "Cordon, Drain, RestartService chronyd", action: lullv1alpha1.ActionDrain, rules: []string{"site/chrony"}},
		{name: "a configuration is written first", changes: lullv1alpha1.Changes{Files: []string{"/etc/chrony.conf"}, Config: "chrony-v2"},
			plan: "WriteFiles, RestartService chronyd", action: lullv1alpha1.StepRestartService, rules: []string{"site/chrony"}},
		{name: "a configuration alone needs the write", changes: lullv1alpha1.Changes{SSHKeys: []string{"core"}, Files: []string{"/etc/containerd/certs.d/r/hosts.toml"}, Config: "c"},
			plan: "WriteFiles", action: lullv1alpha1.StepWriteFiles, rules: []string{"site/registry", "site/keys"}},
		{name: "a configuration is written before the reboot", changes: lullv1alpha1.Changes{Files: []string{"/etc/x"}, Config: "c"},
			plan: "Cordon, Drain, WriteFiles, Reboot", action: lullv1alpha1.StepReboot, rules: []string{"(default)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := s.Decide(tc.classes, &tc.changes)
			require.Equal(t, tc.plan, StepsLine(d.Steps))
			require.Equal(t, tc.action, d.Action)
			require.Len(t, d.Changes, len(tc.rules))
			for i, cd := range d.Changes {
				require.Equal(t, tc.rules[i], cd.RuleRef(), cd.Name)
			}
			require.Equal(t, tc.changes.Config, d.Config)
			if n := len(d.Steps); n > 0 {
				require.Equal(t, tc.covers, d.Steps[n-1].Covers)
			}
		})
	}
}

// Every change records the steps it contributed, in its own words (the
// changed unit resolved).
func TestChangeDecisionsRecordSteps(t *testing.T) {
	d := changePolicy().Decide(nil, &lullv1alpha1.Changes{Units: []string{"chronyd.service", "reboot.target"}, Files: []string{"/etc/nope"}})
	require.Equal(t, []lullv1alpha1.ChangeDecision{
		{Kind: lullv1alpha1.ChangeFile, Name: "/etc/nope", Rule: "(default)", Steps: []string{"Drain", "Reboot"}},
		{Kind: lullv1alpha1.ChangeUnit, Name: "chronyd.service", Policy: "site", Rule: "units", Steps: []string{"DaemonReload", "RestartService chronyd.service"}},
		{Kind: lullv1alpha1.ChangeUnit, Name: "reboot.target", Policy: "site", Rule: "units", Steps: []string{"DaemonReload", "Drain", "Reboot"}},
	}, d.Changes)
	require.Equal(t, "changes (1 file, 2 units) need Cordon, Drain, Reboot (rules (default): 1 change, site/units: 2 changes)",
		Describe(nil, &lullv1alpha1.Changes{Units: []string{"chronyd.service", "reboot.target"}, Files: []string{"/etc/nope"}}, d))
}

// A step needed by many changes names the first MaxStepChanges of them.
func TestPlannedStepChangesAreCapped(t *testing.T) {
	var files []string
	for i := range 40 {
		files = append(files, fmt.Sprintf("/etc/chrony.d/%02d.conf", i))
	}
	d := changePolicy().Decide(nil, &lullv1alpha1.Changes{Files: files})
	require.Len(t, d.Steps, 1)
	require.Len(t, d.Steps[0].Changes, lullv1alpha1.MaxStepChanges+1)
	require.Equal(t, "and 24 more", d.Steps[0].Changes[lullv1alpha1.MaxStepChanges])
	require.Len(t, d.Changes, 40)
}

func TestGlob(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		paths, want   bool
	}{
		{"/etc/containerd/certs.d/*", "/etc/containerd/certs.d/x", true, true},
		{"/etc/containerd/certs.d/*", "/etc/containerd/certs.d/x/hosts.toml", true, false},
		{"/etc/containerd/certs.d/**", "/etc/containerd/certs.d/x/hosts.toml", true, true},
		{"/etc/**/hosts.toml", "/etc/hosts.toml", true, true},
		{"/etc/**/hosts.toml", "/etc/a/b/hosts.toml", true, true},
		{"/**", "/anything/at/all", true, true},
		{"/etc/?.conf", "/etc/a.conf", true, true},
		{"/etc/?.conf", "/etc//.conf", true, false},
		{"*", "root=/dev/sda1", false, true},
		{"hugepages*", "hugepagesz=1G", false, true},
		{"chronyd.service", "chronyd.service", false, true},
		{"chronyd.service", "chronyd", false, false},
	} {
		require.Equal(t, tc.want, Glob(tc.pattern, tc.name, tc.paths), "%s ~ %s", tc.pattern, tc.name)
	}
}

// Change rules shadow change rules of their kind only.
func TestEffectiveChangeRules(t *testing.T) {
	s := Merge([]lullv1alpha1.DisruptionPolicy{pol("p", 0,
		onFiles("all", []string{"/**"}, drainStep),
		onFiles("chrony", []string{"/etc/chrony.conf"}, restart("chronyd", 0)),
		lullv1alpha1.DisruptionRule{Name: "units", Units: []string{"*"}, Action: lullv1alpha1.ActionNone},
		lullv1alpha1.DisruptionRule{Name: "one-unit", Units: []string{"a.service"}, Action: lullv1alpha1.ActionDrain},
		exact("c", "chrony", lullv1alpha1.ActionNone),
	)})
	shadow := map[string]string{}
	for _, e := range s.Effective() {
		shadow[e.Rule+"@"+e.Match] = e.ShadowedBy
	}
	require.Equal(t, map[string]string{
		"all@files: /**": "", "chrony@files: /etc/chrony.conf": "p/all", "units@units: *": "", "one-unit@units: a.service": "p/units",
		"c@chrony": "", "(default)@*": "", "(default)@" + anyChange: "",
	}, shadow)
}

// A declared path that is not clean is decided by no rule (issue 43,
// finding 7): /etc/containerd/certs.d/../../systemd/system/x.service
// matches registry-hosts' /etc/containerd/certs.d/** by name but is a
// unit file on disk; the default decides it (drain and reboot).
func TestUncleanPathsMatchNoRule(t *testing.T) {
	s := Merge([]lullv1alpha1.DisruptionPolicy{pol("p", 0,
		lullv1alpha1.DisruptionRule{Name: "registry-hosts", Files: []string{"/etc/containerd/certs.d/**"}, Action: lullv1alpha1.ActionNone},
	)})
	for _, f := range []string{"/etc/containerd/certs.d/../../systemd/system/x.service", "/etc/containerd/certs.d/./r/hosts.toml", "/etc/containerd/certs.d//r/hosts.toml"} {
		d := s.Decide(nil, &lullv1alpha1.Changes{Files: []string{f}})
		require.Equal(t, "Cordon, Drain, Reboot", StepsLine(d.Steps), f)
		require.Equal(t, lullv1alpha1.DefaultRuleName, d.Changes[0].Rule, f)
	}
	d := s.Decide(nil, &lullv1alpha1.Changes{Files: []string{"/etc/containerd/certs.d/r/hosts.toml"}})
	require.Equal(t, "nothing", StepsLine(d.Steps), "a clean path is the rule's")
}
