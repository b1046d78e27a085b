package options

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"lull.dev/lull/internal/settings"
)

// The flags default to NewDrainer's values, which are the controller's
// defaults (DefaultMaintenance) and the shared settings' (internal/settings),
// except the identity, each replica's own.
func TestDrainerDefaults(t *testing.T) {
	o := NewDrainer()
	fs := pflag.NewFlagSet("lull-drainer", pflag.ContinueOnError)
	o.AddFlags(fs)
	require.NoError(t, fs.Parse(nil))
	assert.Empty(t, o.Validate())
	want := DefaultMaintenance()
	want.Identity = ""
	assert.Equal(t, want, o.Maintenance)
	assert.Equal(t, settings.Defaults(), o.Settings)
	for _, flag := range []string{"workers", "lease-duration", "drain-timeout", "delete-emptydir-data", "agent-namespace", "v", "logging-format"} {
		assert.NotNil(t, fs.Lookup(flag), flag)
	}
	assert.Nil(t, fs.Lookup(settings.TolerationKeyName.Flag), "the drainer does not read the toleration key")
}

// Each bad flag is refused with its name in the error.
func TestDrainerValidate(t *testing.T) {
	for flag, arg := range map[string]string{
		"--workers":                  "--workers=0",
		"--lease-duration":           "--lease-duration=-1s",
		"--drain-timeout":            "--drain-timeout=0s",
		"--eviction-max-retry-delay": "--eviction-max-retry-delay=1s",
		"--budget-namespace":         "--budget-namespace=Not_A_Namespace",
		"--agent-namespace":          "--agent-namespace=a.b",
		"--nodes-without-window":     "--nodes-without-window=Sometimes",
	} {
		o := NewDrainer()
		fs := pflag.NewFlagSet("lull-drainer", pflag.ContinueOnError)
		o.AddFlags(fs)
		require.NoError(t, fs.Parse([]string{arg}), arg)
		errs := o.Validate()
		require.NotEmpty(t, errs, arg)
		var all []string
		for _, err := range errs {
			all = append(all, err.Error())
		}
		assert.Contains(t, strings.Join(all, "\n"), flag, arg)
	}
}

// A lease duration a Lease cannot hold (under a second rounds to zero,
// beyond lease.MaxDuration wraps its int32 of seconds) is refused at
// start, not at the first acquire.
func TestDrainerLeaseDurationFitsALease(t *testing.T) {
	for _, arg := range []string{"--lease-duration=500ms", "--lease-duration=1000000h"} {
		o := NewDrainer()
		fs := pflag.NewFlagSet("lull-drainer", pflag.ContinueOnError)
		o.AddFlags(fs)
		require.NoError(t, fs.Parse([]string{arg}), arg)
		require.NotEmpty(t, o.Validate(), arg)
	}
}

// Default fills in only what is unset; the switches stay as given.
func TestMaintenanceDefault(t *testing.T) {
	m := Maintenance{DrainTimeout: time.Minute}
	m.Default()
	want := DefaultMaintenance()
	want.DrainTimeout, want.DeleteEmptyDirData, want.NodeConditions = time.Minute, false, false
	assert.Equal(t, want, m)
}

// kubectl-lull's previews take the drainer's holder family and
// --delete-emptydir-data from the same declarations.
func TestPreviewFlags(t *testing.T) {
	m := DefaultMaintenance()
	fs := pflag.NewFlagSet("kubectl-lull", pflag.ContinueOnError)
	m.AddPreviewFlags(fs)
	require.NoError(t, fs.Parse([]string{"--drainer-identity=other", "--delete-emptydir-data=false"}))
	assert.Equal(t, "other", m.Identity)
	assert.False(t, m.DeleteEmptyDirData)
	assert.Equal(t, "true", fs.Lookup("delete-emptydir-data").DefValue)
	assert.Contains(t, fs.Lookup("delete-emptydir-data").Usage, "the drainer's --delete-emptydir-data")
}
