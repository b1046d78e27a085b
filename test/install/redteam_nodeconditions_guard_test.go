package install

import (
	"strings"
	"testing"
)

// Red team of cf44d28 (lull-drainer writes the node lifecycle conditions
// through nodes/status; the guard lull-node-conditions holds it to them),
// on a real kube-apiserver with lull installed. Promise 1: a stolen
// lull-drainer token cannot use nodes/status to change anything but the
// four lifecycle conditions with Lull reasons. Promise 3: lull's own
// legitimate writes are never refused by the guard.
//
// Every attack step of n1 is a server dry run (admission runs, nothing is
// stored), so each starts from the same node.
func TestGuardNodeConditionsRedTeam(t *testing.T) {
	g := installGuarded(t)
	sp := func(node, patch string, extra ...string) []string {
		return append([]string{"patch", "node", node, "--subresource=status", "--type=strategic", "-p", patch}, extra...)
	}
	jp := func(node, patch string, extra ...string) []string {
		return append([]string{"patch", "node", node, "--subresource=status", "--type=json", "-p", patch}, extra...)
	}
	dry := "--dry-run=server"
	only := refusedBy("lull-node-conditions")

	// n1 as a kubelet, a CSI driver and another maintenance tool left it.
	// Conditions: 0 Ready, 1 MemoryPressure, 2 the other tool's
	// MaintenanceInProgress.
	g.must(append([]string{"patch", "node", "n1", "--subresource=status", "--type=merge", "-p"},
		`{"status":{"conditions":[`+
			`{"type":"Ready","status":"True","reason":"KubeletReady","message":"ok"},`+
			`{"type":"MemoryPressure","status":"False","reason":"KubeletHasSufficientMemory","message":"ok"},`+
			`{"type":"MaintenanceInProgress","status":"True","reason":"FirmwareTool","message":"theirs"}],`+
			`"capacity":{"cpu":"4","memory":"8Gi","pods":"110"},"allocatable":{"cpu":"4","memory":"8Gi","pods":"110"},`+
			`"addresses":[{"type":"InternalIP","address":"10.0.0.1"},{"type":"Hostname","address":"n1"}],`+
			`"daemonEndpoints":{"kubeletEndpoint":{"Port":10250}},`+
			`"nodeInfo":{"machineID":"m","systemUUID":"s","bootID":"b","kernelVersion":"6.1","osImage":"linux","containerRuntimeVersion":"containerd://2.0.0",`+
			`"kubeletVersion":"v1.37.1","kubeProxyVersion":"","operatingSystem":"linux","architecture":"amd64"},`+
			`"images":[{"names":["registry.k8s.io/pause:3.10"],"sizeBytes":1000}]}}`)...)
	for _, extra := range []string{
		`{"status":{"volumesInUse":["kubernetes.io/csi/x^v1"],"volumesAttached":[{"name":"kubernetes.io/csi/x^v1","devicePath":"/dev/x"}]}}`,
		`{"status":{"runtimeHandlers":[{"name":"runc","features":{"recursiveReadOnlyMounts":true,"userNamespaces":true}}]}}`,
		`{"status":{"features":{"supplementalGroupsPolicy":true}}}`,
		`{"status":{"declaredFeatures":["InPlacePodVerticalScaling"]}}`,
	} {
		if _, err := g.kubectl("patch", "node", "n1", "--subresource=status", "--type=merge", "-p", extra); err != nil {
			t.Logf("setting up n1 (%s): %v", extra, err)
		}
	}
	t.Logf("n1 as set up: %s", g.jsonpath(t, `{.status}`, "get", "node", "n1"))

	ssaReady := g.file("ssa-ready.yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus:\n  conditions:\n"+
		"  - {type: Ready, status: 'False', reason: KubeletNotReady, message: x}\n")
	ssaDeclared := g.file("ssa-declared.yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus:\n  declaredFeatures: [FakeFeature, InPlacePodVerticalScaling]\n")
	put := g.file("put-status.yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus:\n  conditions:\n"+
		"  - {type: MaintenancePlanned, status: 'True', reason: LullWaitingForWindow, message: x}\n")

	t.Run("promise 1: what the guard holds", func(t *testing.T) {
		g.steps(t, []guardStep{
			{name: "not Ready (the guard is active)", as: drainer, args: sp("n1", `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"KubeletNotReady","message":"x"}]}}`, dry),
				refused: only, eventually: true},
			{name: "not NetworkUnavailable", as: drainer, args: sp("n1", `{"status":{"conditions":[{"type":"NetworkUnavailable","status":"True","reason":"NoRouteCreated","message":"x"}]}}`, dry), refused: only},
			{name: "not a condition of an unknown type, even with a Lull reason", as: drainer, args: sp("n1", `{"status":{"conditions":[{"type":"LullBackdoor","status":"True","reason":"LullX","message":"x"}]}}`, dry), refused: only},
			{name: "not a lifecycle type spelled otherwise", as: drainer, args: sp("n1", `{"status":{"conditions":[{"type":"drained","status":"True","reason":"LullDrained","message":"x"}]}}`, dry), refused: only},
			{name: "not Ready and MemoryPressure reordered", as: drainer, args: jp("n1", `[{"op":"move","from":"/status/conditions/1","path":"/status/conditions/0"}]`, dry), refused: only},
			{name: "not a second Ready", as: drainer, args: jp("n1", `[{"op":"add","path":"/status/conditions/-","value":{"type":"Ready","status":"False","reason":"KubeletNotReady","message":"x"}}]`, dry), refused: only},
			{name: "not Ready turned into a lifecycle condition", as: drainer, args: jp("n1", `[{"op":"replace","path":"/status/conditions/0","value":{"type":"Drained","status":"True","reason":"LullDrained","message":"x"}}]`, dry), refused: only},
			{name: "not the conditions replaced by a merge patch", as: drainer, args: []string{"patch", "node", "n1", "--subresource=status", "--type=merge", "-p",
				`{"status":{"conditions":[{"type":"MaintenancePlanned","status":"True","reason":"LullWaitingForWindow","message":"x"}]}}`, dry}, refused: only},
			{name: "not the other tool's condition flipped", as: drainer, args: jp("n1", `[{"op":"replace","path":"/status/conditions/2/status","value":"False"}]`, dry), refused: only},
			{name: "not the other tool's condition relabelled Lull", as: drainer, args: jp("n1", `[{"op":"replace","path":"/status/conditions/2/reason","value":"LullDraining"}]`, dry), refused: only},
			{name: "not the other tool's condition removed by a JSON patch", as: drainer, args: jp("n1", `[{"op":"remove","path":"/status/conditions/2"}]`, dry), refused: only},
			{name: "not a lifecycle condition without a reason", as: drainer, args: sp("n1", `{"status":{"conditions":[{"type":"Drained","status":"True","message":"x"}]}}`, dry), refused: only},
			{name: "not an extended resource in capacity", as: drainer, args: jp("n1", `[{"op":"add","path":"/status/capacity/example.com~1gpu","value":"8"}]`, dry), refused: only},
			{name: "not the allocatable", as: drainer, args: sp("n1", `{"status":{"allocatable":{"cpu":"64"}}}`, dry), refused: only},
			{name: "not the addresses", as: drainer, args: sp("n1", `{"status":{"addresses":[{"type":"InternalIP","address":"10.9.9.9"}]}}`, dry), refused: only},
			{name: "not the daemon endpoints", as: drainer, args: sp("n1", `{"status":{"daemonEndpoints":{"kubeletEndpoint":{"Port":10999}}}}`, dry), refused: only},
			{name: "not the node info", as: drainer, args: sp("n1", `{"status":{"nodeInfo":{"kubeletVersion":"v9.9.9"}}}`, dry), refused: only},
			{name: "not the images", as: drainer, args: sp("n1", `{"status":{"images":[{"names":["evil.example/x:1"],"sizeBytes":1}]}}`, dry), refused: only},
			{name: "not the volumes in use", as: drainer, args: sp("n1", `{"status":{"volumesInUse":[]}}`, dry), refused: only},
			{name: "not the volumes attached", as: drainer, args: jp("n1", `[{"op":"remove","path":"/status/volumesAttached/0"}]`, dry), refused: only},
			{name: "not the runtime handlers", as: drainer, args: sp("n1", `{"status":{"runtimeHandlers":[{"name":"runc","features":{"recursiveReadOnlyMounts":false,"userNamespaces":false}}]}}`, dry), refused: only},
			{name: "not the CRI features", as: drainer, args: sp("n1", `{"status":{"features":{"supplementalGroupsPolicy":false}}}`, dry), refused: only},
			{name: "not the phase", as: drainer, args: sp("n1", `{"status":{"phase":"Terminated"}}`, dry), refused: only},
			{name: "not Ready by a server-side apply of the status", as: drainer,
				args: []string{"apply", "--server-side", "--subresource=status", "--field-manager=lull-drainer", "--force-conflicts", "-f", ssaReady, dry}, refused: only},
			{name: "no update (PUT) of the status at all", as: drainer,
				args: []string{"replace", "--subresource=status", "-f", put, dry}, refused: []string{`cannot update resource "nodes/status"`}},
		})
	})

	// Promise 1, broken: status.declaredFeatures (k8s.io/api v0.37.1
	// NodeStatus; NodeDeclaredFeatures is GA and locked on in v1.37: the
	// API server stores it) is missing from the policy's list of fields
	// that must stay as they were. The scheduler's NodeDeclaredFeatures
	// filter and the NodeDeclaredFeatureValidator admission plugin trust
	// it: a stolen drainer token declares features a node lacks (pods
	// needing them land there) or takes away those it has (pods never
	// land there, resizes refused). Fix: add
	// object.status.?declaredFeatures == oldObject.status.?declaredFeatures
	// — better, compare the whole status but its conditions
	// (object.status with conditions removed, e.g. via a CEL map filter of
	// the keys), so a field added to NodeStatus later is held too.
	t.Run("promise 1: declaredFeatures", func(t *testing.T) {
		g.steps(t, []guardStep{
			{name: "not the declared features (strategic patch)", as: drainer, args: sp("n1", `{"status":{"declaredFeatures":["FakeFeature","InPlacePodVerticalScaling"]}}`, dry), refused: only},
			{name: "not the declared features (server-side apply)", as: drainer,
				args: []string{"apply", "--server-side", "--subresource=status", "--field-manager=lull-drainer", "--force-conflicts", "-f", ssaDeclared, dry}, refused: only},
			{name: "not the declared features taken away (JSON patch)", as: drainer, args: jp("n1", `[{"op":"remove","path":"/status/declaredFeatures"}]`, dry), refused: only},
		})
	})

	// Promise 1, broken: the second validation judges each lifecycle
	// condition by "is it in the old list" (c in oc), so it neither
	// counts entries nor looks at their order. A condition of the same
	// type as another tool's, with a Lull reason, added before it (the API
	// server does not refuse two conditions of one type) shadows it:
	// every reader that takes the first entry of a type (kubectl describe,
	// client-go/kubelet GetNodeCondition-style helpers, jsonpath [0])
	// reads MaintenanceInProgress=False where the firmware tool says True.
	// And a verbatim copy of the other tool's condition (reason
	// FirmwareTool) passes as "already there": the drainer writes a
	// condition under another tool's reason. Fix: require at most one
	// condition per lifecycle type in object (size(nc.filter(c, c.type ==
	// t)) <= 1 for each t), and a lifecycle type another tool holds in
	// oldObject stays exactly that tool's one entry.
	t.Run("promise 1: duplicate lifecycle types", func(t *testing.T) {
		g.steps(t, []guardStep{
			{name: "not a Lull MaintenanceInProgress=False in front of the other tool's", as: drainer,
				args:    jp("n1", `[{"op":"add","path":"/status/conditions/2","value":{"type":"MaintenanceInProgress","status":"False","reason":"LullCompleted","message":"no maintenance"}}]`, dry),
				refused: only},
			{name: "not a copy of the other tool's condition (written under its reason)", as: drainer,
				args:    jp("n1", `[{"op":"add","path":"/status/conditions/-","value":{"type":"MaintenanceInProgress","status":"True","reason":"FirmwareTool","message":"theirs"}}]`, dry),
				refused: only},
		})
	})

	// Promise 3, held: lull's own writes on a node without conditions, and
	// while the kubelet changes Ready in between.
	t.Run("promise 3: lull's writes pass", func(t *testing.T) {
		g.steps(t, []guardStep{
			{name: "lull writes its MaintenancePlanned on a node without conditions", as: drainer,
				args: sp("n2", `{"status":{"conditions":[{"type":"MaintenancePlanned","status":"True","reason":"LullWaitingForWindow","message":"lull: planned","lastHeartbeatTime":"2026-11-21T10:00:00Z","lastTransitionTime":"2026-11-21T10:00:00Z"}]}}`)},
			{name: "the kubelet reports Ready meanwhile", args: sp("n2", `{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"ok"}]}}`)},
			{name: "lull moves on: in progress, planned gone", as: drainer,
				args: sp("n2", `{"status":{"conditions":[{"type":"MaintenanceInProgress","status":"True","reason":"LullCordoning","message":"lull: x","lastHeartbeatTime":"2026-11-21T10:00:00Z","lastTransitionTime":"2026-11-21T10:00:00Z"},{"type":"MaintenancePlanned","$patch":"delete"}]}}`)},
			{name: "the kubelet reports NotReady meanwhile", args: sp("n2", `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"KubeletNotReady","message":"x"}]}}`)},
			{name: "lull removes its own, the last lifecycle condition", as: drainer, args: sp("n2", `{"status":{"conditions":[{"type":"MaintenanceInProgress","$patch":"delete"}]}}`)},
			{name: "and removing it again changes nothing", as: drainer, args: sp("n2", `{"status":{"conditions":[{"type":"MaintenanceInProgress","$patch":"delete"}]}}`)},
		})
		if got := g.jsonpath(t, `{.status.conditions[*].type}`, "get", "node", "n2"); got != "Ready" {
			t.Errorf("n2's conditions at the end: %q, want Ready", got)
		}
		// A node the kubelet (or a buggy tool) left with two Ready entries.
		if _, err := g.kubectl("patch", "node", "n4", "--subresource=status", "--type=merge", "-p",
			`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"a"},{"type":"Ready","status":"True","reason":"KubeletReady","message":"b"}]}}`); err != nil {
			t.Logf("the API server refuses two Ready conditions: %v", err)
			return
		}
		g.steps(t, []guardStep{
			{name: "lull writes its condition on a node with two Ready entries", as: drainer,
				args: sp("n4", `{"status":{"conditions":[{"type":"MaintenancePlanned","status":"True","reason":"LullWaitingForWindow","message":"lull: planned"}]}}`)},
		})
	})

	// Promise 3 (and 2), found on cf44d28 (fixed since: lull now removes
	// its entry by position with a tested JSON patch): a node carrying lull's MaintenancePlanned
	// and another tool's of the same type (the API server takes two
	// conditions of one type). lull ends its request and sends what
	// syncNodeConditions sends: {"type":"MaintenancePlanned","$patch":
	// "delete"}. A strategic "$patch: delete" removes every entry of that
	// type, the other tool's too: the guard (rightly) refuses the result,
	// so lull can never remove its own — it stays on the node for ever,
	// the refusal logged at each save (and without the guard, the other
	// tool's goes). Fix (drainer/maintenance/nodeconditions.go): remove
	// and replace lull's entries by index with a JSON patch guarded by
	// "test" ops, never by type.
	t.Run("promise 3: lull removes its own beside another tool's of the same type", func(t *testing.T) {
		if _, err := g.kubectl("patch", "node", "n3", "--subresource=status", "--type=merge", "-p",
			`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"ok"},`+
				`{"type":"MaintenancePlanned","status":"True","reason":"LullWaitingForWindow","message":"lull: planned"},`+
				`{"type":"MaintenancePlanned","status":"True","reason":"FirmwareTool","message":"theirs"}]}}`); err != nil {
			t.Skipf("the API server refuses two conditions of one type: %v", err)
		}
		t.Logf("n3: %s", g.jsonpath(t, `{.status.conditions}`, "get", "node", "n3"))
		g.steps(t, []guardStep{
			{name: "lull removes its MaintenancePlanned (its own patch: by position, tested)", as: drainer, args: jp("n3",
				`[{"op":"test","path":"/status/conditions/1/type","value":"MaintenancePlanned"},{"op":"test","path":"/status/conditions/1/reason","value":"LullWaitingForWindow"},{"op":"remove","path":"/status/conditions/1"}]`)},
		})
		if got := g.jsonpath(t, `{.status.conditions[?(@.type=="MaintenancePlanned")].reason}`, "get", "node", "n3"); got != "FirmwareTool" {
			t.Errorf("n3's MaintenancePlanned reasons after lull ended its request: %q, want only FirmwareTool's", got)
		}
	})

	// The effect of the open doors, stored (not dry runs), shown in the log.
	t.Run("the open doors, for real", func(t *testing.T) {
		if _, err := g.kubectl(append(append([]string{}, drainer...), sp("n1", `{"status":{"declaredFeatures":["FakeFeature","InPlacePodVerticalScaling"]}}`)...)...); err == nil {
			got := g.jsonpath(t, `{.status.declaredFeatures}`, "get", "node", "n1")
			t.Logf("the drainer's token rewrote n1's declaredFeatures: %s", got)
			if !strings.Contains(got, "FakeFeature") {
				t.Logf("(the API server dropped it)")
			}
		}
		if _, err := g.kubectl(append(append([]string{}, drainer...), jp("n1",
			`[{"op":"add","path":"/status/conditions/2","value":{"type":"MaintenanceInProgress","status":"False","reason":"LullCompleted","message":"no maintenance"}}]`)...)...); err == nil {
			t.Logf("first MaintenanceInProgress of n1 as readers see it: %s",
				g.jsonpath(t, `{.status.conditions[?(@.type=="MaintenanceInProgress")].status}/{.status.conditions[?(@.type=="MaintenanceInProgress")].reason}`, "get", "node", "n1"))
		}
		// Not this commit's door (RBAC "patch nodes" predates it), noted:
		// does a server-side apply as the drainer create a Node with any
		// status (Ready, capacity) it likes?
		fake := g.file("fake-node.yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: fake-n9}\nstatus:\n  capacity: {cpu: '512'}\n  conditions:\n"+
			"  - {type: Ready, status: 'True', reason: KubeletReady, message: x}\n")
		out, err := g.kubectl(append(append([]string{}, drainer...), "apply", "--server-side", "--field-manager=lull-drainer", "-f", fake, dry)...)
		t.Logf("drainer server-side apply of a new Node (dry run): out=%q err=%v", out, err)
	})
}
