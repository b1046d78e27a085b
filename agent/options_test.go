package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The flags default to NewOptions' values; a node name is required and
// each bad flag is refused with its name.
func TestAgentOptions(t *testing.T) {
	o := NewOptions()
	o.Node = ""
	fs := pflag.NewFlagSet("lull-agent", pflag.ContinueOnError)
	o.AddFlags(fs)
	require.NoError(t, fs.Parse(nil))
	assert.Equal(t, DefaultStepTimeout, o.DefaultStepTimeout)
	assert.Equal(t, "lull-drainer", o.DrainerIdentity)
	assert.Equal(t, "lull-system", o.Namespace)
	assert.Equal(t, "systemctl reboot", o.Commands.Reboot)
	require.Len(t, o.Validate(), 1, "only the node name is missing")
	assert.Contains(t, o.Validate()[0].Error(), "--node-name")

	for flag, arg := range map[string]string{
		"--default-step-timeout":   "--default-step-timeout=0s",
		"--reboot-sentinel-period": "--reboot-sentinel-period=-1m",
		"--namespace":              "--namespace=Bad_NS",
		"--drainer-identity":       "--drainer-identity=",
	} {
		o := NewOptions()
		fs := pflag.NewFlagSet("lull-agent", pflag.ContinueOnError)
		o.AddFlags(fs)
		require.NoError(t, fs.Parse([]string{"--node-name=n1", arg}), arg)
		var all []string
		for _, err := range o.Validate() {
			all = append(all, err.Error())
		}
		assert.Contains(t, strings.Join(all, "\n"), flag, arg)
	}

	o = NewOptions()
	fs = pflag.NewFlagSet("lull-agent", pflag.ContinueOnError)
	o.AddFlags(fs)
	require.NoError(t, fs.Parse([]string{"--node-name=n1", "--default-step-timeout=5m", "-v=4"}))
	assert.Empty(t, o.Validate())
	assert.Equal(t, 5*time.Minute, o.DefaultStepTimeout)
}

// Run refuses bad flags with exit code 2 before it connects anywhere.
func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--node-name="}, {"--node-name=n1", "--default-step-timeout=-1s"}, {"--no-such-flag"}} {
		assert.Equal(t, 2, Run(args), args)
	}
}
