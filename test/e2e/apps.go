package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
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
