package policy

import (
	"strings"
	"testing"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// Red team (promise 3): "Writing a unit file or drop-in drains the node
// first, whatever its rule says." The planner recognises a unit only by
// the request's declared kind (changes.units); the same path declared in
// changes.files, or a path systemd reads as a unit's drop-in or runs as
// root that cli/nodeconfig does not classify as a unit, is written by a
// rule that does not drain.
func TestRedteamUnitWrittenAsAFileIsNotDrained(t *testing.T) {
	s := Merge([]lullv1alpha1.DisruptionPolicy{pol("p", 0,
		lullv1alpha1.DisruptionRule{Name: "etc", Files: []string{"/etc/**"}, Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepDaemonReload}}},
	)})
	for _, path := range []string{
		// a unit file and a drop-in, declared as files (lull-agent's
		// notPlanned accepts a ChangeFile of the exact path)
		"/etc/systemd/system/evil.service",
		"/etc/systemd/system/chronyd.service.d/10-reboot.conf",
		// a drop-in for every service (systemd >= 246 top-level type drop-in)
		"/etc/systemd/system/service.d/10-reboot.conf",
		// systemctl set-property's persistent drop-ins, read before /etc/systemd/system's
		"/etc/systemd/system.control/chronyd.service.d/50-reboot.conf",
		// a generator: run as root by the DaemonReload this very rule asks for
		"/etc/systemd/system-generators/lull-evil",
		// the manager's own configuration (its drop-in directory)
		"/etc/systemd/system.conf.d/10-x.conf",
		// a SysV script: systemd-sysv-generator makes it lull-evil.service
		// at the next daemon-reload (this rule's), as root
		"/etc/init.d/lull-evil",
	} {
		d := s.Decide(nil, &lullv1alpha1.Changes{Files: []string{path}, Config: "cfg"})
		if !strings.Contains(StepsLine(d.Steps), "Drain") {
			t.Errorf("writing %s is planned %q: not drained", path, StepsLine(d.Steps))
		}
	}
}

// Red team (promise 1): restarting a socket restarts the service that
// Requires= it (docker.service Requires=docker.socket, dbus.service
// Requires=dbus.socket on Debian/Ubuntu): a node-critical restart the
// planner does not drain for. Likewise nftables.service/firewalld.service,
// whose stop flushes the ruleset kube-proxy and the CNI wrote.
func TestRedteamCriticalBySocketOrFirewall(t *testing.T) {
	for _, unit := range []string{"docker.socket", "dbus.socket", "nftables", "firewalld"} {
		if !NodeCritical(unit) {
			t.Errorf("RestartService %s is not node-critical: planned without a drain", unit)
		}
	}
}

// Red team (promise 1): the guard judges ReloadService like
// RestartService (a node-critical unit reloaded in a rule that does not
// drain is refused), the planner drains only for a RestartService: a
// policy written while the guard was off, or a units rule reloading the
// changed unit, reloads NetworkManager or the kubelet undrained. The two
// disagree.
func TestRedteamCriticalReloadNotDrained(t *testing.T) {
	s := Merge([]lullv1alpha1.DisruptionPolicy{pol("p", 0,
		steps("net", "net-config", lullv1alpha1.Step{Type: lullv1alpha1.StepReloadService, Unit: "NetworkManager"}),
		lullv1alpha1.DisruptionRule{Name: "units", Units: []string{"*"}, Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepDaemonReload}, {Type: lullv1alpha1.StepReloadService}}},
	)})
	if d := s.Decide([]string{"net-config"}, nil); !strings.Contains(StepsLine(d.Steps), "Drain") {
		t.Errorf("ReloadService NetworkManager (node-critical, refused undrained by the guard) is planned %q", StepsLine(d.Steps))
	}
	if d := s.Decide(nil, &lullv1alpha1.Changes{Units: []string{"kubelet.service"}}); !strings.Contains(StepsLine(d.Steps), "Drain") {
		t.Errorf("a changed kubelet.service reloaded by a units rule is planned %q", StepsLine(d.Steps))
	}
}

// Red team (promise 1): the storage daemons pods' volumes depend on.
// Debian's open-iscsi.service stop logs out every iSCSI session
// (logout-all.sh), taking every iSCSI-backed PersistentVolume on the node
// away from its pods; multipathd's restart drops multipath maps of FC/iSCSI
// volumes in use; iscsid likewise.
func TestRedteamCriticalStorage(t *testing.T) {
	for _, unit := range []string{"open-iscsi", "iscsid", "multipathd"} {
		if !NodeCritical(unit) {
			t.Errorf("RestartService %s is not node-critical: planned without a drain", unit)
		}
	}
}
