package cli

import (
	"bytes"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/agentlease"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/internal/plan"
	"lull.dev/lull/internal/policy"
)

// stepsPolicy has the rules of docs/actions.md's worked example, and
// hardware work that powers the node off.
func stepsPolicy() *lullv1alpha1.DisruptionPolicy {
	return &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "site"}, Spec: lullv1alpha1.DisruptionPolicySpec{Rules: []lullv1alpha1.DisruptionRule{
		{Name: "ssh-keys", Class: "ssh-keys", Action: lullv1alpha1.ActionNone},
		{Name: "chrony", Class: "chrony-config", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepRestartService, Unit: "chronyd", Timeout: &lullv1alpha1.Duration{Duration: 2 * time.Minute}}}},
		{Name: "kernel", Class: "kernel-update", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.ActionDrain}, {Type: lullv1alpha1.StepReboot}}},
		{Name: "hardware", Class: "hardware", Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.ActionDrain}, {Type: lullv1alpha1.StepPowerOff}}},
	}}}
}

// webPod is a pod on node n1 a drain would evict.
func webPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "u", Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{NodeName: "n1", TerminationGracePeriodSeconds: ptr.To[int64](30)},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// n1Agent is lull-agent's lease on n1, renewed a moment ago: lull-agent
// runs there.
func n1Agent() *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: agentlease.Name("n1"), Namespace: agentlease.DefaultNamespace,
		Labels: map[string]string{agentlease.ComponentLabel: agentlease.Component}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("lull-agent-x7k2p"), LeaseDurationSeconds: ptr.To(int32(agentlease.Duration / time.Second)),
			RenewTime: &metav1.MicroTime{Time: now.Add(-5 * time.Second)}}}
}

// stepsCluster is node n1 with a pod and lull-agent, the steps policy and
// objs, loaded as the preview verbs load it.
func stepsCluster(t *testing.T, objs ...client.Object) (client.Client, *plan.Cluster) {
	t.Helper()
	return stepsClusterWithoutAgent(t, append(objs, n1Agent())...)
}

// stepsClusterWithoutAgent is stepsCluster where lull-agent does not run
// on n1.
func stepsClusterWithoutAgent(t *testing.T, objs ...client.Object) (client.Client, *plan.Cluster) {
	t.Helper()
	objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, stepsPolicy())
	c := crfake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).Build()
	po := plan.DefaultOptions()
	po.Clock = clocktesting.NewFakeClock(now)
	cl, err := plan.Load(t.Context(), c, po)
	require.NoError(t, err)
	t.Cleanup(cl.Forecast.Stop)
	return c, cl
}

// previewClasses previews a request of classes for n1, as `plan` does.
func previewClasses(t *testing.T, classes ...string) *plan.Result {
	t.Helper()
	return previewOn(t, stepsCluster, classes...)
}

// previewOn previews a request of classes for n1 of the cluster load makes.
func previewOn(t *testing.T, load func(*testing.T, ...client.Object) (client.Client, *plan.Cluster), classes ...string) *plan.Result {
	t.Helper()
	c, cl := load(t)
	req, err := buildRequest([]string{"n1"}, "", classes, nil, "", nil)
	require.NoError(t, err)
	res, err := cl.Preview(t.Context(), c, fake.NewClientset(webPod()), req)
	require.NoError(t, err)
	require.Len(t, res.Nodes, 1)
	return res
}

