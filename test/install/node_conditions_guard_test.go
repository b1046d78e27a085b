package install

import (
	"testing"
)

// Issue 45: lull-drainer may patch nodes/status (RBAC grants it whole) to
// write Kubernetes' node lifecycle conditions; the guard
// (lull-node-conditions) holds it to those four types and to conditions
// of its own (reason Lull…): a stolen drainer token cannot mark a node
// Ready or NotReady, change its capacity, or take over or remove another
// tool's maintenance condition.
func TestGuardNodeConditions(t *testing.T) {
	g := installGuarded(t)
	sp := func(patch string) []string {
		return []string{"patch", "node", "n1", "--subresource=status", "--type=strategic", "-p", patch}
	}
	// The node as a kubelet and another tool left it.
	g.must(sp(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"ok"},` +
		`{"type":"MaintenanceInProgress","status":"True","reason":"FirmwareTool","message":"theirs"}],"capacity":{"cpu":"4"}}}`)...)
	refused := refusedBy("lull-node-conditions")
	g.steps(t, []guardStep{
		{name: "lull writes its MaintenancePlanned", as: drainer, args: sp(`{"status":{"conditions":[{"type":"MaintenancePlanned","status":"True","reason":"LullWaitingForWindow","message":"lull: planned"}]}}`)},
		{name: "and changes it", as: drainer, args: sp(`{"status":{"conditions":[{"type":"MaintenancePlanned","status":"True","reason":"LullWaitingForBudget","message":"lull: planned"}]}}`)},
		// A policy becomes active moments after its creation: asked
		// again (a dry run) until it answers.
		{name: "not Ready", as: drainer, args: append(sp(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"KubeletNotReady","message":"x"}]}}`), "--dry-run=server"),
			refused: append(refused, "only the node lifecycle conditions"), eventually: true},
		{name: "not the capacity", as: drainer, args: sp(`{"status":{"capacity":{"cpu":"64"}}}`), refused: refused},
		{name: "not another tool's condition taken over", as: drainer, args: sp(`{"status":{"conditions":[{"type":"MaintenanceInProgress","status":"True","reason":"LullDraining","message":"mine now"}]}}`), refused: append(refused, "only its own lifecycle conditions")},
		{name: "nor removed", as: drainer, args: sp(`{"status":{"conditions":[{"type":"MaintenanceInProgress","$patch":"delete"}]}}`), refused: refused},
		{name: "nor one written under another's reason", as: drainer, args: sp(`{"status":{"conditions":[{"type":"Drained","status":"True","reason":"FirmwareTool","message":"x"}]}}`), refused: refused},
		{name: "lull removes its own", as: drainer, args: sp(`{"status":{"conditions":[{"type":"MaintenancePlanned","$patch":"delete"}]}}`)},
	})
	if got := g.jsonpath(t, `{.status.conditions[?(@.type=="MaintenanceInProgress")].reason}`, "get", "node", "n1"); got != "FirmwareTool" {
		t.Errorf("the other tool's condition: reason %q", got)
	}
}
