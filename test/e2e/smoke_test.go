package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

var cluster *Cluster

func TestMain(m *testing.M) {
	if spec := os.Getenv(forwardEnv); spec != "" {
		os.Exit(forwardMain(spec)) // the Cluster API manager's way to the API server
	}
	ctrllog.SetLogger(klog.Background())
	c, err := UpCluster(8) // the crash scenario uses 7 nodes at once
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(1)
	}
	cluster = c
	code := m.Run()
	if code != 0 {
		// Keep the logs of a failed run: a fault scenario's failure may
		// not happen again on the next run.
		kept, err := os.MkdirTemp("", "lull-e2e-failed-logs-")
		if err == nil {
			_ = os.Remove(kept)
			err = os.Rename(filepath.Join(c.Dir, "logs"), kept)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e: failed; %s (removed on exit: %v)\n", c.LogsHint(), err)
		} else {
			fmt.Fprintf(os.Stderr, "e2e: failed; component logs kept in %s\n", kept)
		}
	}
	if err := c.Down(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
	}
	os.Exit(code)
}

// TestSmokeDeploymentSurvivesDrain proves the local cluster behaves like a
// real one: a Deployment's pods run on kwok nodes, kubectl drain evicts them
// and the ReplicaSet recreates them on other nodes.
func TestSmokeDeploymentSurvivesDrain(t *testing.T) {
	ctx := t.Context()
	cs := cluster.Clientset
	labels := map[string]string{"app": "smoke"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](20),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/smoke:1"}}},
			},
		},
	}
	_, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { cluster.RemoveApp(t, "smoke") })

	byNode := waitRunning(ctx, t, 20, "")
	var victim string
	for n := range byNode {
		victim = n
		break
	}
	require.NotEmpty(t, victim)
	t.Logf("pods per node before drain: %v; draining %s", byNode, victim)

	out, err := cluster.Kubectl(ctx, 2*time.Minute, "drain", victim, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=90s")
	require.NoError(t, err, "kubectl drain: %s", out)
	t.Cleanup(func() { _, _ = cluster.Kubectl(context.Background(), time.Minute, "uncordon", victim) })

	after := waitRunning(ctx, t, 20, victim)
	t.Logf("pods per node after drain: %v", after)
	require.Zero(t, after[victim], "no pod runs on the drained node")
}

// waitRunning waits until want pods labelled app=smoke are Running and none
// is on avoid; it returns the count per node.
func waitRunning(ctx context.Context, t *testing.T, want int, avoid string) map[string]int {
	t.Helper()
	var last map[string]int
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cluster.Clientset.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=smoke"})
		if err != nil {
			lastErr = err
			return false, nil
		}
		last = map[string]int{}
		running := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
				continue
			}
			last[p.Spec.NodeName]++
			running++
		}
		return running == want && last[avoid] == 0, nil
	})
	require.NoError(t, err, "waiting for %d Running pods off %q; last seen per node: %v (list error: %v); %s", want, avoid, last, lastErr, cluster.LogsHint())
	return last
}
