package agent

import (
	"testing"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// Red team (promise 3): lull-agent writes a unit file whose request
// declared it as a plain file (changes.files), which the planner does not
// drain for: the unit file is "planned" by a ChangeFile of its path.
func TestRedteamUnitFileWrittenAsAFile(t *testing.T) {
	for _, p := range []string{"/etc/systemd/system/evil.service", "/etc/systemd/system/chronyd.service.d/10-reboot.conf"} {
		d := &lullv1alpha1.Decision{Config: "c1", Changes: []lullv1alpha1.ChangeDecision{{Kind: lullv1alpha1.ChangeFile, Name: p}}}
		if out := notPlanned(d, []lullv1alpha1.ConfigFile{{Path: p}}); len(out) == 0 {
			t.Errorf("%s, a unit's file, is written as a file change (no drain planned for it)", p)
		}
	}
}
