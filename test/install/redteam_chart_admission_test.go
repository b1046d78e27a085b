package install

// Red team of commit 6ffb226 ("chart: render the admission guard from
// manifests/admission") and of its follow-up c00a5fe (the values check
// lull.admissionValues). The chart's promise: for any values a cluster
// admin could reasonably set, the chart renders the guard kustomize's
// manifests/admission renders, with only the maintenance label, lull's
// namespace (the bindings' paramRef), the lease and config namespaces (the
// bindings' namespaceSelector) and the administrators' group moved; a value
// that cannot work fails the render with a clear message, never a weaker
// guard.
//
// The expected guard is computed field by field from kustomize's objects
// (expectedGuard), not by the chart's chain of text substitutions, so a
// substitution that feeds the next one, or a replacement string that
// expands, shows up as a difference.
//
// Which tests fail today (the chart broken) and which pass (the chart
// held; kept as regression tests) is said at each test:
//   FAILS  TestRedteamChartAdmissionLeaseNamespaceFeedsConfigNamespace
//   FAILS  TestRedteamChartAdmissionAdminGroupRewritten
//   FAILS  TestRedteamChartAdmissionAdminGroupLineBreaks
//   FAILS  TestRedteamChartAdmissionNamesReadAsOtherYAMLTypes
//   FAILS  TestRedteamChartAdmissionLabelKeyTooLong
//   FAILS  TestRedteamChartAdmissionLeaseNamespaceHoldsOthersLeases
//   FAILS  TestRedteamChartAdmissionOnAPIServer (real kube-apiserver)
//   FAILS  TestRedteamChartAdmissionLeaseNamespaceKubeSystemOnAPIServer (real kube-apiserver)
//   PASSES TestRedteamChartAdmissionHeldValues

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/wait"

	"lull.dev/lull/test/framework"
)

// guardValues are the values that move the guard.
type guardValues struct {
	label, ns, leaseNS, configNS, admin string
}

func (v guardValues) String() string {
	return fmt.Sprintf("maintenanceLabel=%q namespace=%q leaseNamespace=%q configNamespace=%q admission.adminGroup=%q", v.label, v.ns, v.leaseNS, v.configNS, v.admin)
}

func (v guardValues) withDefaults() guardValues {
	d := guardValues{"lull.dev/maintenance", "lull-system", "lull-leases", "lull-configs", "lull:admins"}
	if v.label == "" {
		v.label = d.label
	}
	if v.ns == "" {
		v.ns = d.ns
	}
	if v.leaseNS == "" {
		v.leaseNS = d.leaseNS
	}
	if v.configNS == "" {
		v.configNS = d.configNS
	}
	if v.admin == "" {
		v.admin = d.admin
	}
	return v
}

