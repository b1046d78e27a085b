package install

import (
	"testing"

	"lull.dev/lull/test/framework"
)

// Issue 45: lull-drainer may patch Karpenter's NodePools (RBAC cannot say
// which fields), and the guard (lull-karpenter-writes) holds it to its own
// budget entry and the record of it: the writes drainer/karpenter makes
// pass; a stolen drainer token can neither reshape the pool nor take an
// admin's budget away. On Karpenter's real NodePool CRD.
func TestGuardKarpenterWrites(t *testing.T) {
	g := installGuarded(t)
	dirs, err := framework.KarpenterCRDs()
	if err != nil {
		t.Fatal(err)
	}
	g.must("apply", "--server-side", "-f", dirs[0]+"/karpenter.sh_nodepools.yaml", "-f", dirs[0]+"/karpenter.sh_nodeclaims.yaml")
	waitEstablished(t, g.kubectl, "crd/nodepools.karpenter.sh", "crd/nodeclaims.karpenter.sh")
	for _, r := range framework.KarpenterRights {
		if got := g.canI(t, r); got != r.Want {
			t.Errorf("%s %s %s: can-i says %v, docs/install.md says %v", r.Account, r.Verb, r.Resource, got, r.Want)
		}
	}
	g.must("create", "-f", g.file("nodepool.yaml", `apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: np}
spec:
  template:
    metadata: {labels: {team: a}}
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements: [{key: kubernetes.io/os, operator: In, values: [linux]}]
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 30s
    budgets: [{nodes: "10%"}, {nodes: "0", reasons: [Drifted]}]
`))
	const admins = `{"nodes":"10%"},{"nodes":"0","reasons":["Drifted"]}`
	lulls := func(budgets, record string) []string {
		return mergePatch("nodepool", "np", `{"metadata":{"annotations":{"lull.dev/karpenter-budget":`+record+`}},"spec":{"disruption":{"budgets":[`+budgets+`]}}}`)
	}
	refused := refusedBy("lull-karpenter-writes")
	g.steps(t, []guardStep{
		{name: "lull adds its entry, recorded", as: drainer, args: lulls(admins+`,{"nodes":"0"}`, `"{\"nodes\":\"0\",\"copies\":1}"`)},
		{name: "and replaces it", as: drainer, args: lulls(admins+`,{"nodes":"2"}`, `"{\"nodes\":\"2\",\"copies\":1}"`)},
		// A policy becomes active moments after its creation: asked
		// again (a dry run) until it answers.
		{name: "not an entry its record does not name", as: drainer, args: append(lulls(admins+`,{"nodes":"3"}`, `"{\"nodes\":\"2\",\"copies\":1}"`), "--dry-run=server"),
			refused: append(refused, "add only one plain node count"), eventually: true},
		{name: "not an admin's entry taken away", as: drainer, args: lulls(`{"nodes":"10%"},{"nodes":"2"}`, `"{\"nodes\":\"2\",\"copies\":1}"`), refused: append(refused, "remove only the budget entry its record")},
		{name: "not an entry with a schedule", as: drainer, args: lulls(admins+`,{"nodes":"2"},{"nodes":"1","schedule":"@daily","duration":"1h"}`, `"{\"nodes\":\"2\",\"copies\":1}"`), refused: refused},
		{name: "not a record alone, pointing at an admin's entry", as: drainer, args: mergePatch("nodepool", "np", `{"metadata":{"annotations":{"lull.dev/karpenter-budget":"{\"nodes\":\"10%\",\"copies\":1}"}}}`),
			refused: append(refused, "only the entry it adds in the same write")},
		{name: "not a percentage", as: drainer, args: lulls(admins+`,{"nodes":"100%"}`, `"{\"nodes\":\"100%\"}"`), refused: refused},
		{name: "not the template", as: drainer, args: mergePatch("nodepool", "np", `{"spec":{"template":{"metadata":{"labels":{"team":"b"}}}}}`), refused: append(refused, "only its own disruption budget entry")},
		{name: "not the consolidation policy", as: drainer, args: mergePatch("nodepool", "np", `{"spec":{"disruption":{"consolidationPolicy":"WhenEmpty"}}}`), refused: refused},
		{name: "not another annotation", as: drainer, args: mergePatch("nodepool", "np", `{"metadata":{"annotations":{"team":"x"}}}`), refused: refused},
		{name: "not a label", as: drainer, args: mergePatch("nodepool", "np", `{"metadata":{"labels":{"team":"x"}}}`), refused: refused},
		{name: "lull removes its entry and the record", as: drainer, args: lulls(admins, `null`)},
		{name: "an admin is not held to it", args: mergePatch("nodepool", "np", `{"spec":{"disruption":{"budgets":[{"nodes":"1"}]}}}`)},
	})
	if got := g.jsonpath(t, "{.spec.disruption.budgets}", "get", "nodepool", "np"); got != `[{"nodes":"1"}]` {
		t.Errorf("budgets after the steps: %s", got)
	}
}
