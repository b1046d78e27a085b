package install

// Red team of lull-karpenter-writes and of lull's own NodePool writes
// (commit 4efe589), on a real kube-apiserver with manifests/install and
// Karpenter's real NodePool CRD. Each step wants the answer the promise
// gives; a step with another answer is a finding (see each comment).

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/karpenter"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/test/framework"
)

// karpenterGuarded is installGuarded with Karpenter's NodePool CRD.
func karpenterGuarded(t *testing.T) *guarded {
	t.Helper()
	g := installGuarded(t)
	dirs, err := framework.KarpenterCRDs()
	if err != nil {
		t.Fatal(err)
	}
	g.must("apply", "--server-side", "-f", dirs[0]+"/karpenter.sh_nodepools.yaml")
	waitEstablished(t, g.kubectl, "crd/nodepools.karpenter.sh")
	return g
}

func nodePoolYAML(name, budgets string) string {
	return `apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: ` + name + `}
spec:
  template:
    metadata: {labels: {team: a}}
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements: [{key: kubernetes.io/os, operator: In, values: [linux]}]
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 30s
    budgets: ` + budgets + "\n"
}

// Promise 4: a stolen lull-drainer token cannot remove an admin's budget.
// The guard checks a removed entry against the record as it was BEFORE
// the write, and lets the record change alone (no budget change) to
// anything. Two writes remove any plain admin entry (the most common kind,
// Karpenter's own default 10% included): point the record at it, then
// remove it "as the entry its record names". Repeated, the pool is left
// without budgets: Karpenter unbounded. The other doors tried here held.
func TestGuardKarpenterWritesRedteamDoors(t *testing.T) {
	g := karpenterGuarded(t)
	g.must("create", "-f", g.file("nodepool.yaml", nodePoolYAML("np", `[{nodes: "10%"}, {nodes: "1"}]`)))
	const admins = `{"nodes":"10%"},{"nodes":"1"}`
	lulls := func(budgets, record string) []string {
		return mergePatch("nodepool", "np", `{"metadata":{"annotations":{"lull.dev/karpenter-budget":`+record+`}},"spec":{"disruption":{"budgets":[`+budgets+`]}}}`)
	}
	jsonPatch := func(p string) []string { return []string{"patch", "nodepool", "np", "--type=json", "-p", p} }
	refused := refusedBy("lull-karpenter-writes")
	forbidden := []string{"forbidden"}
	apply := g.file("apply.yaml", "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: np}\nspec: {weight: 100}\n")
	other := g.file("other.yaml", nodePoolYAML("other", `[{nodes: "0"}]`))
	g.steps(t, []guardStep{
		{name: "control: not the template", as: drainer, args: append(mergePatch("nodepool", "np", `{"spec":{"template":{"metadata":{"labels":{"team":"b"}}}}}`), "--dry-run=server"),
			refused: refused, eventually: true},
		{name: "lull adds its entry, recorded", as: drainer, args: lulls(admins+`,{"nodes":"0"}`, `"{\"nodes\":\"0\"}"`)},

		// The finding: two writes.
		{name: "the record pointed at the admin's entry, budgets unchanged", as: drainer,
			args: mergePatch("nodepool", "np", `{"metadata":{"annotations":{"lull.dev/karpenter-budget":"{\"nodes\":\"1\"}"}}}`), refused: refused},
		{name: "then the admin's entry removed as 'the recorded one'", as: drainer, args: lulls(`{"nodes":"10%"},{"nodes":"0"}`, `"{\"nodes\":\"0\"}"`), refused: refused},

		// Held: other shapes of the same request and other doors.
		{name: "JSON patch: the weight", as: drainer, args: jsonPatch(`[{"op":"add","path":"/spec/weight","value":100}]`), refused: refused},
		{name: "JSON patch: the admin's first entry removed", as: drainer, args: jsonPatch(`[{"op":"remove","path":"/spec/disruption/budgets/0"}]`), refused: refused},
		{name: "JSON patch: a finalizer", as: drainer, args: jsonPatch(`[{"op":"add","path":"/metadata/finalizers","value":["x.io/hold"]}]`), refused: refused},
		{name: "merge patch: an owner", as: drainer, args: mergePatch("nodepool", "np",
			`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Namespace","name":"default","uid":"00000000-0000-0000-0000-000000000001"}]}}`), refused: refused},
		{name: "merge patch: limits", as: drainer, args: mergePatch("nodepool", "np", `{"spec":{"limits":{"cpu":"1"}}}`), refused: refused},
		{name: "merge patch: an entry with reasons, recorded", as: drainer, args: lulls(admins+`,{"nodes":"0"},{"nodes":"5","reasons":["Drifted"]}`, `"{\"nodes\":\"5\"}"`), refused: refused},
		{name: "merge patch: two entries at once", as: drainer, args: lulls(admins+`,{"nodes":"0"},{"nodes":"5"},{"nodes":"6"}`, `"{\"nodes\":\"5\"}"`), refused: refused},
		{name: "merge patch: budgets replaced by lull's alone", as: drainer, args: lulls(`{"nodes":"0"}`, `"{\"nodes\":\"0\"}"`), refused: refused},
		{name: "strategic merge patch", as: drainer, args: []string{"patch", "nodepool", "np", "--type=strategic", "-p", `{"spec":{"weight":100}}`}, refused: []string{"not supported"}},
		{name: "server-side apply: the weight", as: drainer, args: []string{"apply", "--server-side", "--force-conflicts", "--field-manager=x", "-f", apply}, refused: refused},
		{name: "status subresource", as: drainer, args: statusPatch("nodepool", "np", `{"status":{"nodes":0}}`), refused: forbidden},
		{name: "DELETE", as: drainer, args: []string{"delete", "nodepool", "np", "--wait=false"}, refused: forbidden},
		{name: "CREATE", as: drainer, args: []string{"create", "-f", other}, refused: forbidden},
	})
	if got := g.jsonpath(t, "{.spec.disruption.budgets}", "get", "nodepool", "np"); !strings.Contains(got, `{"nodes":"1"}`) {
		t.Errorf("the admin's budget {nodes: 1} is gone: %s", got)
	}
}

