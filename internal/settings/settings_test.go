package settings

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDefaults(t *testing.T) {
	d := Defaults()
	// The documented values (docs/operations.md, docs/scheduler.md, the
	// chart and the manifests spell them out).
	assert.Equal(t, Settings{
		MaintenanceLabel:      "lull.dev/maintenance",
		TolerationKey:         "lull.dev/disruption",
		LeaseNamespace:        "lull-leases",
		NodesWithoutWindow:    NoWindowPermissive,
		DefaultMaxUnavailable: 1,
		WindowHorizon:         1500 * 24 * time.Hour,
	}, d)
	assert.NoError(t, d.Validate())
	assert.Empty(t, d.ValidateArgs(nil))
	assert.True(t, d.NodesWithoutWindow.Permits())
	assert.False(t, NoWindowRestrictive.Permits())
	assert.Equal(t, d.WindowHorizon, d.WindowOptions().Horizon)
}

func TestWithDefaults(t *testing.T) {
	assert.Equal(t, Defaults(), Settings{}.WithDefaults())
	set := Settings{MaintenanceLabel: "example.com/m", NodesWithoutWindow: NoWindowRestrictive, DefaultMaxUnavailable: 3}
	want := Defaults()
	want.MaintenanceLabel, want.NodesWithoutWindow, want.DefaultMaxUnavailable = "example.com/m", NoWindowRestrictive, 3
	assert.Equal(t, want, set.WithDefaults(), "set fields are kept")
}

func TestValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*Settings)
		bad    Name
	}{
		"empty label":           {func(s *Settings) { s.MaintenanceLabel = "" }, MaintenanceLabelName},
		"label with spaces":     {func(s *Settings) { s.MaintenanceLabel = "lull maintenance" }, MaintenanceLabelName},
		"bad toleration key":    {func(s *Settings) { s.TolerationKey = "-x-" }, TolerationKeyName},
		"bad namespace":         {func(s *Settings) { s.LeaseNamespace = "Lull_Leases" }, LeaseNamespaceName},
		"empty namespace":       {func(s *Settings) { s.LeaseNamespace = "" }, LeaseNamespaceName},
		"unknown window policy": {func(s *Settings) { s.NodesWithoutWindow = "Sometimes" }, NodesWithoutWindowName},
		"lower-case policy":     {func(s *Settings) { s.NodesWithoutWindow = "permissive" }, NodesWithoutWindowName},
		"zero budget":           {func(s *Settings) { s.DefaultMaxUnavailable = 0 }, DefaultMaxUnavailableName},
		"negative budget":       {func(s *Settings) { s.DefaultMaxUnavailable = -1 }, DefaultMaxUnavailableName},
		"zero horizon":          {func(s *Settings) { s.WindowHorizon = 0 }, WindowHorizonName},
		"negative horizon":      {func(s *Settings) { s.WindowHorizon = -time.Hour }, WindowHorizonName},
	} {
		t.Run(name, func(t *testing.T) {
			s := Defaults()
			tc.mutate(&s)
			err := s.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), "--"+tc.bad.Flag, "the flag's error names the flag")
			errs := s.ValidateArgs(nil)
			require.NotEmpty(t, errs)
			for _, e := range errs {
				assert.Equal(t, tc.bad.Arg, e.Field, "the argument's error names the argument, and only the broken setting is reported")
			}
		})
	}
}

// Every binary registers the settings with AddFlags (pflag): the defaults
// are Defaults(), each help says which components must agree, and there is
// a flag for every setting and nothing else.
func TestAddFlags(t *testing.T) {
	var pf Settings
	pfFS := pflag.NewFlagSet("pflag", pflag.ContinueOnError)
	pf.AddFlags(pfFS)
	require.NoError(t, pfFS.Parse(nil))
	assert.Equal(t, Defaults(), pf)
	names := []Name{MaintenanceLabelName, TolerationKeyName, LeaseNamespaceName, NodesWithoutWindowName, DefaultMaxUnavailableName, WindowHorizonName}
	for _, n := range names {
		p := pfFS.Lookup(n.Flag)
		require.NotNil(t, p, n.Flag)
		assert.True(t, strings.Contains(p.Usage, "must agree"), "%s: the help says which components must agree", n.Flag)
	}
	visited := 0
	pfFS.VisitAll(func(*pflag.Flag) { visited++ })
	assert.Equal(t, len(names), visited, "a flag for every setting, and nothing else")

	require.NoError(t, pfFS.Parse([]string{"--maintenance-label=example.com/m", "--toleration-key=example.com/t", "--lease-namespace=leases",
		"--nodes-without-window=Restrictive", "--default-max-unavailable=4", "--window-horizon=48h"}))
	assert.Equal(t, Settings{MaintenanceLabel: "example.com/m", TolerationKey: "example.com/t", LeaseNamespace: "leases",
		NodesWithoutWindow: NoWindowRestrictive, DefaultMaxUnavailable: 4, WindowHorizon: 48 * time.Hour}, pf)
}

func TestAddFlagsOmit(t *testing.T) {
	s := Settings{TolerationKey: "stale"}
	fs := pflag.NewFlagSet("omit", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s.AddFlags(fs, TolerationKeyName)
	assert.Nil(t, fs.Lookup(TolerationKeyName.Flag))
	assert.NotNil(t, fs.Lookup(MaintenanceLabelName.Flag))
	require.NoError(t, fs.Parse(nil))
	assert.Equal(t, Defaults(), s, "an omitted setting keeps its default")
	require.Error(t, fs.Parse([]string{"--toleration-key=x"}))
}

// --agent-namespace is registered once for lull-drainer and kubectl-lull:
// the same name, default and help, and the same validation.
func TestAgentNamespaceFlag(t *testing.T) {
	var pf string
	pfFS := pflag.NewFlagSet("pflag", pflag.ContinueOnError)
	AddAgentNamespaceFlag(pfFS, &pf)
	require.NoError(t, pfFS.Parse(nil))
	assert.Equal(t, "lull-system", pf, "lull-agent's --namespace default")
	std := pf
	p := pfFS.Lookup(AgentNamespaceFlag)
	require.NotNil(t, p)
	assert.Contains(t, p.Usage, "must agree")
	require.NoError(t, pfFS.Parse([]string{"--agent-namespace=agents"}))
	assert.Equal(t, "agents", pf)

	assert.NoError(t, ValidateAgentNamespace(std))
	for _, bad := range []string{"", "Lull_System", "a.b"} {
		err := ValidateAgentNamespace(bad)
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), "--agent-namespace", "the error names the flag")
	}
}
