package install

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"lull.dev/lull/test/framework"
)

// The guard is written once (issue 47): the chart renders the policies and
// bindings of manifests/admission, copied into charts/lull/files/admission
// by make generate. With every value that moves the guard set away from
// its default, the chart's objects are kustomize's with exactly those
// spellings moved, and none of the defaults is left in any of them: a
// policy that names the maintenance label, a namespace or the
// administrators' group in a spelling lull.admission (_helpers.tpl) does
// not follow fails here instead of guarding the wrong label in a Helm
// install. The parameters' ConfigMap, which the chart writes from its
// values, has kustomize's keys.
func TestChartAdmissionIsKustomize(t *testing.T) {
	moved := []struct {
		set      string
		from, to *regexp.Regexp
		by       string
	}{
		// Never the guard's own annotations lull.dev/maintenance-*.
		{set: "maintenanceLabel=example.com/maint", from: regexp.MustCompile(`lull\.dev/maintenance([^-a-zA-Z0-9_.])`), by: "example.com/maint${1}"},
		{set: "namespace=night", from: regexp.MustCompile(`lull-system`), by: "night"},
		{set: "leaseNamespace=night-leases", from: regexp.MustCompile(`lull-leases`), by: "night-leases"},
		{set: "configNamespace=night-configs", from: regexp.MustCompile(`lull-configs`), by: "night-configs"},
		{set: "admission.adminGroup=ops:admins", from: regexp.MustCompile(`lull:admins`), by: "ops:admins"},
	}
	args := []string{"--show-only", "templates/admission.yaml"}
	for _, m := range moved {
		args = append(args, "--set", m.set)
	}
	k := objects(t, "kubectl kustomize manifests/admission", run(t, nil, bin(t, "kubectl"), "kustomize", filepath.Join(framework.RepoRoot(), "manifests", "admission")))
	h := renderHelm(t, args...)

	const params = "v1/ConfigMap/%s/lull-admission"
	kp, hp := k[strings.Replace(params, "%s", "lull-system", 1)], h[strings.Replace(params, "%s", "night", 1)]
	if kp == nil || hp == nil {
		t.Fatalf("the parameters' ConfigMap: kustomize has %v, the chart %v", keys(k), keys(h))
	}
	if diff := cmp.Diff(keys(get(t, kp, "data").(map[string]any)), keys(get(t, hp, "data").(map[string]any))); diff != "" {
		t.Errorf("the parameters' keys differ (-kustomize +helm):\n%s", diff)
	}
	delete(k, strings.Replace(params, "%s", "lull-system", 1))
	delete(h, strings.Replace(params, "%s", "night", 1))

	if len(k) < 40 {
		t.Fatalf("kustomize rendered only %d admission objects: %v", len(k), keys(k))
	}
	want := map[string]object{}
	for key, o := range k {
		j, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		s := string(j)
		for _, m := range moved {
			s = m.from.ReplaceAllString(s, m.by)
		}
		var moved object
		if err := json.Unmarshal([]byte(s), &moved); err != nil {
			t.Fatal(err)
		}
		want[key] = moved
	}
	if diff := cmp.Diff(want, h); diff != "" {
		t.Errorf("the chart's admission guard is not manifests/admission with the values moved (-kustomize moved +helm):\n%s", diff)
	}
	for key, o := range h {
		j, _ := json.Marshal(o)
		for _, m := range moved {
			if m.from.Match(j) {
				t.Errorf("%s still has %s after --set %s", key, m.from, m.set)
			}
		}
	}
}

// Values the guard's selectors and CEL cannot hold are refused by the
// render with what to fix, never written into a guard that fails to
// install or matches something else (a replacement's $1, a quote that ends
// a CEL string).
func TestChartRefusesValuesTheGuardCannotHold(t *testing.T) {
	chart := filepath.Join(framework.RepoRoot(), "charts", "lull")
	for _, c := range []struct{ set, want string }{
		{set: "maintenanceLabel=bad label", want: `maintenanceLabel "bad label" is not a label key`},
		{set: "maintenanceLabel=example.com/m$1", want: `maintenanceLabel "example.com/m$1" is not a label key`},
		{set: "namespace=Bad_NS", want: `namespace "Bad_NS" is not a namespace name`},
		{set: "leaseNamespace=a.b", want: `leaseNamespace "a.b" is not a namespace name`},
		{set: "configNamespace=", want: `configNamespace "" is not a namespace name`},
		{set: "admission.adminGroup=o'ps", want: `admission.adminGroup "o'ps" must be a group name without quotes`},
		{set: "admission.adminGroup=", want: `admission.adminGroup "" must be a group name`},
	} {
		out, err := runErr(nil, bin(t, "helm"), "template", "lull", chart, "--set", c.set, "--show-only", "templates/admission.yaml")
		if err == nil || !strings.Contains(out+err.Error(), c.want) {
			t.Errorf("--set %s: rendered (err %v), want a refusal saying %s:\n%.400s", c.set, err, c.want, out)
		}
	}
	// A label that extends the default's spelling moves the selectors and
	// the CEL, not the guard's own annotation lull.dev/maintenance-label-params.
	h := renderHelm(t, "--set", "maintenanceLabel=lull.dev/maintenance-x", "--show-only", "templates/admission.yaml")
	j, _ := json.Marshal(h)
	for _, want := range []string{`lull.dev/maintenance-x\"`, `lull.dev/maintenance-label-params`} {
		if !strings.Contains(string(j), want) {
			t.Errorf("maintenanceLabel=lull.dev/maintenance-x: the guard lacks %s", want)
		}
	}
	if strings.Contains(string(j), `lull.dev/maintenance\"`) || strings.Contains(string(j), "lull.dev/maintenance-x-label-params") {
		t.Errorf("maintenanceLabel=lull.dev/maintenance-x: the default label or a moved annotation is left in the guard")
	}
}