// drainerClient is a client of the API server as lull-drainer's
// ServiceAccount (impersonated by the cluster admin).
func drainerClient(t *testing.T, g *guarded) client.Client {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", g.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:lull-system:lull-drainer",
		Groups: []string{"system:authenticated", "system:serviceaccounts", "system:serviceaccounts:lull-system"}}
	c, err := client.New(cfg, client.Options{Scheme: lullscheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func adminClient(t *testing.T, g *guarded) client.Client {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", g.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: lullscheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func poolState(t *testing.T, c client.Client, name string) (string, string) {
	t.Helper()
	p := &unstructured.Unstructured{}
	p.SetGroupVersionKind(karpenter.NodePool)
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, p); err != nil {
		t.Fatal(err)
	}
	b, _, _ := unstructured.NestedFieldNoCopy(p.Object, "spec", "disruption", "budgets")
	j, _ := json.Marshal(b)
	return string(j), p.GetAnnotations()[karpenter.AnnotationBudget]
}

// lull's own writes (drainer/karpenter's Reconciler, run as lull-drainer
// against the real CRD and guard). Promise 4: lull's legitimate writes are
// never refused; promise 2: while a governing window is closed every pool
// it selects carries nodes "0"; promise 3: lull gives an admin's list back
// as it was.
//
//   - "full": an admin's list at the CRD's maxItems (50). lull's entry
//     cannot be added (the CRD refuses 51 items): lull cannot govern the
//     pool; the round goes on for the others, and lull says so on the pool
//     (a Warning event BudgetEntryNotWritten) and in its log, every round.
//   - "empty": an admin's explicit budgets: [] (no bound). lull adds "0";
//     once no window governs the pool, lull writes budgets: null, which the
//     API server defaults to [{nodes: 10%}]; the guard then refuses the
//     write (an unrecorded entry added), so lull's "0" stays for good and
//     Karpenter is frozen on the pool (finding).
//   - "gitops": the admin's NodePool applied again by Flux (server-side
//     apply, forced): lull's entry goes with the atomic list, its record
//     stays, and lull never writes its entry again (finding).
//   - "dup": the admin's duplicates and an entry equal to lull's: held.
func TestGuardKarpenterWritesRedteamLullsOwnWrites(t *testing.T) {
	g := karpenterGuarded(t)
	var fifty []string
	for i := 0; i < 50; i++ {
		fifty = append(fifty, `{nodes: "5"}`)
	}
	g.must("create", "-f", g.file("full.yaml", nodePoolYAML("full", "["+strings.Join(fifty, ", ")+"]")))
	g.must("create", "-f", g.file("empty.yaml", nodePoolYAML("empty", "[]")))
	g.must("create", "-f", g.file("dup.yaml", nodePoolYAML("dup", `[{nodes: "0"}, {nodes: "0"}, {nodes: "10%"}, {nodes: "10%"}]`)))
	gitops := g.file("gitops.yaml", nodePoolYAML("gitops", `[{nodes: "10%"}]`))
	fluxApply := []string{"apply", "--server-side", "--force-conflicts", "--field-manager=kustomize-controller", "-f", gitops}
	g.must(fluxApply...)
	ctx := context.Background()
	admin := adminClient(t, g)
	w := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "karpenter-nights"}, Spec: lullv1alpha1.MaintenanceWindowSpec{
		NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
		Strategy:       lullv1alpha1.StrategySchedule,
		MaxUnavailable: ptr.To(intstr.FromInt32(2)),
		Schedule: &lullv1alpha1.Schedule{TimeZone: "UTC", StartTime: "22:00", Duration: lullv1alpha1.Duration{Duration: time.Hour},
			Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}},
		Karpenter: &lullv1alpha1.KarpenterGovernance{GovernDisruption: true},
	}}
	if err := admin.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	rec := &recorded{}
	r := &karpenter.Reconciler{Client: drainerClient(t, g), Clock: clocktesting.NewFakeClock(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)), Recorder: rec}
	round := func(what string) {
		t.Helper()
		if _, err := r.Reconcile(ctx, reconcile.Request{}); err != nil {
			t.Errorf("%s: lull's write refused: %v", what, err)
		}
	}

	// The window is closed (12:00; it opens at 22:00).
	round("closed window")
	for _, p := range []string{"empty", "dup", "gitops"} {
		if b, ann := poolState(t, admin, p); recordNodes(ann) != "0" || !strings.Contains(b, `{"nodes":"0"}`) {
			t.Errorf("closed window: pool %s does not carry lull's nodes \"0\" (budgets %s, record %q)", p, shorten(b), ann)
		}
	}

	if b, _ := poolState(t, admin, "full"); strings.Contains(b, `{"nodes":"0"}`) || !rec.has("full", "BudgetEntryNotWritten") {
		t.Errorf("closed window: pool full (50 budgets) is %s; lull should say on it that it cannot add its entry (events %v)", shorten(b), rec.all())
	}

	// Flux (server-side apply, forced, as kustomize-controller does) puts
	// the admin's NodePool back: budgets is an atomic list, so lull's
	// entry goes; lull's record, not in the manifest, stays. lull must put
	// its entry back (finding: it compares its record with what it wants
	// and writes nothing).
	g.must(fluxApply...)
	round("after a GitOps re-apply")
	if b, ann := poolState(t, admin, "gitops"); !strings.Contains(b, `{"nodes":"0"}`) {
		t.Errorf("closed window, after a GitOps re-apply: pool gitops is %s (record %q): Karpenter is not held", b, ann)
	}

	// The window stops governing: lull takes its entries away.
	w.Spec.Karpenter = nil
	if err := admin.Update(ctx, w); err != nil {
		t.Fatal(err)
	}
	round("no governing window")
	for p, want := range map[string]string{"empty": `[]`, "dup": `[{"nodes":"0"},{"nodes":"0"},{"nodes":"10%"},{"nodes":"10%"}]`} {
		if b, ann := poolState(t, admin, p); sorted(b) != sorted(want) || ann != "" {
			t.Errorf("no governing window: pool %s is %s (record %q), want the admin's %s as it was", p, b, ann, want)
		}
	}
}

// recordNodes is the node count lull's record names ("": none).
func recordNodes(record string) string {
	var e struct{ Nodes string }
	_ = json.Unmarshal([]byte(record), &e)
	return e.Nodes
}

// sorted is a JSON list's items, in order: Karpenter does not care for
// the order of budgets.
func sorted(list string) string {
	var items []any
	_ = json.Unmarshal([]byte(list), &items)
	out := make([]string, len(items))
	for i, it := range items {
		b, _ := json.Marshal(it)
		out[i] = string(b)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

func shorten(s string) string {
	if len(s) > 80 {
		return fmt.Sprintf("%s… (%d chars)", s[:80], len(s))
	}
	return s
}

// recorded is an event recorder that keeps what it was told.
type recorded struct {
	mu     sync.Mutex
	events []string
}

func (r *recorded) Eventf(regarding runtime.Object, _ runtime.Object, _, reason, _, _ string, _ ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := ""
	if o, ok := regarding.(interface{ GetName() string }); ok {
		name = o.GetName()
	}
	r.events = append(r.events, name+"/"+reason)
}

func (r *recorded) has(name, reason string) bool {
	return slices.Contains(r.all(), name+"/"+reason)
}

func (r *recorded) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}
