package budget

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
)

// rtWUOldWindowUse is windowUse as of 49d92b0: the window's nodes always
// listed and counted.
func rtWUOldWindowUse(ctx context.Context, cached client.Reader, w *lullv1alpha1.MaintenanceWindow, active []Active, inUseLabels map[string]labels.Set) (maxUnavailable int, inUse []string, unresolved, err error) {
	sel := WindowSelector(w)
	var selected corev1.NodeList // counted only: not copied
	if err := cached.List(ctx, &selected, client.MatchingLabelsSelector{Selector: sel}, client.UnsafeDisableDeepCopy); err != nil {
		return 0, nil, nil, fmt.Errorf("listing nodes of window %s: %w", w.Name, err)
	}
	for _, a := range active {
		if l, ok := inUseLabels[a.Node]; slices.Contains(a.Budgets, w.Name) || (ok && sel.Matches(l)) {
			inUse = append(inUse, a.Node)
		}
	}
	maxUnavailable, unresolved = MaxUnavailable(w, len(selected.Items))
	if unresolved != nil {
		return 0, inUse, unresolved, nil
	}
	return maxUnavailable, inUse, nil, nil
}

func rtWUErr(e error) string {
	if e == nil {
		return ""
	}
	return e.Error()
}

// rtWUMaxUnavailables is every kind of maxUnavailable: missing (default
// 1), the freezes, numbers, percentages rounding to 0 or above the node
// count, and values admission refuses (kept for a window written before
// validation, or with validation off).
func rtWUMaxUnavailables() map[string]*intstr.IntOrString {
	out := map[string]*intstr.IntOrString{"nil (default 1)": nil}
	for _, i := range []int32{0, 1, 2, 3, 5, 7, 100, 100000, 100001, -1, -100} {
		out[fmt.Sprintf("int %d", i)] = ptr.To(intstr.FromInt32(i))
	}
	for _, s := range []string{"0%", "1%", "10%", "14%", "15%", "33%", "50%", "99%", "100%", "101%", "150%", "-5%", "-0%",
		"0", "3", "", "%", "abc", " 10%", "10 %", "10.5%", "00%", "050%", "1e2%", "+10%"} {
		out[fmt.Sprintf("string %q", s)] = ptr.To(intstr.FromString(s))
	}
	// A type intstr does not know (a hand-built object).
	out["type 7"] = &intstr.IntOrString{Type: 7, IntVal: 2, StrVal: "50%"}
	// Both fields set (an object built in code): the Type decides.
	out["int with a StrVal"] = &intstr.IntOrString{Type: intstr.Int, IntVal: 2, StrVal: "100%"}
	out["string with an IntVal"] = &intstr.IntOrString{Type: intstr.String, IntVal: 5, StrVal: "10%"}
	return out
}

func rtWUNodes(n int, lbl map[string]string) []client.Object {
	var out []client.Object
	for i := 0; i < n; i++ {
		out = append(out, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i), Labels: lbl}})
	}
	return out
}