// valuesFile writes v as a values file (JSON, so every value is exactly
// the string given: no --set parsing of numbers, commas or backslashes).
func (v guardValues) valuesFile(t *testing.T) string {
	t.Helper()
	j, err := json.Marshal(map[string]any{
		"maintenanceLabel": v.label,
		"namespace":        v.ns,
		"leaseNamespace":   v.leaseNS,
		"configNamespace":  v.configNS,
		"admission":        map[string]any{"adminGroup": v.admin},
	})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "values.json")
	if err := os.WriteFile(p, j, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// chartGuard renders templates/admission.yaml with v; a render error is
// returned (with helm's output), not fatal.
func chartGuard(t *testing.T, v guardValues) (map[string]object, error) {
	t.Helper()
	out, err := runErr(nil, bin(t, "helm"), "template", "lull", filepath.Join(framework.RepoRoot(), "charts", "lull"),
		"--show-only", "templates/admission.yaml", "-f", v.valuesFile(t))
	if err != nil {
		return nil, err
	}
	return objects(t, fmt.Sprintf("helm template with %v", v), out), nil
}

var kustomizeGuardCache map[string]object

// kustomizeGuard is `kubectl kustomize manifests/admission` (rendered once).
func kustomizeGuard(t *testing.T) map[string]object {
	t.Helper()
	if kustomizeGuardCache == nil {
		out := run(t, nil, bin(t, "kubectl"), "kustomize", filepath.Join(framework.RepoRoot(), "manifests", "admission"))
		kustomizeGuardCache = objects(t, "kubectl kustomize manifests/admission", out)
	}
	return kustomizeGuardCache
}

// The label key where the policies spell it (objectSelector keys, CEL
// strings, messages): never the guard's own annotations
// lull.dev/maintenance-label-params.
var defaultLabel = regexp.MustCompile(`lull\.dev/maintenance([^-a-zA-Z0-9_.]|$)`)

// expectedGuard is kustomize's guard with v moved field by field: each
// field is set once from the value it stands for, so nothing one value
// writes is read again as another.
func expectedGuard(t *testing.T, v guardValues) map[string]object {
	t.Helper()
	want := map[string]object{}
	for key, o := range kustomizeGuard(t) {
		if o["kind"] == "ConfigMap" {
			continue // the parameters: checked by checkGuard
		}
		j, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		var c object
		if err := json.Unmarshal(j, &c); err != nil {
			t.Fatal(err)
		}
		kind, _ := c["kind"].(string)
		name, _ := get(t, c, "metadata", "name").(string)
		// Every string: the label key and the administrators' group in
		// the policies' CEL and messages (literal replacements).
		c = walkStrings(c, func(s string) string {
			s = defaultLabel.ReplaceAllStringFunc(s, func(m string) string { return v.label + strings.TrimPrefix(m, "lull.dev/maintenance") })
			return strings.ReplaceAll(s, "group lull:admins", "group "+v.admin)
		}).(map[string]any)
		spec, _ := c["spec"].(map[string]any)
		if ref, ok := spec["paramRef"].(map[string]any); ok {
			if ref["namespace"] != "lull-system" {
				t.Fatalf("kustomize's %s: paramRef.namespace %v", key, ref["namespace"])
			}
			ref["namespace"] = v.ns
		}
		if mr, ok := spec["matchResources"].(map[string]any); ok {
			if nss, ok := mr["namespaceSelector"].(map[string]any); ok {
				if ml, ok := nss["matchLabels"].(map[string]any); ok {
					switch ml["kubernetes.io/metadata.name"] {
					case "lull-leases":
						ml["kubernetes.io/metadata.name"] = v.leaseNS
					case "lull-configs":
						ml["kubernetes.io/metadata.name"] = v.configNS
					default:
						t.Fatalf("kustomize's %s selects namespace %v", key, ml)
					}
				}
			}
		}
		if kind == "ClusterRoleBinding" && name == "lull-admins" {
			for _, s := range c["subjects"].([]any) {
				s.(map[string]any)["name"] = v.admin
			}
		}
		want[key] = c
	}
	return want
}

func walkStrings(x any, f func(string) string) any {
	switch x := x.(type) {
	case string:
		return f(x)
	case map[string]any:
		for k, v := range x {
			x[k] = walkStrings(v, f)
		}
		return x
	case []any:
		for i, v := range x {
			x[i] = walkStrings(v, f)
		}
		return x
	}
	return x
}

// checkGuard wants the chart's guard with v to be exactly expectedGuard,
// and its parameters to carry v's namespace, lease namespace and group as
// strings.
func checkGuard(t *testing.T, v guardValues, h map[string]object) {
	t.Helper()
	cmKey := "v1/ConfigMap/" + v.ns + "/lull-admission"
	cm, ok := h[cmKey]
	if !ok {
		t.Errorf("%v: no %s among %v", v, cmKey, keys(h))
	} else {
		data, _ := cm["data"].(map[string]any)
		for k, want := range map[string]string{"leaseNamespace": v.leaseNS, "adminGroup": v.admin} {
			if got, ok := data[k].(string); !ok || got != want {
				t.Errorf("%v: the parameters' %s is %#v, want the string %q", v, k, data[k], want)
			}
		}
	}
	rest := map[string]object{}
	for k, o := range h {
		if o["kind"] != "ConfigMap" {
			rest[k] = o
		}
	}
	want := expectedGuard(t, v)
	if diff := cmp.Diff(keys(want), keys(rest)); diff != "" {
		t.Errorf("%v: the chart's guard has other objects than kustomize's (-want +helm):\n%s", v, diff)
	}
	var differ []string
	for _, k := range keys(want) {
		if diff := cmp.Diff(want[k], rest[k]); rest[k] != nil && diff != "" {
			if differ = append(differ, k); len(differ) <= 2 {
				t.Errorf("%v: %s is not kustomize's with these values moved (-want +helm):\n%s", v, k, diff)
			}
		}
	}
	if len(differ) > 2 {
		t.Errorf("%v: %d objects differ from kustomize's with these values moved, also:\n%s", v, len(differ), strings.Join(differ[2:], "\n"))
	}
}

// The chart's own refusals (lull.admissionValues): what a clear message
// looks like.
var clearRefusal = regexp.MustCompile(`(maintenanceLabel|namespace|leaseNamespace|configNamespace|admission\.adminGroup) .* (is not a label key|is not a namespace name|must be a group name)`)

// guardOrClearRefusal: the chart either renders exactly the moved guard
// or refuses the values with its own message.
func guardOrClearRefusal(t *testing.T, v guardValues) {
	t.Helper()
	h, err := chartGuard(t, v)
	if err != nil {
		if !clearRefusal.MatchString(err.Error()) {
			t.Errorf("%v: the render failed without saying which value is wrong:\n%.600s", v, err)
		}
		return
	}
	checkGuard(t, v, h)
}

// binding returns a rendered object by kind and name.
func binding(t *testing.T, h map[string]object, kind, name string) object {
	t.Helper()
	o, ok := h["admissionregistration.k8s.io/v1/"+kind+"/<nil>/"+name]
	if !ok {
		t.Fatalf("no %s %s among %v", kind, name, keys(h))
	}
	return o
}

// FAILS today. Attack: the ordering of lull.admission's substitution
// chain. The lease namespace is substituted before the config namespace,
// and both by the text "kubernetes.io/metadata.name: <default>": a
// leaseNamespace spelled like the default configNamespace (lull-configs)
// is rewritten again into configNamespace. With leaseNamespace=lull-configs
// and configNamespace=night-configs the bindings lull-node-leases and
// lull-lease-holder-principal select night-configs, where no lease lives,
// while the policies' match condition wants lull-configs: the lease guard
// never runs (any tool granted Leases takes over or releases another's
// held node lease), silently; swapping the two defaults does the same.
// Expected (safe): each binding selects the namespace its value names
// (lease bindings lull-configs, the credentials binding night-configs), or
// the render refuses the values.
func TestRedteamChartAdmissionLeaseNamespaceFeedsConfigNamespace(t *testing.T) {
	for _, v := range []guardValues{
		{leaseNS: "lull-configs", configNS: "night-configs"},
		{leaseNS: "lull-configs", configNS: "lull-leases"}, // the two defaults swapped
	} {
		v = v.withDefaults()
		h, err := chartGuard(t, v)
		if err != nil {
			if !clearRefusal.MatchString(err.Error()) {
				t.Errorf("%v: refused unclearly: %v", v, err)
			}
			continue
		}
		wrong := false
		for _, b := range []struct{ kind, name, want string }{
			{"MutatingAdmissionPolicyBinding", "lull-lease-holder-principal", v.leaseNS},
			{"ValidatingAdmissionPolicyBinding", "lull-node-leases", v.leaseNS},
			{"ValidatingAdmissionPolicyBinding", "lull-alerts-credentials", v.configNS},
		} {
			got := get(t, binding(t, h, b.kind, b.name), "spec", "matchResources", "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name")
			if got != b.want {
				wrong = true
				t.Errorf("leaseNamespace=%s configNamespace=%s: binding %s selects namespace %v, want %s",
					v.leaseNS, v.configNS, b.name, got, b.want)
			}
		}
		if !wrong {
			checkGuard(t, v, h)
		}
	}
}

// FAILS today. Attack: the administrators' group goes into the
// ClusterRoleBinding lull-admins through regexReplaceAll's replacement
// string, where "$name", "${n}" and "$n" expand (lull.admissionValues
// refuses quotes, backslashes and line breaks, not "$"); and the literal
// replacement of "group lull:admins" runs after, on text the group was
// already written into.
//   - "corp$admins" (a "$" in a directory group's name): "$admins" is an
//     unknown group of the regexp, so the binding names group "corp": every
//     member of "corp" may "administer" lull (rewrite the guard's
//     parameters, mint lull-drainer's token: policy lull-administration),
//     and the members of "corp$admins" may not. A widening.
//   - "ops$1": "$1" expands to the matched line's indentation and "name: ".
//   - "x group lull:admins": the subject already written is rewritten again.
//
// Expected (safe): the subject is exactly the value (and the guard
// otherwise kustomize's), or the render refuses the value clearly.
func TestRedteamChartAdmissionAdminGroupRewritten(t *testing.T) {
	for _, admin := range []string{"corp$admins", "ops$1", "team$$x", "x group lull:admins"} {
		v := guardValues{admin: admin}.withDefaults()
		h, err := chartGuard(t, v)
		if err != nil {
			if !clearRefusal.MatchString(err.Error()) {
				t.Errorf("adminGroup %q: refused unclearly: %v", admin, err)
			}
			continue
		}
		crb, ok := h["rbac.authorization.k8s.io/v1/ClusterRoleBinding/<nil>/lull-admins"]
		if !ok {
			t.Fatalf("no ClusterRoleBinding lull-admins")
		}
		if got := get(t, crb, "subjects", 0, "name"); got != admin {
			t.Errorf("adminGroup %q: ClusterRoleBinding lull-admins grants \"administer\" to group %q", admin, got)
			continue
		}
		checkGuard(t, v, h)
	}
}

// FAILS today. Attack: a line break the values check does not know.
// lull.admissionValues refuses "\n" in adminGroup ("without quotes,
// backslashes or line breaks") but not "\r", U+2028 or U+2029, which
// YAML also reads as line breaks: the group, written raw
// into the folded CEL message of lull-administration, ends the block
// scalar and the render fails with helm's "YAML parse error ... cannot
// unmarshal string into Go value of type releaseutil.SimpleHead", which
// names no value (and "\r" would end the CEL string too).
// Expected (safe): the chart's own refusal naming admission.adminGroup.
func TestRedteamChartAdmissionAdminGroupLineBreaks(t *testing.T) {
	for _, admin := range []string{"ops\radmins", "ops\u2028admins", "ops\u2029admins"} {
		guardOrClearRefusal(t, guardValues{admin: admin}.withDefaults())
	}
}

// FAILS today. Attack: names that pass the values check (DNS labels, label
// keys) but that YAML reads as another type when the chart writes them
// unquoted (namespace: {{ .Values.namespace }}, and the substitutions,
// which write the bare value after "namespace: ", "metadata.name: " and
// "key: "). kustomize writes them as strings. "1234" (a numeric team or
// cost-centre namespace) and "1e3" become numbers: paramRef.namespace,
// a namespaceSelector value and the ConfigMap's data are strings, so the
// install fails with a decoding error that names no value (kube-apiserver:
// "json: cannot unmarshal number into Go struct field
// ParamRef.spec.paramRef.namespace of type string"). "null" becomes null,
// which kube-apiserver accepts: the lease bindings' selector value and the
// parameters' leaseNamespace are stored as "" (a selector that matches no
// namespace, a match condition no request meets: the lease guard is
// silently off), a paramRef.namespace null is stored unset (parameters
// looked up in the request's namespace). "no" becomes false; a label key
// "null" an empty objectSelector key.
// Expected (safe): each such field is the string given (quote them), or
// the render refuses the value.
func TestRedteamChartAdmissionNamesReadAsOtherYAMLTypes(t *testing.T) {
	for _, v := range []guardValues{
		{ns: "1234"},
		{leaseNS: "null"},
		{leaseNS: "1e3"},
		{configNS: "no"},
		{label: "null"},
	} {
		guardOrClearRefusal(t, v.withDefaults())
	}
}

// FAILS today (low severity: the API server then refuses the install).
// Attack: a maintenanceLabel the values check calls a label key but that is
// none: its name part longer than 63 characters, or its prefix longer
// than 253. The render passes; the policies' objectSelector is refused by
// the API server at install, part-way through the release.
// Expected (safe): the render refuses it, as it refuses other non-keys.
func TestRedteamChartAdmissionLabelKeyTooLong(t *testing.T) {
	long := strings.Repeat("a", 64)
	prefix := strings.Repeat(strings.Repeat("b", 63)+".", 4) + "io" // 258 characters
	for _, label := range []string{"example.com/" + long, prefix + "/maintenance"} {
		_, err := chartGuard(t, guardValues{label: label}.withDefaults())
		if err == nil || !clearRefusal.MatchString(err.Error()) {
			t.Errorf("maintenanceLabel %q (%d characters): rendered (err %v), want the chart's refusal: not a label key", label, len(label), err)
		}
	}
}

// PASSES today (the chart held; a regression test). Attack: values a
// cluster admin may set that resemble, contain or extend the defaults the
// substitutions look for, or carry characters meaningful to a regexp
// replacement, to CEL or to YAML. Expected (safe), and what happens: the
// first list renders exactly kustomize's guard with the values moved
// (field by field), the second is refused with the chart's own message.
func TestRedteamChartAdmissionHeldValues(t *testing.T) {
	for _, v := range []guardValues{
		// Labels that contain, extend or prefix the default (the guard's
		// own annotation lull.dev/maintenance-label-params stays).
		{label: "lull.dev/maintenance-x"},
		{label: "x.lull.dev/maintenance"},
		{label: "lull.dev/maintenance.v2"},
		{label: "lull.dev/maintenance_v2"},
		{label: "lull.dev/maintenance-label-params"},
		{label: "maintenance"},
		{label: "lull.dev/Maintenance"},
		{label: "example.com/maint"},
		// Namespaces spelled like another default, or equal to each other.
		{ns: "lull-leases", leaseNS: "lull-system"},
		{ns: "lull-configs", configNS: "lull-system"},
		{leaseNS: "lull-system"},
		{configNS: "lull-leases", leaseNS: "night-leases"},
		{leaseNS: "lull-leases", configNS: "lull-leases"},
		{leaseNS: "lull-configs", configNS: "lull-configs"},
		{ns: "lull-system-2", leaseNS: "lull-leases-2", configNS: "lull-configs-2"},
		{ns: "x-lull-system", leaseNS: "x-lull-leases", configNS: "x-lull-configs"},
		// Groups with characters meaningful to YAML, CEL messages, printf.
		{admin: "ops:admins"},
		{admin: "Lull Admins"},
		{admin: "ops#admins"},
		{admin: "- ops"},
		{admin: "{ops}"},
		{admin: "ops: admins"},
		{admin: "%s%d"},
		{admin: "ops$"},
		{admin: "system:masters"},
		// Everything moved at once, each spelled like another's default.
		{label: "x.lull.dev/maintenance", ns: "lull-leases", leaseNS: "lull-system", configNS: "lull-leases", admin: "lull:maintainers"},
	} {
		v = v.withDefaults()
		h, err := chartGuard(t, v)
		if err != nil {
			t.Errorf("%v: refused, want the guard with these values: %v", v, err)
			continue
		}
		checkGuard(t, v, h)
	}
	for _, v := range []guardValues{
		// Not label keys: "$1" would expand in the replacement, "\" escape.
		{label: "lull.dev/maintenance$1"},
		{label: `lull.dev/m\1`},
		{label: `lull.dev/m"x`},
		{label: "lull.dev/m'x"},
		{label: "lull.dev/m: x"},
		{label: "Example.com/m"},
		{label: "lull.dev/maintenance\n  x: y"},
		// Not namespace names.
		{ns: "lull-system\n    namespace: evil"},
		{leaseNS: "lull-leases\n  x: y"},
		{configNS: "Lull-Configs"},
		{ns: "lull-system "},
		// Groups that would end a CEL string or a line.
		{admin: `o"ps`},
		{admin: "o'ps"},
		{admin: `o\ps`},
		{admin: "o\nps"},
	} {
		v = v.withDefaults()
		_, err := chartGuard(t, v)
		if err == nil || !clearRefusal.MatchString(err.Error()) {
			t.Errorf("%v: rendered or refused unclearly (%v), want the chart's refusal naming the value", v, err)
		}
	}
}

// FAILS today. The two silent findings above on a real kube-apiserver,
// with the chart installed by helm install: adminGroup=corp$admins,
// leaseNamespace=lull-configs, configNamespace=night-configs.
// Attacks and expected (safe) answers:
//   - a member of group "corp" (not "corp$admins") rewrites the guard's
//     parameters: refused by lull-administration (today allowed: the
//     ClusterRoleBinding lull-admins names "corp");
//   - a member of "corp$admins" does: allowed (today refused);
//   - a tool takes over a node lease another tool holds in the lease
//     namespace lull-configs: refused by lull-node-leases (today allowed:
//     the lease bindings select night-configs).
func TestRedteamChartAdmissionOnAPIServer(t *testing.T) {
	g := &guarded{t: t, kubeconfig: apiServer(t), dir: t.TempDir()}
	run(t, nil, bin(t, "helm"), "--kubeconfig", g.kubeconfig, "install", "lull", filepath.Join(framework.RepoRoot(), "charts", "lull"),
		"--set-string", "admission.adminGroup=corp$admins", "--set", "leaseNamespace=lull-configs", "--set", "configNamespace=night-configs")
	g.must("create", "-f", g.file("nodes.yaml", guardNodes("n1")))
	g.operators(append(append([]string{}, alice...), "label", "node", "n1", "lull.dev/maintenance=x", "--dry-run=server"), "lull-maintenance-label")
	// Operators may write ConfigMaps in lull's namespace as far as RBAC
	// goes: the guard decides.
	g.must("-n", "lull-system", "create", "role", "e2e-editor", "--verb=get,update,patch", "--resource=configmaps")
	g.must("-n", "lull-system", "create", "rolebinding", "e2e-editor", "--role=e2e-editor", "--group="+framework.GuardOperators)
	widen := mergePatch("configmap", "lull-admission", `{"data":{"maintainersGroup":"system:authenticated"}}`, "-n", "lull-system", "--dry-run=server")
	only := refusedBy("lull-administration", "may be written only by lull's administrators")
	g.steps(t, []guardStep{
		{name: "control: the administration guard is active (an operator outside every admin group)", as: alice, args: widen, refused: only, eventually: true},
		{name: `a member of group "corp" alone cannot rewrite the guard's parameters`, as: guardAs("e2e-corp", "corp"), args: widen, refused: only},
		{name: `a member of the admin group "corp$admins" may`, as: guardAs("e2e-admin", "corp$admins"), args: widen},
	})

	kured := guardAs("e2e-kured")
	intruder := guardAs("e2e-intruder")
	g.must(append(append([]string{}, kured...), "create", "-f", g.file("lease.yaml",
		"apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: n1, namespace: lull-configs}\nspec: {holderIdentity: kured-n1, leaseDurationSeconds: 3600}\n"))...)
	takeover := append(append([]string{}, intruder...), mergePatch("lease", "n1", `{"spec":{"holderIdentity":"intruder"}}`, "-n", "lull-configs", "--dry-run=server")...)
	// Each policy becomes active on its own: ask for up to 30 s.
	var last error
	_ = wait.PollUntilContextTimeout(t.Context(), 2*time.Second, 30*time.Second, true, func(context.Context) (bool, error) {
		_, last = g.kubectl(takeover...)
		return last != nil, nil
	})
	if last == nil || !strings.Contains(last.Error(), "ValidatingAdmissionPolicy 'lull-node-leases'") {
		sel := g.jsonpath(t, "{.spec.matchResources.namespaceSelector.matchLabels}", "get", "validatingadmissionpolicybinding", "lull-node-leases")
		t.Errorf("another tool takes over the lease lull-configs/n1 that e2e-kured holds (leaseNamespace=lull-configs): %v; "+
			"the binding lull-node-leases selects %s", last, sel)
	}
}

// FAILS today. Attack: a leaseNamespace that holds other components'
// Leases. The lease bindings select the lease namespace so that "no other
// Lease (kubelet heartbeats, leader elections) is ever evaluated"
// (leases.yaml); the chart checks only that the value is a DNS label.
// With leaseNamespace=kube-system (or kube-node-lease) lull-node-leases
// judges kube-controller-manager's and kube-scheduler's leader-election
// leases (or every kubelet's heartbeat): each was acquired before the
// guard, so it has no recorded principal, and only lull-drainer and the
// maintainers may update it. The control plane's leader elections (or
// every node's heartbeat: all nodes NotReady, their pods evicted) are
// refused; a missing lull-admission (parameterNotFoundAction: Deny)
// refuses them too. An admin may well take "node disruption leases" for
// kube-node-lease, or put lull's leases in kube-system.
// Expected (safe): the render refuses such a leaseNamespace with a clear
// message (kube-system, kube-node-lease, kube-public).
func TestRedteamChartAdmissionLeaseNamespaceHoldsOthersLeases(t *testing.T) {
	for _, ns := range []string{"kube-node-lease", "kube-system"} {
		_, err := chartGuard(t, guardValues{leaseNS: ns}.withDefaults())
		if err == nil || !strings.Contains(err.Error(), "leaseNamespace") {
			t.Errorf("leaseNamespace=%s: rendered (err %v), want a refusal naming leaseNamespace: the lease guard would judge the leases of other components there", ns, err)
		}
	}
}

// FAILS today. TestRedteamChartAdmissionLeaseNamespaceHoldsOthersLeases on
// a real kube-apiserver: kube-controller-manager's leader-election lease
// exists in kube-system, then lull is installed by helm with
// leaseNamespace=kube-system (createNamespace=false: kube-system exists).
// Expected (safe): helm refuses the values, or kube-controller-manager
// still renews its lease. Today the renewal is refused by lull-node-leases.
func TestRedteamChartAdmissionLeaseNamespaceKubeSystemOnAPIServer(t *testing.T) {
	g := &guarded{t: t, kubeconfig: apiServer(t), dir: t.TempDir()}
	lease := "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: kube-controller-manager, namespace: kube-system}\n" +
		"spec: {holderIdentity: cp-1_0b6d, leaseDurationSeconds: %d}\n"
	g.must("create", "-f", g.file("kcm-lease.yaml", fmt.Sprintf(lease, 15)))
	// kube-controller-manager renews (RBAC: get and update on its lease).
	renew := []string{"--as=system:kube-controller-manager", "--as-group=system:authenticated", "replace", "--dry-run=server", "-f", g.file("kcm-renew.yaml", fmt.Sprintf(lease, 16))}
	if _, err := g.kubectl(renew...); err != nil {
		t.Fatalf("control: kube-controller-manager cannot renew its lease before lull is installed: %v", err)
	}
	g.must("create", "namespace", "lull-system")
	g.must("create", "namespace", "lull-configs")
	_, err := runErr(nil, bin(t, "helm"), "--kubeconfig", g.kubeconfig, "install", "lull", filepath.Join(framework.RepoRoot(), "charts", "lull"),
		"--set", "createNamespace=false", "--set", "leaseNamespace=kube-system")
	if err != nil {
		if !strings.Contains(err.Error(), "leaseNamespace") {
			t.Errorf("helm install refused the values without naming leaseNamespace: %v", err)
		}
		return
	}
	g.must("create", "-f", g.file("nodes.yaml", guardNodes("n1")))
	g.operators(append(append([]string{}, alice...), "label", "node", "n1", "lull.dev/maintenance=x", "--dry-run=server"), "lull-maintenance-label")
	// Each policy becomes active on its own: ask for up to 30 s.
	var last error
	_ = wait.PollUntilContextTimeout(t.Context(), 2*time.Second, 30*time.Second, true, func(context.Context) (bool, error) {
		_, last = g.kubectl(renew...)
		return last != nil, nil
	})
	switch {
	case last != nil && strings.Contains(last.Error(), "lull-node-leases"):
		t.Errorf("kube-controller-manager cannot renew its leader-election lease after helm install --set leaseNamespace=kube-system:\n%v", last)
	case last != nil:
		t.Fatalf("the renewal failed otherwise: %v", last)
	}
}
