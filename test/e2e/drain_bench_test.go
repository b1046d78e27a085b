package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	lullscheme "lull.dev/lull/pkg/scheme"
	"lull.dev/lull/test/framework"
)

// BenchmarkDrainNode drains one kwok node of 110 pods, 10 of them behind a
// maxUnavailable: 1 PodDisruptionBudget, once with lull (label -> Drained)
// and once with the built `kubectl drain`, in the same run on the same
// cluster, and prints the wall-time and API-request ratios. lull's requests
// are read from lull-drainer's own client-go metrics (everything it sent
// meanwhile, leader election included); kubectl's from its -v=6 log.
//
//	make bench-drain   (go test ./test/e2e -run '^$' -bench BenchmarkDrainNode -benchtime 1x)
func BenchmarkDrainNode(b *testing.B) {
	ctx := context.Background()
	nodes, err := cluster.Clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
	if err != nil || len(nodes.Items) < 4 {
		b.Fatalf("need 4 kwok nodes: %v", err)
	}
	kubectlNode, lullNode := nodes.Items[len(nodes.Items)-1].Name, nodes.Items[len(nodes.Items)-2].Name

	kWall, kReq, kPods := drainWithKubectl(b, kubectlNode)
	lWall, lReq, lPods := drainWithLull(b, lullNode)
	b.ReportMetric(lWall.Seconds()/kWall.Seconds(), "wall-ratio")
	b.ReportMetric(float64(lReq)/float64(kReq), "request-ratio")
	fmt.Printf("drain of one node (110 pods, 10 behind a maxUnavailable=1 PDB)\n")
	fmt.Printf("  kubectl drain: %6.1fs  %4d API requests  (%d pods on the node)\n", kWall.Seconds(), kReq, kPods)
	fmt.Printf("  lull:          %6.1fs  %4d API requests  (%d pods on the node)\n", lWall.Seconds(), lReq, lPods)
	fmt.Printf("  ratio lull/kubectl: wall %.2f, requests %.2f\n", lWall.Seconds()/kWall.Seconds(), float64(lReq)/float64(kReq))
}

// fillNode puts 100 free pods and 10 PDB-guarded pods on node: the pods
// are created bound to it, then ReplicaSets adopt them, so evicted pods are
// recreated (elsewhere) as in a real cluster.
func fillNode(b *testing.B, ns, node string) int {
	ctx := context.Background()
	cs := cluster.Clientset
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	for app, n := range map[string]int32{"free": 100, "guarded": 10} {
		labels := map[string]string{"app": app}
		spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}}
		for i := int32(0); i < n; i++ {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", app, i), Namespace: ns, Labels: labels}, Spec: *spec.DeepCopy()}
			p.Spec.NodeName = node
			if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		rs := &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(n), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec}},
		}
		if _, err := cs.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	onNode := 0
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		running := 0
		onNode = 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
				if p.Spec.NodeName == node {
					onNode++
				}
			}
		}
		adopted := 0
		for _, p := range pods.Items {
			if metav1.GetControllerOf(&p) != nil {
				adopted++
			}
		}
		pdb, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "guarded", metav1.GetOptions{})
		return running == 110 && adopted == 110 && err == nil && pdb.Status.DisruptionsAllowed == 1, nil
	}); err != nil {
		b.Fatalf("pods not running: %v", err)
	}
	return onNode
}

func cleanupNode(ns, node string) {
	ctx := context.Background()
	_ = cluster.Clientset.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	_, _ = cluster.Kubectl(ctx, time.Minute, "uncordon", node)
}

// requestLine matches client-go's -v=6 log of one API response.
var requestLine = regexp.MustCompile(`"Response" verb="[A-Z]+"`)

func drainWithKubectl(b *testing.B, node string) (time.Duration, int, int) {
	pods := fillNode(b, "bench-kubectl", node)
	defer cleanupNode("bench-kubectl", node)
	cmd := exec.Command(filepath.Join(framework.BinDir(), "kubectl"), "--kubeconfig", cluster.Kubeconfig,
		"drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=10m", "-v=6")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		b.Fatalf("kubectl drain: %v\n%s", err, tail(out.String()))
	}
	wall := time.Since(start)
	n := 0
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if requestLine.MatchString(sc.Text()) {
			n++
		}
	}
	return wall, n, pods
}

func drainWithLull(b *testing.B, node string) (time.Duration, int, int) {
	ctx := context.Background()
	pods := fillNode(b, "bench-lull", node)
	defer cleanupNode("bench-lull", node)
	c, err := client.New(cluster.Config, client.Options{Scheme: lullscheme.New()})
	if err != nil {
		b.Fatal(err)
	}
	before, beforeBy := drainerRequests(b)
	start := time.Now()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"bench"}}}`, lullv1alpha1.MaintenanceLabel)
	if _, err := cluster.Clientset.CoreV1().Nodes().Patch(ctx, node, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		b.Fatal(err)
	}
	var nm lullv1alpha1.NodeMaintenance
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		return c.Get(ctx, client.ObjectKey{Name: node}, &nm) == nil && nm.Status.Phase == lullv1alpha1.PhaseDrained, nil
	}); err != nil {
		b.Fatalf("lull never drained %s: %+v", node, nm.Status)
	}
	wall := time.Since(start)
	after, afterBy := drainerRequests(b)
	requests := after - before
	for m, n := range afterBy {
		if d := n - beforeBy[m]; d > 0 {
			b.Logf("lull-drainer requests %s: %d", m, d)
		}
	}
	unpatch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, lullv1alpha1.MaintenanceLabel)
	_, _ = cluster.Clientset.CoreV1().Nodes().Patch(ctx, node, "application/merge-patch+json", []byte(unpatch), metav1.PatchOptions{})
	return wall, requests, pods
}

// drainerRequests sums rest_client_requests_total from lull-drainer's
// metrics endpoint, in total and per method.
func drainerRequests(b *testing.B) (int, map[string]int) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", cluster.DrainerMetricsPort))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	total, by := 0, map[string]int{}
	method := regexp.MustCompile(`method="([A-Z]+)"`)
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "rest_client_requests_total{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			total += int(v)
			if m := method.FindStringSubmatch(line); m != nil {
				by[m[1]] += int(v)
			}
		}
	}
	return total, by
}

func tail(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}
