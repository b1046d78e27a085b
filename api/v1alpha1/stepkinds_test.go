package v1alpha1

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The catalog of step kinds is the one place a kind is described: the
// CRD's enum, and every list of kinds written in a validation or
// admission expression, must be a set the catalog gives. A kind
// half-added (an entry without its enum value, an enum value without an
// entry, an expression not updated) fails here.
func TestStepKindCatalog(t *testing.T) {
	sources := catalogSources(t)
	enum := kindEnum(t)
	require.Empty(t, checkCatalog(stepKinds, enum, sources))

	t.Run("a kind half-added is caught", func(t *testing.T) {
		// RunCommand in the catalog, a host step a rule names with a unit,
		// but neither in the enum nor in the expressions.
		half := map[DisruptionAction]StepKind{}
		for k, v := range stepKinds {
			half[k] = v
		}
		half["RunCommand"] = StepKind{Host: true, InRule: true, NamesUnit: true, FallsBack: true, Rank: 4, Order: 6}
		errs := checkCatalog(half, enum, sources)
		require.NotEmpty(t, errs)
		joined := fmt.Sprint(errs)
		require.Contains(t, joined, `"RunCommand" is in the catalog, not in the CRD's enum`)
		require.Contains(t, joined, "match no set of the catalog")

		// In the enum, not in the catalog.
		errs = checkCatalog(stepKinds, append(slices.Clone(enum), "RunCommand"), sources)
		require.Contains(t, fmt.Sprint(errs), `"RunCommand" is in the CRD's enum, not in the catalog`)
	})
}

// Every kind the catalog orders has its own place and rank, and a host
// step has a default timeout.
func TestStepKindsOrderAndRank(t *testing.T) {
	orders, ranks := map[int]DisruptionAction{}, map[int]DisruptionAction{}
	for a, k := range stepKinds {
		require.NotContains(t, orders, k.Order, "%s and %s share a place in the plan", a, orders[k.Order])
		require.NotContains(t, ranks, k.Rank, "%s and %s share a rank", a, ranks[k.Rank])
		orders[k.Order], ranks[k.Rank] = a, a
		if k.Host {
			require.Positive(t, k.DefaultTimeout, a)
		}
		require.NotEmpty(t, k.Verified, "%s: how its effect is seen", a)
		require.False(t, k.TakesNodeDown && !k.Drains, "%s takes the node down without a drain", a)
	}
	require.Equal(t, ActionNone, StepKinds()[0])
	require.Equal(t, StepPowerOff, StepKinds()[len(stepKinds)-1])
	require.Greater(t, DisruptionAction("RunCommand").Rank(), StepPowerOff.Rank(), "an unknown kind ranks above every known one")
}

// checkCatalog compares the catalog with the enum and with every list of
// kinds in sources (file → text): each list must be one of the sets the
// catalog defines.
func checkCatalog(cat map[DisruptionAction]StepKind, enum []string, sources map[string]string) []error {
	var errs []error
	for a := range cat {
		if !slices.Contains(enum, string(a)) {
			errs = append(errs, fmt.Errorf("%q is in the catalog, not in the CRD's enum (+kubebuilder:validation:Enum of DisruptionAction)", a))
		}
	}
	for _, e := range enum {
		if _, ok := cat[DisruptionAction(e)]; !ok {
			errs = append(errs, fmt.Errorf("%q is in the CRD's enum, not in the catalog (api/v1alpha1/stepkinds.go)", e))
		}
	}
	sets := map[string][]string{
		"names a unit":                    kindsWhere(cat, func(_ DisruptionAction, k StepKind) bool { return k.NamesUnit }),
		"host step a rule may name":       kindsWhere(cat, func(_ DisruptionAction, k StepKind) bool { return k.Host && k.InRule }),
		"drains (Drain, or drains first)": kindsWhere(cat, func(a DisruptionAction, k StepKind) bool { return a == ActionDrain || k.Drains }),
	}
	known := map[string]bool{}
	for a := range cat {
		known[string(a)] = true
	}
	for _, e := range enum {
		known[e] = true
	}
	list := regexp.MustCompile(`\[\s*(?:['"][A-Za-z]+['"]\s*,\s*)+['"][A-Za-z]+['"]\s*\]`)
	word := regexp.MustCompile(`[A-Za-z]+`)
	files := make([]string, 0, len(sources))
	for f := range sources {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		for _, m := range list.FindAllString(sources[f], -1) {
			items := word.FindAllString(m, -1)
			if !allKnown(items, known) {
				continue // not a list of kinds
			}
			sort.Strings(items)
			matched := false
			for _, set := range sets {
				matched = matched || slices.Equal(items, set)
			}
			if !matched {
				errs = append(errs, fmt.Errorf("%s: the kinds %s match no set of the catalog %v", f, m, sets))
			}
		}
	}
	return errs
}

func kindsWhere(cat map[DisruptionAction]StepKind, f func(DisruptionAction, StepKind) bool) []string {
	var out []string
	for a, k := range cat {
		if f(a, k) {
			out = append(out, string(a))
		}
	}
	sort.Strings(out)
	return out
}

func allKnown(items []string, known map[string]bool) bool {
	for _, it := range items {
		if !known[it] {
			return false
		}
	}
	return true
}

// kindEnum is DisruptionAction's enum marker, from which the CRDs are
// generated (make verify holds them equal).
func kindEnum(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("disruptionpolicy_types.go")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^// \+kubebuilder:validation:Enum=(.*)\ntype DisruptionAction string`).FindSubmatch(b)
	require.NotNil(t, m, "DisruptionAction's enum marker")
	return strings.Split(string(m[1]), ";")
}

// catalogSources are the files that write lists of kinds: this package's
// validation markers, the admission policies (kustomize's files, which the
// chart renders from its copy: make verify holds the copy equal) and the
// chart's templates.
func catalogSources(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, pattern := range []string{"*.go", "../../manifests/admission/*.yaml", "../../charts/lull/templates/*.yaml"} {
		files, err := filepath.Glob(pattern)
		require.NoError(t, err)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") || strings.HasPrefix(filepath.Base(f), "zz_generated") {
				continue
			}
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			out[f] = string(b)
		}
	}
	require.NotEmpty(t, out)
	return out
}
