package install

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"lull.dev/lull/test/framework"
)

// TestGuardWithoutParameters: issue 43, finding 5. Without the ConfigMap
// lull-admission (a `kubectl delete -k` that removed lull's namespace
// first, a ConfigMap deleted by mistake) the guard refused every write to a
// Node carrying the maintenance label: the API server collects a binding's
// parameters before it looks at the request, and parameterNotFoundAction:
// Deny refused cordons, uncordons, lull giving back its cordon, and the node
// lifecycle controller's taints and status writes, so the pods of a dead
// labelled node were never evicted. Now only a change of the label itself
// fails closed, and its refusal says what is missing and how to restore it.
func TestGuardWithoutParameters(t *testing.T) {
	g := installGuarded(t)
	g.must("apply", "-f", g.file("more-nodes.yaml", guardNodes("n5", "n6")))

	// The node lifecycle controller (kube-controller-manager's
	// node-controller) with the operators' RBAC as well: kubectl reads
	// nodes/status before it patches it, which the controller need not.
	nodeController := append(serviceAccount("kube-system", "node-controller", ""), "--as-group="+framework.GuardOperators)
	admin := []string(nil)
	noParams := refusedBy("lull-maintenance-label-params-missing", "parameters", "lull-admission", "are missing", "kubectl apply")
	label := func(node, value string, extra ...string) []string {
		return append([]string{"label", "node", node, "lull.dev/maintenance=" + value, "--overwrite"}, extra...)
	}
	unlabel := func(node string) []string { return []string{"label", "node", node, "lull.dev/maintenance-"} }
	cordon := func(node string, on bool) []string {
		return mergePatch("node", node, fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on))
	}
	unknown := `{"status":{"conditions":[{"type":"Ready","status":"Unknown","reason":"NodeStatusUnknown","message":"Kubelet stopped posting node status."}]}}`

	g.steps(t, []guardStep{
		{name: "a maintainer labels a node", as: mo, args: label("n5", "kernel-update")},
		{name: "a maintainer labels another", as: mo, args: label("n6", "hardware")},
	})

	g.must("-n", "lull-system", "delete", "configmap", "lull-admission")

	t.Run("without lull-admission, a labelled node is still the cluster's", func(t *testing.T) {
		g.steps(t, []guardStep{
			// The API server notices the deletion within moments.
			{name: "a maintainer's label change is refused (a dry run)", as: mo, args: label("n5", "hardware", "--dry-run=server"), refused: noParams, eventually: true},
			// A patch, as lull-drainer cordons: kubectl cordon reports a
			// refused patch on stderr but exits 0.
			{name: "the admin cordons it", as: admin, args: cordon("n5", true)},
			{name: "the admin uncordons it", as: admin, args: cordon("n5", false)},
			{name: "lull-drainer cordons it", as: drainer, args: cordon("n5", true)},
			{name: "lull-drainer gives back its cordon", as: drainer, args: cordon("n5", false)},
			{name: "the node lifecycle controller marks it unreachable", as: nodeController,
				args: []string{"taint", "node", "n5", "node.kubernetes.io/unreachable:NoExecute"}},
			{name: "the node lifecycle controller records its Ready Unknown", as: nodeController, args: statusPatch("node", "n5", unknown)},
			{name: "the node lifecycle controller removes the taint", as: nodeController,
				args: []string{"taint", "node", "n5", "node.kubernetes.io/unreachable:NoExecute-"}},
			{name: "the admin taints it NoExecute", as: admin, args: []string{"taint", "node", "n6", "node.kubernetes.io/unreachable:NoExecute"}},
			{name: "the admin removes the taint", as: admin, args: []string{"taint", "node", "n6", "node.kubernetes.io/unreachable:NoExecute-"}},
			{name: "an operator moves it to another pool", as: alice, args: []string{"label", "node", "n5", "pool=blue"}},
			{name: "an operator annotates it", as: alice, args: []string{"annotate", "node", "n5", "example.com/ticket=OPS-1"}},
			{name: "a kubelet heartbeat passes", as: alice, args: statusPatch("node", "n6",
				`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"heartbeat"}]}}`)},

			{name: "a maintainer cannot change the label", as: mo, args: label("n5", "hardware"), refused: noParams},
			{name: "a maintainer cannot remove it", as: mo, args: unlabel("n5"), refused: noParams},
			{name: "the admin cannot change it", as: admin, args: label("n5", "hardware"), refused: noParams},
			{name: "the admin cannot remove it", as: admin, args: unlabel("n6"), refused: noParams},
			{name: "lull-drainer cannot remove it", as: drainer, args: unlabel("n6"), refused: noParams},
			{name: "an operator cannot add it", as: alice, args: label("n1", "kernel-update"), refused: noParams},
			{name: "a maintainer cannot add it", as: mo, args: label("n1", "kernel-update"), refused: noParams},
			{name: "copying what the guard writes does not pass", as: mo, args: mergePatch("node", "n5",
				`{"metadata":{"labels":{"lull.dev/maintenance":"hardware"},"annotations":{"lull.dev/maintenance-label-params":"lull-system/lull-admission"}}}`),
				refused: noParams},
			{name: "nor does adding it through nodes/status", as: admin, args: statusPatch("node", "n1",
				`{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`), refused: refusedBy("lull-maintenance-label-status")},
		})
		for node, want := range map[string]string{"n1": "", "n5": "kernel-update", "n6": "hardware"} {
			if got := g.jsonpath(t, `{.metadata.labels.lull\.dev/maintenance}`, "get", "node", node); got != want {
				t.Errorf("node %s carries lull.dev/maintenance=%q, want %q", node, got, want)
			}
		}
		for _, node := range []string{"n5", "n6"} {
			if got := g.jsonpath(t, "{.spec.unschedulable}", "get", "node", node); got == "true" {
				t.Errorf("node %s is cordoned at the end, want uncordoned", node)
			}
			if got := g.jsonpath(t, "{.spec.taints}", "get", "node", node); strings.Contains(got, "unreachable") {
				t.Errorf("node %s keeps the taint at the end: %s", node, got)
			}
		}
	})

	// The refusal's way back: the ConfigMap, from the install.
	g.must("apply", "--server-side", "-f", filepath.Join(framework.RepoRoot(), "manifests", "admission", "params.yaml"))

	t.Run("with lull-admission back, the guard judges again", func(t *testing.T) {
		g.eventuallyAllowed(append(append([]string{}, mo...), label("n5", "hardware", "--dry-run=server")...))
		g.steps(t, []guardStep{
			{name: "an operator cannot change it", as: alice, args: label("n5", "hardware"),
				refused: refusedBy("lull-maintenance-label", `only the lull drainer and members of group "lull:maintainers"`)},
			{name: "a maintainer changes it", as: mo, args: label("n5", "hardware")},
			{name: "lull-drainer removes it", as: drainer, args: unlabel("n5")},
			{name: "a maintainer removes the other", as: mo, args: unlabel("n6")},
		})
	})
}

// eventuallyAllowed asks for up to a minute until the request (kubectl
// arguments, a server dry run) is allowed: a policy created or a parameter
// restored moments ago is not in force at once.
func (g *guarded) eventuallyAllowed(args []string) {
	g.t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(g.t.Context(), 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := g.kubectl(args...)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		g.t.Fatalf("%s: still refused after a minute: %s", strings.Join(args, " "), last)
	}
}
