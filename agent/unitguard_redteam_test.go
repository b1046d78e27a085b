package agent

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// Red team (promise 2): units whose start (or restart) takes the node
// down, or restarts a node-critical unit, that guardUnit lets through.
func TestRedteamGuardUnitMisses(t *testing.T) {
	restart := lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "lull-x"}
	base := "Id=lull-x.service\nNames=lull-x.service\nSuccessAction=none\nFailureAction=none\nJobTimeoutAction=none\nStartLimitAction=none\n"
	for name, extra := range map[string]string{
		// systemd >= 249: Upholds= starts the listed unit whenever it is
		// not active while this one is.
		"Upholds a reboot": "Upholds=reboot.target\n",
		// a timer or path unit starts what it Triggers= (OnActiveSec=0).
		"a timer that triggers the reboot service": "Id=lull-x.timer\nNames=lull-x.timer\nTriggers=systemd-reboot.service\n",
		// the command itself reboots: nothing in the properties read says so.
		"ExecStartPre reboots": "ExecStartPre={ path=/usr/bin/systemctl ; argv[]=/usr/bin/systemctl reboot ; ignore_errors=no }\n",
		"ExecStart powers off": "ExecStart={ path=/usr/sbin/poweroff ; argv[]=/usr/sbin/poweroff ; ignore_errors=no }\n",
		"ExecStop reboots":     "ExecStop={ path=/usr/sbin/reboot ; argv[]=/usr/sbin/reboot ; ignore_errors=no }\n",
		// restarting a unit restarts those PartOf= it (ConsistsOf) and
		// those that Requires=/BindsTo= it (RequiredBy/BoundBy): the
		// kubelet or the runtime restarted without a drain.
		"ConsistsOf the kubelet":       "ConsistsOf=kubelet.service\n",
		"RequiredBy the runtime":       "Id=docker.socket\nNames=docker.socket\nRequiredBy=docker.service\n",
		"BoundBy containerd":           "BoundBy=containerd.service\n",
		"PropagatesStopTo the kubelet": "PropagatesStopTo=kubelet.service\n",
		// starting it stops the runtime.
		"Conflicts with containerd": "Conflicts=shutdown.target containerd.service\n",
		// a dependency that is itself a node-critical unit is fine, but
		// one on a unit whose own SuccessAction reboots is only known
		// one level down (see TestRedteamGuardUnitOneLevelDeep).
	} {
		t.Run(name, func(t *testing.T) {
			err := guardUnit(restart, parseProps(base+extra))
			require.Error(t, err, "guardUnit lets through:\n%s", base+extra)
		})
	}
}

// Red team (promise 2): a ReloadService runs the unit's ExecReload=, which
// the guard does not read.
func TestRedteamGuardUnitReloadCommand(t *testing.T) {
	reload := lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepReloadService, Unit: "lull-x"}
	p := "Id=lull-x.service\nNames=lull-x.service\nSuccessAction=none\nFailureAction=none\n" +
		"ExecReload={ path=/usr/bin/systemctl ; argv[]=/usr/bin/systemctl kexec ; ignore_errors=no }\n"
	require.Error(t, guardUnit(reload, parseProps(p)), "a reload whose ExecReload kexecs the node passes")
}

// Red team (promise 2): the guard reads only the restarted unit's own
// properties. A unit that Wants= an ordinary-looking helper whose
// SuccessAction reboots the node passes, and starting it reboots.
func TestRedteamGuardUnitOneLevelDeep(t *testing.T) {
	ran := filepath.Join(t.TempDir(), "ran")
	c := Commands{HostRoot: "/", Restart: "touch " + ran,
		UnitState: `echo InvocationID=1; echo ActiveState=active; echo "Id=$LULL_UNIT"; echo "Names=$LULL_UNIT";
case "$LULL_UNIT" in
  app.service) echo Wants=app-helper.service ;;
  app-helper.service) echo SuccessAction=reboot-force ;;
esac`}
	_, err := c.Run(context.Background(), Step{Action: lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "app.service"}})
	require.NoFileExists(t, ran, "app.service was restarted; it Wants app-helper.service, whose SuccessAction is reboot-force (err: %v)", err)
}
