package policy

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// guardCritical evaluates the admission guard's own variable
// "critical" (policy lull-disruptionpolicies in
// manifests/admission/policies.yaml, read from the file) for the guard's
// parameters data, as the API server would: the anchored regular
// expressions a restarted unit is matched against (criticalUndrained).
func guardCritical(t *testing.T, data map[string]string, unit string) bool {
	t.Helper()
	b, err := os.ReadFile("../../manifests/admission/policies.yaml")
	require.NoError(t, err)
	var expr string
	for _, doc := range strings.Split(string(b), "\n---") {
		var vap struct {
			Metadata struct{ Name string }
			Spec     struct {
				Variables []struct{ Name, Expression string }
			}
		}
		if yaml.Unmarshal([]byte(doc), &vap) != nil || vap.Metadata.Name != "lull-disruptionpolicies" {
			continue
		}
		for _, v := range vap.Spec.Variables {
			if v.Name == "critical" {
				expr = v.Expression
			}
		}
	}
	require.NotEmpty(t, expr, "the guard's variable critical")
	env, err := cel.NewEnv(cel.OptionalTypes(), ext.Strings(), cel.Variable("params", cel.DynType))
	require.NoError(t, err)
	ast, iss := env.Compile(expr)
	require.NoError(t, iss.Err())
	prg, err := env.Program(ast)
	require.NoError(t, err)
	out, _, err := prg.Eval(map[string]any{"params": map[string]any{"data": data}})
	require.NoError(t, err)
	patterns, err := out.ConvertToNative(reflect.TypeOf([]string{}))
	require.NoError(t, err)
	// The restarted unit as the guard's variable "restarts" spells it.
	restarted := UnitName(unit)
	for _, p := range patterns.([]string) {
		m, err := regexp.MatchString(p, restarted) // CEL's matches is RE2, as Go's regexp
		require.NoError(t, err, p)
		if m {
			return true
		}
	}
	return false
}

// TestGuardReadsCriticalUnitsAsThePlanners: "one list, read alike by the
// guard, the drainer ..." (red team 2). The guard's CEL and internal/policy
// read criticalUnits the same way: a type suffix added, "*" any
// characters, "*" alone every unit (also without the key), and every
// other character literal — a regular-expression metacharacter an admin
// writes ("kube?*", "a|b*") means itself to both.
func TestGuardReadsCriticalUnitsAsThePlanners(t *testing.T) {
	for _, tc := range []struct{ list, unit string }{
		{"kubelet.service", "kubelet.service"},
		{"kubelet", "kubelet.service"},
		{"*.mount", "var-lib-kubelet.mount"},
		{"k3s*", "k3s-agent.service"},
		{"", "kubelet.service"},
		{"kube?*", "kubelet.service"},
		{"containerd|kubelet*", "kubelet.service"},
		{"*", "var-lib-kubelet.mount"},
		{"*", "containerd.socket"},
		{"a.b*", "axb.service"},
		{"x+*", "xx.service"},
		{"(k)*", "k.service"},
		{"k$*", "k.service"},
		{`k\*`, "k.service"},
	} {
		data := map[string]string{CriticalUnitsKey: tc.list}
		guard := guardCritical(t, data, tc.unit)
		planner := CriticalIn(CriticalUnitsParam(data, true), tc.unit)
		require.Equal(t, guard, planner, "criticalUnits %q, restart of %s: the guard says critical=%v, the planners %v", tc.list, tc.unit, guard, planner)
	}
	for _, unit := range []string{"var-lib-kubelet.mount", "containerd.socket", "dbus.socket", "swapfile.swap", "kubelet.service"} {
		require.True(t, guardCritical(t, map[string]string{}, unit), "without the key every unit is critical to the guard: %s", unit)
	}
}
