package app

import (
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"lull.dev/lull/internal/settings"
)

// The drainer's shared-settings flags default to internal/settings' one set of
// defaults (lull-scheduler's args and kubectl-lull's flags are checked
// against the same set), and set what the controllers read.
func TestSharedSettingsFlags(t *testing.T) {
	o := NewOptions()
	fs := pflag.NewFlagSet("lull-drainer", pflag.ContinueOnError)
	o.AddFlags(fs)
	require.NoError(t, fs.Parse(nil))
	assert.Equal(t, settings.Defaults(), o.Settings)
	assert.Nil(t, fs.Lookup(settings.TolerationKeyName.Flag), "the drainer does not read the toleration key")

	require.NoError(t, fs.Parse([]string{"--maintenance-label=example.com/maintenance", "--lease-namespace=leases",
		"--nodes-without-window=Restrictive", "--default-max-unavailable=3", "--window-horizon=720h"}))
	want := settings.Defaults()
	want.MaintenanceLabel, want.LeaseNamespace, want.NodesWithoutWindow = "example.com/maintenance", "leases", settings.NoWindowRestrictive
	want.DefaultMaxUnavailable, want.WindowHorizon = 3, 720*time.Hour
	assert.Equal(t, want, o.Settings)
}

// Bad settings stop the drainer before it connects anywhere, with exit
// code 2 (usage).
func TestRunRejectsBadSettings(t *testing.T) {
	for _, arg := range []string{"--nodes-without-window=Sometimes", "--maintenance-label=not a label", "--default-max-unavailable=0", "--window-horizon=-1h"} {
		assert.Equal(t, 2, Run([]string{arg}), arg)
	}
}

// Profiling is unauthenticated, so it is off unless asked for; the client
// limit defaults to 200/s, burst 400 (a 5,000-node wave's limit at 50/s).
func TestPprofOffAndClientLimitDefaults(t *testing.T) {
	o := NewOptions()
	fs := pflag.NewFlagSet("lull-drainer", pflag.ContinueOnError)
	o.AddFlags(fs)
	require.NoError(t, fs.Parse(nil))
	assert.Empty(t, o.PprofAddr)
	assert.Equal(t, 200.0, o.QPS)
	assert.Equal(t, 400, o.Burst)
	require.NoError(t, fs.Parse([]string{"--pprof-bind-address=127.0.0.1:6060", "--kube-api-qps=5", "--kube-api-burst=7"}))
	assert.Equal(t, "127.0.0.1:6060", o.PprofAddr)
	assert.Equal(t, 5.0, o.QPS)
	assert.Equal(t, 7, o.Burst)
}