// plan merges the classes' steps with internal/policy's merge (the drainer's
// decision) and shows the merged steps, the rule of each class, and what
// a Reboot or PowerOff covers.
func TestPlanMergesClasses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		classes []string
		action  lullv1alpha1.DisruptionAction
		steps   string // the STEPS cell
		rule    string
		start   plan.Start
		covered []string
		evicts  bool
		golden  string
	}{
		{name: "acceptance: ssh-keys, chrony-config, kernel-update", classes: []string{"ssh-keys", "chrony-config", "kernel-update"},
			action: lullv1alpha1.StepReboot, steps: "Cordon,Drain,Reboot", rule: "site/kernel", start: plan.StartNow,
			covered: []string{"RestartService chronyd (chrony-config) covered by Reboot"}, evicts: true, golden: "plan-classes"},
		{name: "one class, as before", classes: []string{"kernel-update"},
			action: lullv1alpha1.StepReboot, steps: "Cordon,Drain,Reboot", rule: "site/kernel", start: plan.StartNow, evicts: true},
		{name: "a service restart alone drains nothing", classes: []string{"chrony-config"},
			action: lullv1alpha1.StepRestartService, steps: "RestartService:chronyd", rule: "site/chrony", start: plan.StartNow},
		{name: "None alone completes at once", classes: []string{"ssh-keys"},
			action: lullv1alpha1.ActionNone, steps: "-", rule: "site/ssh-keys", start: plan.StartImmediately},
		{name: "a power-off covers the reboot and the restart", classes: []string{"kernel-update", "hardware", "chrony-config"},
			action: lullv1alpha1.StepPowerOff, steps: "Cordon,Drain,PowerOff", rule: "site/hardware", start: plan.StartNow, evicts: true,
			covered: []string{"RestartService chronyd (chrony-config) covered by PowerOff", "Reboot (kernel-update) covered by PowerOff"}},
		{name: "a class no rule matches is drained", classes: []string{"chrony-config", "firmware"},
			action: lullv1alpha1.ActionDrain, steps: "Cordon,Drain,RestartService:chronyd", rule: lullv1alpha1.DefaultRuleName, start: plan.StartNow, evicts: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := previewClasses(t, tc.classes...)
			n := res.Nodes[0]
			// The same decision the drainer takes: internal/policy's merge.
			want := policy.Merge([]lullv1alpha1.DisruptionPolicy{*stepsPolicy()}).Decide(tc.classes, nil)
			require.Equal(t, want.Steps, n.Steps)
			require.Equal(t, want.Classes, n.Classes)
			require.Len(t, n.Classes, len(tc.classes), "one rule per class")
			require.Equal(t, tc.action, n.Action)
			require.Equal(t, tc.steps, stepsCell(n.Steps))
			require.Equal(t, tc.rule, n.Rule)
			require.Equal(t, tc.start, n.Start, n.WaitingFor)
			require.Equal(t, tc.covered, coveredLines(n.Steps))
			require.Equal(t, tc.evicts, len(n.Evict) > 0, "a plan with a Drain step previews the drain")
			require.Equal(t, tc.classes, res.Classes)

			var buf bytes.Buffer
			require.NoError(t, renderPlan(&buf, res, true, humanOptions{}))
			for _, c := range n.Classes {
				require.Contains(t, buf.String(), "  class "+c.Class+" (rule "+c.RuleRef()+"): ")
			}
			for _, line := range tc.covered {
				require.Contains(t, buf.String(), "\n  "+line+"\n")
			}
			if tc.golden != "" {
				golden(t, tc.golden, buf.Bytes())
				obj, err := planObject(res)
				require.NoError(t, err)
				golden(t, tc.golden+"-yaml", []byte(printAs(t, []string{"-o", "yaml"}, obj, nil)))
			}
		})
	}
}

