package policy

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Red team 2: lull-admission without the criticalUnits key is documented
// as failing closed, "every unit is critical" (CriticalUnitsParam returns
// "*", as the guard's CEL orValue("*") does). But "*" has no type suffix,
// so both read it as "*.service": a mount, a socket, a swap are then not
// critical, while the shipped default (no ConfigMap at all) drains for
// every one of them ("*.mount", "*.automount", "*.swap", "containerd.socket",
// "docker.socket", "dbus.socket"). An admin who deploys the ConfigMap
// without the key gets a weaker planner than one who deploys none: a
// request restarting var-lib-kubelet.mount or containerd.socket is planned
// undrained, and the guard admits such a rule too.
func TestRedteam2MissingCriticalUnitsKeyIsWeakerThanNone(t *testing.T) {
	failClosed := CriticalUnitsParam(map[string]string{}, true)
	for _, unit := range []string{"var-lib-kubelet.mount", "containerd.socket", "dbus.socket", "swapfile.swap"} {
		require.True(t, NodeCritical(unit), "the shipped default drains for %s", unit)
		require.True(t, CriticalIn(failClosed, unit), "without the key \"every unit is critical\", but %s is not", unit)
	}
}
