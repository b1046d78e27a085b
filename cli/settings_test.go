package cli

import (
	"bytes"
	"context"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	clocktesting "k8s.io/utils/clock/testing"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/agentlease"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/internal/plan"
	"lull.dev/lull/internal/settings"
)

func testOptions() *options {
	var out bytes.Buffer
	return &options{flags: genericclioptions.NewConfigFlags(true), out: &out, errOut: &out, clock: clocktesting.NewFakeClock(now)}
}

// kubectl-lull's shared-settings flags are global, default to internal/settings'
// one set of defaults (as lull-drainer's flags and lull-scheduler's args
// do), and reach the preview options of every verb that decides like the
// drainer.
func TestSharedSettingsFlags(t *testing.T) {
	o := testOptions()
	root := newCommand(o)
	require.NoError(t, root.PersistentFlags().Parse(nil))
	assert.Equal(t, settings.Defaults(), o.settings)
	assert.Equal(t, settings.Defaults(), o.planOptions(&drainerFlags{}).Settings)

	require.NoError(t, root.PersistentFlags().Parse([]string{"--maintenance-label=example.com/maintenance", "--toleration-key=example.com/disruption",
		"--lease-namespace=leases", "--nodes-without-window=Restrictive", "--default-max-unavailable=2", "--window-horizon=48h"}))
	po := o.planOptions(&drainerFlags{})
	assert.Equal(t, o.settings, po.Settings)
	assert.Equal(t, "example.com/maintenance", po.MaintenanceLabel)
	assert.Equal(t, "example.com/disruption", po.TolerationKey)
	o.medik8s = true
	assert.Equal(t, "medik8s-leases", o.planOptions(&drainerFlags{}).LeaseNamespace, "--medik8s picks the medik8s lease namespace")
}

// --agent-namespace is global, registered by internal/settings as lull-drainer
// registers it (same default and help), and reaches the preview options.
func TestAgentNamespaceFlag(t *testing.T) {
	o := testOptions()
	root := newCommand(o)
	require.NoError(t, root.PersistentFlags().Parse(nil))
	assert.Equal(t, agentlease.DefaultNamespace, o.planOptions(&drainerFlags{}).AgentNamespace)
	f := root.PersistentFlags().Lookup(settings.AgentNamespaceFlag)
	require.NotNil(t, f)
	drainer := pflag.NewFlagSet("lull-drainer", pflag.ContinueOnError)
	var ns string
	settings.AddAgentNamespaceFlag(drainer, &ns)
	assert.Equal(t, drainer.Lookup(settings.AgentNamespaceFlag).Usage, f.Usage)
	assert.Equal(t, drainer.Lookup(settings.AgentNamespaceFlag).DefValue, f.DefValue)

	require.NoError(t, root.PersistentFlags().Parse([]string{"--agent-namespace=agents"}))
	assert.Equal(t, "agents", o.planOptions(&drainerFlags{}).AgentNamespace)
	assert.Equal(t, plan.DefaultOptions().AgentNamespace, testOptions().planOptions(&drainerFlags{}).AgentNamespace, "unset: the drainer's default")
}

func TestBadSharedSettingsRejected(t *testing.T) {
	for _, arg := range []string{"--nodes-without-window=sometimes", "--toleration-key=not a key", "--default-max-unavailable=0", "--agent-namespace=Lull_System"} {
		var out bytes.Buffer
		code := Run([]string{arg, "windows"}, &out, &out)
		assert.Equal(t, ExitError, code, arg)
		assert.Contains(t, out.String(), "invalid settings", arg)
	}
}

// why and status read the configured label and toleration keys, not the
// constants: a node labelled with the default key is no request for a
// cluster configured with another.
func TestWhyAndStatusUseConfiguredKeys(t *testing.T) {
	const label, toleration = "example.com/maintenance", "example.com/disruption"
	c := crfake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "custom", Labels: map[string]string{label: "kernel-update"}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "default", Labels: map[string]string{lullv1alpha1.MaintenanceLabel: "kernel-update"}}},
	).Build()
	po := plan.DefaultOptions()
	po.MaintenanceLabel, po.TolerationKey, po.Clock = label, toleration, clocktesting.NewFakeClock(now)
	cl, err := plan.Load(context.Background(), c, po)
	require.NoError(t, err)
	defer cl.Forecast.Stop()

	tolerating := func(key string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
			Spec: corev1.PodSpec{Tolerations: []corev1.Toleration{{Key: key, Operator: corev1.TolerationOpExists}}}}
	}
	w := explain(cl, tolerating(lullv1alpha1.DisruptionTolerationKey), false)
	assert.False(t, w.Tolerates, "the default key is not the configured one")
	require.Len(t, w.Rejected, 1)
	assert.Equal(t, "custom", w.Rejected[0].Node, "only the node with the configured label is requested")
	w = explain(cl, tolerating(toleration), false)
	assert.True(t, w.Tolerates)
	assert.Empty(t, w.Rejected)

	rows, _, err := loadStatus(context.Background(), c, po, nil)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	assert.Equal(t, "custom", rows[0].Node)
	assert.Equal(t, "kernel-update", rows[0].Class)
}