// --class takes one class, several repeated, or several comma-separated;
// the CLI refuses what admission would.
func TestClassFlag(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		classes []string
		err     string
	}{
		{args: []string{"--class", "kernel-update"}, classes: []string{"kernel-update"}},
		{args: []string{"--class", "chrony-config", "--class", "kernel-update"}, classes: []string{"chrony-config", "kernel-update"}},
		{args: []string{"--class", "chrony-config,kernel-update"}, classes: []string{"chrony-config", "kernel-update"}},
		{args: []string{"--class", "ssh-keys,chrony-config", "--class", "kernel-update"}, classes: []string{"ssh-keys", "chrony-config", "kernel-update"}},
		{args: []string{"--class", "a,b,a"}, err: `--class: "a" is given twice; name each class once`},
		{args: []string{"--class", "a,"}, err: "--class: the maintenance class is empty"},
		{args: []string{"--class", ""}, err: "say what changes: --class (a maintenance class), or --from and --to"},
		{args: []string{"--class", "a,Kernel"}, err: `--class: "Kernel" is not a valid maintenance class`},
		{args: []string{"--class", "a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q"}, err: "--class: 17 classes; a request names at most 16"},
	} {
		for _, verb := range []func(*options) *cobra.Command{newPlanCommand, newRequestCommand} {
			cmd := verb(testOptions())
			require.NoError(t, cmd.ParseFlags(tc.args), "%s %v", cmd.Name(), tc.args)
			classes, err := cmd.Flags().GetStringSlice("class")
			require.NoError(t, err)
			req, err := buildRequest([]string{"n1"}, "", classes, nil, "", nil)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err, "%s %v", cmd.Name(), tc.args)
				continue
			}
			require.NoError(t, err, "%s %v", cmd.Name(), tc.args)
			// What the request writes: spec.classes, in the order given.
			spec := req.Spec("n1")
			require.Equal(t, tc.classes, spec.Classes, "%s %v", cmd.Name(), tc.args)
		}
	}
}

// STEP shows where a request handed to lull-agent is: its host step's
// place, what it is and its state.
func TestStatusStepCell(t *testing.T) {
	started := &metav1.Time{Time: now.Add(-2 * time.Minute)}
	finished := &metav1.Time{Time: now.Add(-time.Hour)}
	restart := lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepRestartService, Unit: "chronyd", State: lullv1alpha1.ActionSucceeded, StartedAt: started, FinishedAt: started}
	reboot := lullv1alpha1.ActionStatus{Type: lullv1alpha1.StepReboot, State: lullv1alpha1.ActionRunning, StartedAt: started}
	for _, tc := range []struct {
		name string
		row  NodeStatus
		want string
	}{
		{"acting, the reboot running", actingStatus(), "1/1 Reboot (Running, 2m)"},
		{"acting, the second of two running", NodeStatus{Phase: lullv1alpha1.PhaseActing, Actions: []lullv1alpha1.ActionStatus{restart, reboot}}, "2/2 Reboot (Running, 2m)"},
		{"acting, nothing started yet", NodeStatus{Phase: lullv1alpha1.PhaseActing,
			Actions: []lullv1alpha1.ActionStatus{{Type: lullv1alpha1.StepRestartService, Unit: "chronyd", State: lullv1alpha1.ActionPending}}},
			"1/1 RestartService chronyd (Pending)"},
		{"a fallback reboot", NodeStatus{Phase: lullv1alpha1.PhaseActing, Actions: []lullv1alpha1.ActionStatus{
			{Type: lullv1alpha1.StepRestartService, Unit: "chronyd", State: lullv1alpha1.ActionTimedOut, FinishedAt: started},
			{Type: lullv1alpha1.StepReboot, Fallback: true, State: lullv1alpha1.ActionRunning, StartedAt: started}}},
			"2/2 Reboot (fallback; Running, 2m)"},
		{"powered off", NodeStatus{Phase: lullv1alpha1.PhasePoweredOff, Actions: []lullv1alpha1.ActionStatus{
			{Type: lullv1alpha1.StepPowerOff, State: lullv1alpha1.ActionSucceeded, StartedAt: finished, FinishedAt: finished}}},
			"1/1 PowerOff (Succeeded, 60m ago)"},
		{"waiting for an agent: the plan's first host step", NodeStatus{Phase: lullv1alpha1.PhaseWaitingForAgent, Steps: acceptancePlan()}, "1/1 Reboot (Pending)"},
		{"draining: no host step yet", NodeStatus{Phase: lullv1alpha1.PhaseDraining, Steps: acceptancePlan()}, "-"},
		{"no request", NodeStatus{}, "-"},
	} {
		t.Run(tc.name, func(t *testing.T) { require.Equal(t, tc.want, stepCell(tc.row, now)) })
	}
}