// Every maxUnavailable, against windows of 0, 1, 7 and 40 selected nodes
// (and nodes outside the window), with and without a selector (valid and
// invalid), and nodes in use recorded or matched by labels: windowUse and
// Left give exactly what the old code gave.
func TestRedteamWindowUseSameBudgetAsBefore(t *testing.T) {
	ctx := context.Background()
	selectors := map[string]*metav1.LabelSelector{
		"no selector":      nil,
		"pool=a":           {MatchLabels: map[string]string{"pool": "a"}},
		"invalid selector": {MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: "Bogus"}}},
		"matches nothing":  {MatchLabels: map[string]string{"pool": "zzz"}},
	}
	for _, inWindow := range []int{0, 1, 7, 40} {
		objs := append(rtWUNodes(inWindow, map[string]string{"pool": "a"}), rtWUNodes(0, nil)...)
		for i := 0; i < 3; i++ {
			objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("other%d", i), Labels: map[string]string{"pool": "b"}}})
		}
		c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).Build()
		for selName, sel := range selectors {
			for muName, mu := range rtWUMaxUnavailables() {
				w := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "w"},
					Spec: lullv1alpha1.MaintenanceWindowSpec{NodeSelector: sel, MaxUnavailable: mu}}
				for _, active := range [][]Active{
					nil,
					{{Node: "n0", Budgets: []string{"w"}}},
					{{Node: "n0"}, {Node: "other0"}, {Node: "gone", Budgets: []string{"w"}}},
					{{Node: "other1", Budgets: []string{"w"}}, {Node: "n1"}, {Node: "n2"}, {Node: "n3"}},
				} {
					inUseLabels, err := labelsOf(ctx, c, active)
					require.NoError(t, err)
					name := fmt.Sprintf("%d nodes, %s, %s, active %v", inWindow, selName, muName, active)
					om, oi, ou, oe := rtWUOldWindowUse(ctx, c, w, active, inUseLabels)
					nm, ni, nu, ne := windowUse(ctx, c, w, active, inUseLabels)
					require.Equal(t, om, nm, "maxUnavailable: %s", name)
					require.Equal(t, oi, ni, "inUse: %s", name)
					require.Equal(t, rtWUErr(ou), rtWUErr(nu), "unresolved: %s", name)
					require.Equal(t, rtWUErr(oe), rtWUErr(ne), "err: %s", name)
					// The promise itself: never more than a number allows.
					if mu != nil && mu.Type == intstr.Int && ne == nil && nu == nil {
						require.LessOrEqual(t, nm, int(mu.IntVal), name)
					}
					if mu == nil {
						require.Equal(t, 1, nm, "a missing maxUnavailable is 1: %s", name)
					}
				}
			}
		}
	}
}

// Left (what another disruptor is told) is the same as before, for every
// maxUnavailable, with requests recorded against the window.
func TestRedteamWindowUseLeftSameAsBefore(t *testing.T) {
	ctx := context.Background()
	objs := rtWUNodes(7, map[string]string{"pool": "a"})
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).Build()
	for muName, mu := range rtWUMaxUnavailables() {
		w := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "w"},
			Spec: lullv1alpha1.MaintenanceWindowSpec{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}, MaxUnavailable: mu}}
		active := []Active{{Node: "n0", Budgets: []string{"w"}}, {Node: "n1"}}
		inUseLabels, err := labelsOf(ctx, c, active)
		require.NoError(t, err)
		om, oi, _, oe := rtWUOldWindowUse(ctx, c, w, active, inUseLabels)
		nm, ni, _, ne := windowUse(ctx, c, w, active, inUseLabels)
		require.NoError(t, oe)
		require.NoError(t, ne)
		require.Equal(t, max(0, om-len(oi)), max(0, nm-len(ni)), "Left room for %s", muName)
	}
}

// A failed read of the window's nodes. Before: every window failed closed
// (an error, no budget). Now: a window with a number never reads the
// nodes, so it gets its budget; a percentage still fails. Recorded here as
// the one observable difference (the budget given is the old one's when
// the read works; it never exceeds the number).
func TestRedteamWindowUseListErrorDifference(t *testing.T) {
	ctx := context.Background()
	base := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(rtWUNodes(3, nil)...).Build()
	failing := interceptor.NewClient(base, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*corev1.NodeList); ok {
				return errors.New("cache: timed out waiting for Node informer")
			}
			return c.List(ctx, list, opts...)
		},
	})
	active := []Active{{Node: "n0", Budgets: []string{"w"}}}
	for muName, mu := range map[string]*intstr.IntOrString{"nil": nil, "int 2": ptr.To(intstr.FromInt32(2)), "int 0": ptr.To(intstr.FromInt32(0)), "50%": ptr.To(intstr.FromString("50%"))} {
		w := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "w"}, Spec: lullv1alpha1.MaintenanceWindowSpec{MaxUnavailable: mu}}
		_, _, _, oe := rtWUOldWindowUse(ctx, failing, w, active, nil)
		nm, ni, nu, ne := windowUse(ctx, failing, w, active, nil)
		require.Error(t, oe, "old code failed closed for %s", muName)
		if mu != nil && mu.Type == intstr.String {
			require.Error(t, ne, "a percentage still fails on a failed node read (%s)", muName)
			continue
		}
		require.NoError(t, ne, muName)
		require.NoError(t, nu, muName)
		want := 1
		if mu != nil {
			want = int(mu.IntVal)
		}
		require.Equal(t, want, nm, muName)
		require.Equal(t, []string{"n0"}, ni, muName)
	}
}
