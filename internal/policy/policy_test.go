package policy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

func pol(name string, prio int32, rules ...lullv1alpha1.DisruptionRule) lullv1alpha1.DisruptionPolicy {
	return lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: lullv1alpha1.DisruptionPolicySpec{Priority: prio, Rules: rules}}
}

func exact(name, class string, a lullv1alpha1.DisruptionAction) lullv1alpha1.DisruptionRule {
	return lullv1alpha1.DisruptionRule{Name: name, Class: class, Action: a}
}

func glob(name, pattern string, a lullv1alpha1.DisruptionAction) lullv1alpha1.DisruptionRule {
	return lullv1alpha1.DisruptionRule{Name: name, ClassPattern: pattern, Action: a}
}

func TestDecide(t *testing.T) {
	drain := glob("kernel", "kernel-*", lullv1alpha1.ActionDrain)
	drain.Drain = &lullv1alpha1.RuleDrain{Timeout: &lullv1alpha1.Duration{Duration: 10 * time.Minute}, Escalation: lullv1alpha1.EscalationAbort}
	deleting := pol("going", 50, exact("all", "ssh-keys", lullv1alpha1.ActionDrain))
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	s := Merge([]lullv1alpha1.DisruptionPolicy{
		pol("default", -100, exact("ssh", "ssh-keys", lullv1alpha1.ActionNone), exact("cfg", "node-config", lullv1alpha1.ActionCordon), drain),
		pol("site", 0, exact("mirror", "registry-mirror", lullv1alpha1.ActionDrain), glob("cfg", "node-conf?g", lullv1alpha1.ActionNone)),
		pol("aaa", 0, exact("mirror", "registry-mirror", lullv1alpha1.ActionCordon)),
		deleting,
	})
	for _, tc := range []struct {
		class  string
		action lullv1alpha1.DisruptionAction
		ref    string
	}{
		{"ssh-keys", lullv1alpha1.ActionNone, "default/ssh"},                 // the deleted policy does not count
		{"registry-mirror", lullv1alpha1.ActionCordon, "aaa/mirror"},         // equal priority: by name
		{"node-config", lullv1alpha1.ActionNone, "site/cfg"},                 // higher priority pattern wins over a later exact rule
		{"kernel-update", lullv1alpha1.ActionDrain, "default/kernel"},        // pattern
		{"kernel", lullv1alpha1.ActionDrain, lullv1alpha1.DefaultRuleName},   // "kernel-*" needs the dash
		{"firmware", lullv1alpha1.ActionDrain, lullv1alpha1.DefaultRuleName}, // nothing matches: drain
	} {
		d := s.Decide([]string{tc.class}, nil)
		require.Equal(t, tc.action, d.Action, tc.class)
		require.Equal(t, tc.ref, d.RuleRef(), tc.class)
	}
	d := s.Decide([]string{"kernel-update"}, nil)
	require.Equal(t, 10*time.Minute, d.Timeout.Duration)
	require.Equal(t, lullv1alpha1.EscalationAbort, d.Escalation)
	require.Equal(t, 1, s.Order("aaa"))
	require.Equal(t, 2, s.Order("site"))
	require.Equal(t, 3, s.Order("default"))
	require.Zero(t, s.Order("going"))
}

func TestEffectiveMarksShadowedRules(t *testing.T) {
	s := Merge([]lullv1alpha1.DisruptionPolicy{
		pol("site", 10, glob("kernels", "kernel-*", lullv1alpha1.ActionCordon), exact("fw", "firmware", lullv1alpha1.ActionDrain)),
		pol("default", -100, exact("kernel-update", "kernel-update", lullv1alpha1.ActionDrain), glob("k2", "kernel-*", lullv1alpha1.ActionDrain),
			exact("fw", "firmware", lullv1alpha1.ActionNone), glob("rest", "*", lullv1alpha1.ActionNone), exact("late", "x", lullv1alpha1.ActionDrain)),
	})
	eff := s.Effective()
	require.Equal(t, anyChange, eff[len(eff)-1].Match, "the built-in default for changes comes last")
	require.Empty(t, eff[len(eff)-1].ShadowedBy, "extensions and kernel types match no rule: never shadowed")
	eff = eff[:len(eff)-1]
	shadow := map[string]string{}
	for _, e := range eff {
		shadow[e.Policy+"/"+e.Rule] = e.ShadowedBy
	}
	require.Equal(t, map[string]string{
		"site/kernels":                     "",
		"site/fw":                          "",
		"default/kernel-update":            "site/kernels",
		"default/k2":                       "site/kernels",
		"default/fw":                       "site/fw",
		"default/rest":                     "",
		"default/late":                     "default/rest",
		"/" + lullv1alpha1.DefaultRuleName: "default/rest",
	}, shadow)
	require.Equal(t, lullv1alpha1.ActionDrain, eff[len(eff)-1].Action)
	site := pol("site", 10, glob("kernels", "kernel-*", lullv1alpha1.ActionCordon), exact("fw", "firmware", lullv1alpha1.ActionDrain))
	require.Equal(t, "kernel-*=Cordon firmware=Drain", Summary(&site))
}