// status of a request of several classes in phase Acting: its classes,
// its plan and its host steps as the drainer recorded them.
func TestStatusOfAnActingRequest(t *testing.T) {
	classes := []string{"ssh-keys", "chrony-config", "kernel-update"}
	d := policy.Merge([]lullv1alpha1.DisruptionPolicy{*stepsPolicy()}).Decide(classes, nil)
	acting := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: classes, Reason: "CVE-2026-1234, new NTP servers"},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseActing, Decision: &d, StartedAt: &metav1.Time{Time: now.Add(-10 * time.Minute)},
			CordonedByLull: true, Pods: &lullv1alpha1.PodCounts{Total: 1, Evicted: 1},
			WaitingFor: "lull-agent runs Reboot (since 2026-11-21T09:58:00Z)",
			Actions: []lullv1alpha1.ActionStatus{{Type: lullv1alpha1.StepReboot, Timeout: lullv1alpha1.Duration{Duration: 15 * time.Minute},
				State: lullv1alpha1.ActionRunning, StartedAt: &metav1.Time{Time: now.Add(-2 * time.Minute)}, BootID: "boot-1"}}}}
	c, _ := stepsCluster(t, acting)
	po := plan.DefaultOptions()
	po.Clock = clocktesting.NewFakeClock(now)
	rows, at, err := loadStatus(t.Context(), c, po, nil)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	r := rows[0]
	require.Equal(t, "ssh-keys,chrony-config,kernel-update", r.Class)
	require.Equal(t, classes, r.Classes)
	require.Equal(t, lullv1alpha1.StepReboot, r.Action)
	require.Equal(t, "site/kernel", r.Rule)
	require.Equal(t, d.Steps, r.Steps)
	require.Len(t, r.Actions, 1)
	require.Equal(t, lullv1alpha1.StepReboot, r.Actions[0].Type)
	require.Equal(t, lullv1alpha1.ActionRunning, r.Actions[0].State)
	require.True(t, now.Add(-2*time.Minute).Equal(r.Actions[0].StartedAt.Time))
	require.NotNil(t, r.Windows, "the windows of a request of several classes")
	require.Equal(t, "1/1 Reboot (Running, 2m)", stepCell(r, at))
	var buf bytes.Buffer
	require.NoError(t, renderStatus(&buf, rows, at, humanOptions{}))
	golden(t, "status-acting", buf.Bytes())
	obj, err := statusObject(rows)
	require.NoError(t, err)
	require.Equal(t, "Reboot Running", printAs(t, []string{"-o", "jsonpath={.items[0].actions[0].type} {.items[0].actions[0].state}"}, obj, nil))
	require.Equal(t, "ssh-keys chrony-config kernel-update", printAs(t, []string{"-o", "jsonpath={.items[0].classes[*]}"}, obj, nil))
}

