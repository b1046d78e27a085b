package cli

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/plan"
	"lull.dev/lull/lease"
)

// printAs prints obj as a verb does with the output flags args.
func printAs(t *testing.T, args []string, obj runtime.Object, human func(w *bytes.Buffer, h humanOptions) error) string {
	t.Helper()
	cmd := &cobra.Command{Use: "x"}
	out := addOutputFlags(cmd)
	require.NoError(t, cmd.ParseFlags(args))
	require.NoError(t, out.validate())
	var buf bytes.Buffer
	require.NoError(t, out.printObj(&buf, obj, func(h humanOptions) error { return human(&buf, h) }))
	return buf.String()
}

func TestPlanOutputFormats(t *testing.T) {
	res := planFixture()
	obj, err := planObject(res)
	require.NoError(t, err)
	human := func(w *bytes.Buffer, h humanOptions) error { return renderPlan(w, res, false, h) }
	for name, args := range map[string][]string{
		"plan-wide":           {"-o", "wide"},
		"plan-no-headers":     {"--no-headers"},
		"plan-name":           {"-o", "name"},
		"plan-jsonpath":       {"-o", `jsonpath={range .items[*]}{.metadata.name} {.start} {.startAt}{"\n"}{end}`},
		"plan-custom-columns": {"-o", "custom-columns=NODE:.metadata.name,START:.start,AT:.startAt,EVICT:.evict,BLOCKERS:.blockers[*].podDisruptionBudget"},
		"plan-json":           {"-o", "json"},
	} {
		t.Run(name, func(t *testing.T) { golden(t, name, []byte(printAs(t, args, obj, human))) })
	}
}

// The JSON of a plan decodes into the preview's own type, item by item,
// with the class and time of the plan on each.
func TestPlanJSONDecodesToPlanNodes(t *testing.T) {
	res := planFixture()
	obj, err := planObject(res)
	require.NoError(t, err)
	out := printAs(t, []string{"-o", "json"}, obj, nil)
	var list struct {
		APIVersion, Kind string
		Items            []struct {
			APIVersion string    `json:"apiVersion"`
			Kind       string    `json:"kind"`
			Class      string    `json:"class"`
			At         time.Time `json:"at"`
			plan.Node
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Equal(t, "v1", list.APIVersion)
	require.Equal(t, "List", list.Kind)
	require.Len(t, list.Items, len(res.Nodes))
	for i, it := range list.Items {
		require.Equal(t, "cli.lull.dev/v1alpha1", it.APIVersion)
		require.Equal(t, KindNodePlan, it.Kind)
		require.Equal(t, "kernel-update", it.Class)
		require.True(t, now.Equal(it.At))
		require.Equal(t, res.Nodes[i].Node, it.Node.Node)
		require.Equal(t, res.Nodes[i].Start, it.Start)
		require.Equal(t, res.Nodes[i].DrainEstimate, it.DrainEstimate)
	}
}

func TestStatusOutputFormats(t *testing.T) {
	rows := statusFixture()
	rows[0].Reason = "CVE-2026-1234"
	obj, err := statusObject(rows)
	require.NoError(t, err)
	human := func(w *bytes.Buffer, h humanOptions) error { return renderStatus(w, rows, now, h) }
	for name, args := range map[string][]string{
		"status-wide":                      {"-o", "wide"},
		"status-no-headers":                {"--no-headers"},
		"status-custom-columns-no-headers": {"-o", "custom-columns=NODE:.metadata.name,PHASE:.phase,HOLDER:.lease.holder", "--no-headers"},
		"status-yaml":                      {"-o", "yaml"},
	} {
		t.Run(name, func(t *testing.T) { golden(t, name, []byte(printAs(t, args, obj, human))) })
	}
}

func TestWindowsAndWhyOutputFormats(t *testing.T) {
	always := lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "canary"}, Spec: lullv1alpha1.MaintenanceWindowSpec{Strategy: lullv1alpha1.StrategyPermissive}}
	views := windowViews([]lullv1alpha1.MaintenanceWindow{always}, []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}}, now, 1)
	obj, err := windowsObject(views, true)
	require.NoError(t, err)
	human := func(w *bytes.Buffer, h humanOptions) error { return renderWindows(w, views, h) }
	golden(t, "windows-wide", []byte(printAs(t, []string{"-o", "wide"}, obj, human)))
	require.Equal(t, "windowstatus.cli.lull.dev/canary\n", printAs(t, []string{"-o", "name"}, obj, human), "one window asked for by name is one object")

	why := &Why{Pod: "shop/web-x", SchedulerName: "lull-scheduler", Nodes: 3, Rejected: []Rejection{{Node: "n1", Reason: "leased"}, {Node: "n2", Reason: "awaits maintenance"}}}
	obj, err = whyObject(why, "shop", "web-x")
	require.NoError(t, err)
	require.Equal(t, "n1 n2", printAs(t, []string{"-o", "jsonpath={.rejected[*].node}"}, obj, nil))
	require.Equal(t, "schedulingexplanation.cli.lull.dev/web-x\n", printAs(t, []string{"-o", "name"}, obj, nil))
	whyHuman := func(w *bytes.Buffer, h humanOptions) error { return renderWhy(w, why, h) }
	require.Equal(t, "Pod shop/web-x (scheduler lull-scheduler)\nNodeDisruption rejects 2 of 3 node(s) now:\nn1  leased\nn2  awaits maintenance\n",
		printAs(t, []string{"--no-headers"}, obj, whyHuman))
}

