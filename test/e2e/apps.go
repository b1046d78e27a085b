package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"lull.dev/lull/internal/drain"
)

// OptedInDeployment is a Deployment in "default" whose pods (label
// app=<name>) are placed by lull-scheduler. Its image is never pulled: kwok
// runs its pods on simulated nodes.
func OptedInDeployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					SchedulerName: "lull-scheduler",
					Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}},
				},
			},
		},
	}
}

// GuardedApp creates OptedInDeployment(name, replicas), changed by mutate
// when it is not nil, and a PodDisruptionBudget for its pods (spec's
// selector is filled in); both are removed after the test.
func (c *Cluster) GuardedApp(t *testing.T, name string, replicas int32, spec policyv1.PodDisruptionBudgetSpec, mutate func(*corev1.PodSpec)) {
	t.Helper()
	ctx, cs := t.Context(), c.Clientset
	dep := OptedInDeployment(name, replicas)
	if mutate != nil {
		mutate(&dep.Spec.Template.Spec)
	}
	_, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { c.RemoveApp(t, name) })
	spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}
	_, err = cs.PolicyV1().PodDisruptionBudgets("default").Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: spec,
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.PolicyV1().PodDisruptionBudgets("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// WaitBudgetAllows waits until the PodDisruptionBudget name (its status
// current for its generation) allows at least allowed disruptions: the
// precondition of a scenario that drains its pods. The disruption
// controller of kube-controller-manager computes that status; seen once in
// CI, a conflict storm as the pods came up left it at 0 for good (its
// last sync before the pods were Ready, none after), so a budget still at
// 0 after 20 s is touched (an annotation) to have it synced again.
func (c *Cluster) WaitBudgetAllows(t *testing.T, name string, allowed int32) {
	t.Helper()
	ctx, cs := t.Context(), c.Clientset
	start, touched := time.Now(), false
	var last policyv1.PodDisruptionBudgetStatus
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pdb, err := cs.PolicyV1().PodDisruptionBudgets("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = pdb.Status
		if pdb.Status.ObservedGeneration >= pdb.Generation && pdb.Status.DisruptionsAllowed >= allowed {
			return true, nil
		}
		if !touched && time.Since(start) > 20*time.Second {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{"e2e.lull.dev/resync":%q}}}`, time.Now().Format(time.RFC3339Nano))
			_, _ = cs.PolicyV1().PodDisruptionBudgets("default").Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			touched = true
			t.Logf("PodDisruptionBudget %s still allows %d disruptions after 20s (%+v): touched it", name, pdb.Status.DisruptionsAllowed, pdb.Status)
		}
		return false, nil
	})
	require.NoError(t, err, "PodDisruptionBudget %s never allowed %d disruption(s): %+v", name, allowed, last)
}

// UnfinishedEvictions returns the pods PodDisruptionBudget name still
// counts as evicted although they run on (status.disruptedPods names them
// and they are not terminating), and when the budget stops counting the
// last of them (drain.DisruptionTimeout after the eviction). An eviction
// the API server approved and counted down, whose pod it then did not
// delete because the evicting client died in the middle of the request
// (lull-drainer killed by the crash test), leaves such a pod: until then
// the budget allows no other disruption, however healthy its pods.
func (c *Cluster) UnfinishedEvictions(ctx context.Context, name string) (pods []string, frees time.Time) {
	pdb, err := c.Clientset.PolicyV1().PodDisruptionBudgets("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, time.Time{}
	}
	for pod, at := range pdb.Status.DisruptedPods {
		p, err := c.Clientset.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp != nil {
			continue
		}
		pods = append(pods, pod)
		if f := at.Add(drain.DisruptionTimeout); f.After(frees) {
			frees = f
		}
	}
	slices.Sort(pods)
	return pods, frees
}

// RemoveApp deletes a test's Deployment and waits until its pods are gone,
// so their deletion is never seen by a later scenario's watchers.
func (c *Cluster) RemoveApp(t *testing.T, name string) {
	ctx := context.Background()
	_ = c.Clientset.AppsV1().Deployments("default").Delete(ctx, name, metav1.DeleteOptions{})
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := c.Clientset.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		return err == nil && len(pods.Items) == 0, nil
	})
	if err != nil {
		t.Logf("pods of %s still there after a minute: %v", name, err)
	}
}