// request writes spec.classes (a forced update replaces them), and names
// the merged steps.
func TestRequestWritesClasses(t *testing.T) {
	pending := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec:   lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1", Classes: []string{"ssh-keys"}},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseWaitingForWindow}}
	for _, tc := range []struct {
		name     string
		classes  []string
		existing *lullv1alpha1.NodeMaintenance
		want     []string
		out      string
		noAgent  bool
	}{
		{name: "one class", classes: []string{"kernel-update"}, want: []string{"kernel-update"},
			out: "nodemaintenance/n1 requested: Reboot (rule site/kernel): Cordon, Drain, Reboot; starts now\n"},
		{name: "two classes", classes: []string{"chrony-config", "kernel-update"}, want: []string{"chrony-config", "kernel-update"},
			out: "nodemaintenance/n1 requested: Reboot (rule site/kernel): Cordon, Drain, Reboot; starts now\n" +
				"  RestartService chronyd (chrony-config) covered by Reboot\n"},
		{name: "None", classes: []string{"ssh-keys"}, want: []string{"ssh-keys"},
			out: "nodemaintenance/n1 requested: None (rule site/ssh-keys); completes at once (nothing disruptive)\n"},
		{name: "forced: an existing request of one class gets two", classes: []string{"chrony-config", "kernel-update"}, existing: pending,
			want: []string{"chrony-config", "kernel-update"},
			out:  "nodemaintenance/n1 updated: Reboot (rule site/kernel): Cordon, Drain, Reboot; starts now\n  RestartService chronyd (chrony-config) covered by Reboot\n"},
		{name: "no lull-agent on the node: requested, and it waits for one", classes: []string{"kernel-update"}, want: []string{"kernel-update"}, noAgent: true,
			out: "nodemaintenance/n1 requested: Reboot (rule site/kernel): Cordon, Drain, Reboot; starts when lull-agent runs on the node\n"},
		{name: "no lull-agent, no host steps: starts now", classes: []string{"firmware"}, want: []string{"firmware"}, noAgent: true,
			out: "nodemaintenance/n1 requested: Drain (rule (default)): Cordon, Drain; starts now\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []client.Object
			if tc.existing != nil {
				objs = append(objs, tc.existing.DeepCopy())
			}
			load := stepsCluster
			if tc.noAgent {
				load = stepsClusterWithoutAgent
			}
			c, cl := load(t, objs...)
			req, err := buildRequest([]string{"n1"}, "", tc.classes, nil, "", nil)
			require.NoError(t, err)
			res, err := cl.Preview(t.Context(), c, fake.NewClientset(webPod()), req)
			require.NoError(t, err)
			var out, errOut bytes.Buffer
			o := testOptions()
			o.out, o.errOut = &out, &errOut
			require.NoError(t, o.requestAll(t.Context(), c, cl, res, req, "CVE-2026-1234", tc.existing != nil, &changeFlags{}))
			require.Equal(t, tc.out, out.String())
			var nm lullv1alpha1.NodeMaintenance
			require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: "n1"}, &nm))
			require.Equal(t, tc.want, nm.Spec.Classes, "spec.classes")
			require.Equal(t, "CVE-2026-1234", nm.Spec.Reason)
		})
	}
}

// Where lull-agent does not run, plan says what the drainer will do: a
// plan with host steps waits for an agent (phase WaitingForAgent), with the
// drainer's message; a plan without host steps starts as it would.
func TestPlanWaitsForAgent(t *testing.T) {
	const noAgent = "the plan (Cordon, Drain, Reboot) has steps lull-agent carries out on the node: " +
		"no lull-agent runs on node n1 (no Lease lull-system/lull-agent-n1): is the lull-agent DaemonSet installed, and its pod running on the node?"
	res := previewOn(t, stepsClusterWithoutAgent, "ssh-keys", "chrony-config", "kernel-update")
	n := res.Nodes[0]
	require.Equal(t, plan.StartAgent, n.Start)
	require.Equal(t, noAgent, n.WaitingFor)
	require.Nil(t, n.StartAt)
	require.Equal(t, []string{"shop/web-0"}, n.Evict, "the drain it will do is previewed")
	var buf bytes.Buffer
	require.NoError(t, renderPlan(&buf, res, true, humanOptions{}))
	golden(t, "plan-no-agent", buf.Bytes())
	require.Contains(t, buf.String(), "\nn1: starts when lull-agent runs on the node\n")
	require.Contains(t, buf.String(), "\n  waiting for: "+noAgent+"\n")
	obj, err := planObject(res)
	require.NoError(t, err)
	require.Equal(t, "WaitingForAgent "+noAgent, printAs(t, []string{"-o", "jsonpath={.items[0].start} {.items[0].waitingFor}"}, obj, nil))

	// The same plan where lull-agent runs: it starts now, as before.
	require.Equal(t, plan.StartNow, previewClasses(t, "ssh-keys", "chrony-config", "kernel-update").Nodes[0].Start)
	// No host steps: no agent is needed.
	require.Equal(t, plan.StartNow, previewOn(t, stepsClusterWithoutAgent, "firmware").Nodes[0].Start)
}