// The shipped default policy says what the docs say it says.
func TestShippedDefaultPolicy(t *testing.T) {
	p, err := Shipped()
	require.NoError(t, err)
	require.Equal(t, ManagedBy, p.Annotations[ManagedByAnnotation])
	require.Equal(t, ShippedName, p.Name)
	s := Merge([]lullv1alpha1.DisruptionPolicy{*p})
	for class, want := range map[string]lullv1alpha1.DisruptionAction{
		"ssh-keys": lullv1alpha1.ActionNone, "registry-mirror": lullv1alpha1.ActionNone, "node-config": lullv1alpha1.ActionCordon,
		"kernel-update": lullv1alpha1.ActionDrain, "kernel-livepatch": lullv1alpha1.ActionDrain, "hardware": lullv1alpha1.ActionDrain,
		"chrony-config": lullv1alpha1.StepRestartService, "reboot-required": lullv1alpha1.StepReboot,
		// When unsure, the disruptive action: drained and rebooted.
		"anything-else": lullv1alpha1.StepReboot,
	} {
		require.Equal(t, want, s.Decide([]string{class}, nil).Action, class)
	}
	require.Equal(t, "Cordon, Drain, Reboot", StepsLine(s.Decide([]string{"anything-else"}, nil).Steps))
	eff := s.Effective()
	for _, e := range eff[:len(eff)-2] {
		require.Empty(t, e.ShadowedBy, "the shipped policy has no dead rule: %+v", e)
	}
	require.Equal(t, "default/unknown-classes", eff[len(eff)-2].ShadowedBy, "its last class rule replaces the built-in default for classes")
	require.Empty(t, eff[len(eff)-1].ShadowedBy)
	require.Equal(t, "ssh-keys=None registry-mirror=None node-config=Cordon kernel-update=Drain kernel-*=Drain hardware=Drain "+
		"chrony-config=RestartService:chronyd reboot-required=Drain+Reboot cluster-api-rollout=Drain cluster-api-scale-down=Drain cluster-api-remediation=Drain cluster-api-delete=Drain *=Drain+Reboot "+
		"files:/etc/containerd/certs.d/**=None files:/etc/chrony.conf,/etc/chrony.d/**=RestartService:chronyd "+
		"files:/etc/chrony/**=RestartService:chrony sshKeys:*=None units:*=DaemonReload+RestartService:<unit> "+
		"kernelArguments:*=Drain+Reboot osImage=Drain+Reboot files:/**=Drain+Reboot", Summary(p))
	// Changes, as the shipped defaults say.
	for _, tc := range []struct {
		changes lullv1alpha1.Changes
		plan    string
	}{
		{lullv1alpha1.Changes{Files: []string{"/etc/containerd/certs.d/registry.example/hosts.toml"}}, "nothing"},
		{lullv1alpha1.Changes{Files: []string{"/etc/chrony.conf"}}, "RestartService chronyd"},
		{lullv1alpha1.Changes{Files: []string{"/etc/chrony/chrony.conf"}}, "RestartService chrony"},
		{lullv1alpha1.Changes{SSHKeys: []string{"core"}}, "nothing"},
		{lullv1alpha1.Changes{Units: []string{"lull-test.service"}}, "DaemonReload, RestartService lull-test.service"},
		{lullv1alpha1.Changes{Units: []string{"containerd.service"}}, "Cordon, Drain, DaemonReload, RestartService containerd.service"},
		{lullv1alpha1.Changes{KernelArguments: []string{"mitigations=off"}}, "Cordon, Drain, Reboot"},
		{lullv1alpha1.Changes{OSImage: "registry.example/os:2"}, "Cordon, Drain, Reboot"},
		{lullv1alpha1.Changes{Files: []string{"/etc/sysctl.d/99-x.conf"}}, "Cordon, Drain, Reboot"},
		{lullv1alpha1.Changes{Extensions: []string{"usbguard"}}, "Cordon, Drain, Reboot"},
	} {
		require.Equal(t, tc.plan, StepsLine(s.Decide(nil, &tc.changes).Steps), "%+v", tc.changes)
	}
}

// The guard's criticalUnits read as the guard's CEL reads them
// (params.data.?criticalUnits.orValue("*"), split, trimmed, empties
// dropped); no ConfigMap keeps the shipped list.
func TestCriticalUnitsParam(t *testing.T) {
	require.Nil(t, CriticalUnitsParam(nil, false))
	require.Equal(t, []string{"*"}, CriticalUnitsParam(map[string]string{}, true))
	require.Equal(t, []string{}, CriticalUnitsParam(map[string]string{CriticalUnitsKey: " , "}, true))
	require.Equal(t, []string{"k3s.service", "*.mount"}, CriticalUnitsParam(map[string]string{CriticalUnitsKey: "k3s.service, *.mount,"}, true))
	require.False(t, CriticalIn(CriticalUnitsParam(map[string]string{CriticalUnitsKey: ""}, true), "kubelet.service"), "an admin's empty list")
	require.True(t, CriticalIn(CriticalUnitsParam(map[string]string{CriticalUnitsKey: ""}, true), "systemd-reboot.service"), "what takes the node down always is")
}
