package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"lull.dev/lull/test/framework"
)

// BenchmarkPlan previews a maintenance of two kwok nodes carrying 220 pods
// (20 behind PodDisruptionBudgets) with `kubectl lull plan`, against the
// closest existing preview, `kubectl drain --dry-run=client` of the same
// nodes (which lists the pods it would evict), in the same run on the same
// cluster: wall time (median of 5 runs of each binary) and API requests
// (each binary's client-go -v=6 log). plan decides more (policy, windows,
// budget, leases, PDB blockers) from one read of the cluster.
//
//	make bench-plan   (go test ./test/e2e -run '^$' -bench BenchmarkPlan -benchtime 1x)
func BenchmarkPlan(b *testing.B) {
	nodes, err := cluster.Clientset.CoreV1().Nodes().List(b.Context(), metav1.ListOptions{LabelSelector: "type=kwok"})
	if err != nil || len(nodes.Items) < 2 {
		b.Fatalf("need 2 kwok nodes: %v", err)
	}
	n1, n2 := nodes.Items[0].Name, nodes.Items[1].Name
	pods := fillNode(b, "bench-plan-1", n1) + fillNode(b, "bench-plan-2", n2)
	defer cleanupNode("bench-plan-1", n1)
	defer cleanupNode("bench-plan-2", n2)

	kWall, kReq := runMedian(b, "kubectl", "drain", n1, n2, "--dry-run=client", "--ignore-daemonsets", "--delete-emptydir-data")
	lWall, lReq := runMedian(b, "kubectl-lull", "plan", n1, n2, "--class", "kernel-update", "-o", "json")
	b.ReportMetric(lWall.Seconds()/kWall.Seconds(), "wall-ratio")
	b.ReportMetric(float64(lReq)/float64(kReq), "request-ratio")
	fmt.Printf("preview of a maintenance of 2 nodes (%d pods, 20 behind PodDisruptionBudgets), median of 5 runs\n", pods)
	fmt.Printf("  kubectl drain --dry-run=client: %6.3fs  %3d API requests\n", kWall.Seconds(), kReq)
	fmt.Printf("  kubectl lull plan:              %6.3fs  %3d API requests\n", lWall.Seconds(), lReq)
	fmt.Printf("  ratio plan/drain --dry-run: wall %.2f, requests %.2f\n", lWall.Seconds()/kWall.Seconds(), float64(lReq)/float64(kReq))
}

// runMedian runs a binary from _output/bin 5 times with -v=6 and returns
// the median wall time and the requests of the last run.
func runMedian(b *testing.B, bin string, args ...string) (time.Duration, int) {
	b.Helper()
	var walls []time.Duration
	requests := 0
	for i := 0; i < 5; i++ {
		cmd := exec.Command(filepath.Join(framework.BinDir(), bin), append([]string{"--kubeconfig", cluster.Kubeconfig, "-v=6"}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("%s %v: %v\n%s", bin, args, err, tail(out.String()))
		}
		walls = append(walls, time.Since(start))
		requests = 0
		sc := bufio.NewScanner(&out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if requestLine.MatchString(sc.Text()) {
				requests++
			}
		}
	}
	sort.Slice(walls, func(i, j int) bool { return walls[i] < walls[j] })
	return walls[len(walls)/2], requests
}
