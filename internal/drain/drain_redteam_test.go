package drain

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// Red team (promise 6): AskBudgets asks "once per budget per round", but
// a budget counts as asked as soon as any pod it covers is asked, even a
// pod the API server refuses because of *another* budget (or, for a pod
// covered by two budgets, refuses outright: the eviction API does not
// support more than one budget per pod). Budget "zone" (cache: exhausted,
// API server: room for one) is never asked about its only other pod, in
// this round or any later one: the drain goes on without an eviction
// request while a budget allows one.
func TestRedteamBudgetAskedThroughAnotherBudgetsPod(t *testing.T) {
	mk := func(name string, labels map[string]string) *corev1.Pod {
		p := pod(name, "", 30)
		p.Labels = labels
		return p
	}
	sel := func(name string, labels map[string]string) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"},
			Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}},
			Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0}}
	}
	kube := fake.NewSimpleClientset(
		mk("a-0", map[string]string{"app": "api", "zone": "z"}), // covered by "api" and "zone"
		mk("b-0", map[string]string{"app": "web", "zone": "z"}), // covered by "zone" only
	)
	d, err := New(context.Background(), kube, Options{}, request())
	require.NoError(t, err)
	budgets := pdbReader(t, sel("api", map[string]string{"app": "api"}), sel("zone", map[string]string{"zone": "z"}))
	d.AskBudgets = true
	for round := 0; round < 3; round++ {
		var asked []string
		_, err = d.Round(context.Background(), budgets, func(p *corev1.Pod) Outcome {
			asked = append(asked, p.Name)
			if p.Name == "a-0" {
				return Refused // "api" allows none (or: two budgets, the API refuses)
			}
			return Evicted // "zone" had room: the cache was behind
		})
		require.NoError(t, err)
		require.Contains(t, asked, "b-0", "round %d: budget shop/zone allows a disruption, but its pod b-0 was never asked for (asked: %v)", round, asked)
	}
}

// Red team (promise 6, "an eviction error other than 429"): the budget
// counts as asked when its first pod's eviction fails for a reason that
// is not the budget at all (an admission webhook refusing that pod's
// eviction: 403, or a 500): the budget's other pods, which it has room
// for, are not asked this round, and the next ask (after
// --eviction-max-retry-delay) walks the same order into the same failure.
func TestRedteamBudgetAskedThroughAFailedEviction(t *testing.T) {
	kube := fake.NewSimpleClientset(pod("web-0", "web", 30), pod("web-1", "web", 30))
	d, err := New(context.Background(), kube, Options{}, request())
	require.NoError(t, err)
	budgets := pdbReader(t, pdb("web", "web", 0)) // the cache: exhausted; the API server: room for one
	d.AskBudgets = true
	for round := 0; round < 3; round++ {
		var asked []string
		_, err = d.Round(context.Background(), budgets, func(p *corev1.Pod) Outcome {
			asked = append(asked, p.Name)
			if p.Name == "web-0" {
				return Failed // refused by a webhook: says nothing of the budget
			}
			return Evicted
		})
		require.NoError(t, err)
		require.Contains(t, asked, "web-1", "round %d: budget shop/web allows a disruption, but only web-0 (whose eviction fails for another reason) was asked: %v", round, asked)
	}
}