func TestLeaseOutputFormats(t *testing.T) {
	acquired := now.Add(-10 * time.Minute)
	infos := []*lease.Info{
		{Node: "n2", Namespace: "lull-leases", Holder: "fw-updater", Operation: "reboot", Reason: "firmware 2.1", Acquired: acquired, Renewed: now,
			Duration: 5 * time.Minute, Transitions: 2, UID: "uid-2"},
		// Written by hand without acquireTime and renewTime.
		{Node: "n1", Namespace: "lull-leases", Holder: "me", Duration: time.Minute, UID: "uid-1"},
	}
	views := leaseViews(infos)
	human := func(w *bytes.Buffer, h humanOptions) error { return printTable(w, leaseTable(views), h) }
	list, err := leasesObject(views, true)
	require.NoError(t, err)
	golden(t, "lease-table", []byte(printAs(t, nil, list, human)))
	golden(t, "lease-wide", []byte(printAs(t, []string{"-o", "wide"}, list, human)))
	require.Equal(t, "nodelease.cli.lull.dev/n1\nnodelease.cli.lull.dev/n2\n", printAs(t, []string{"-o", "name"}, list, human))
	one, err := leasesObject(views[1:], false)
	require.NoError(t, err)
	golden(t, "lease-json", []byte(printAs(t, []string{"-o", "json"}, one, human)))
}

func TestOutputFlagErrors(t *testing.T) {
	for args, want := range map[string]string{
		"-o=table":                    `-o "table": unknown output format; use one of wide, json, yaml, name, jsonpath=, jsonpath-file=, custom-columns=...`,
		"-o=custom-columns=":          "-o custom-columns= needs columns: HEADER:JSONPATH",
		"-o=custom-columns=NODE":      `-o custom-columns: "NODE" is not HEADER:JSONPATH`,
		"-o=custom-columns=N:.items[": "-o custom-columns: column N:",
		"-o=jsonpath={.items[*]":      `-o "jsonpath={.items[*]":`,
		"-o=go-template={{.x}}":       `-o "go-template={{.x}}": unknown output format`,
		"-o=jsonpath=":                `-o jsonpath= needs a template`,
		"-o=jsonpath-file=/no/such":   `-o jsonpath-file=/no/such: open /no/such`,
	} {
		cmd := &cobra.Command{Use: "x"}
		out := addOutputFlags(cmd)
		require.NoError(t, cmd.ParseFlags([]string{args}))
		err := out.validate()
		require.Error(t, err, args)
		require.Contains(t, err.Error(), want, args)
	}
}
