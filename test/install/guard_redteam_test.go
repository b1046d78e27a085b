package install

import (
	"testing"
)

// Red team: doors the guard leaves open, on a real kube-apiserver with
// manifests/install applied. Each step wants a refusal; an allowed step
// is an open door.
func TestRedteamGuard(t *testing.T) {
	g := installGuarded(t)

	// Promise 1: restarting a socket restarts the critical service that
	// Requires= it (docker.service, dbus.service on Debian/Ubuntu).
	policy := func(name, unit string) string {
		return g.file("dp-"+name+".yaml", "apiVersion: lull.dev/v1alpha1\nkind: DisruptionPolicy\nmetadata: {name: "+name+"}\nspec:\n  rules:\n"+
			"  - {name: r, class: c, steps: [{type: RestartService, unit: "+unit+"}]}\n")
	}
	g.steps(t, []guardStep{
		// Control: the guard's policy is in force.
		{name: "control: RestartService kubelet without a drain is refused", as: em, args: []string{"create", "--dry-run=server", "-f", policy("ctl", "kubelet")},
			refused: []string{"disrupts every pod on the node"}, eventually: true},
		{name: "RestartService docker.socket without a drain", as: em, args: []string{"create", "--dry-run=server", "-f", policy("sock1", "docker.socket")},
			refused: []string{"disrupts every pod on the node"}},
		{name: "RestartService dbus.socket without a drain", as: em, args: []string{"create", "--dry-run=server", "-f", policy("sock2", "dbus.socket")},
			refused: []string{"disrupts every pod on the node"}},
		// nftables.service's stop flushes the ruleset kube-proxy and the CNI wrote.
		{name: "RestartService nftables without a drain", as: em, args: []string{"create", "--dry-run=server", "-f", policy("fw", "nftables")},
			refused: []string{"disrupts every pod on the node"}},
	})
}
