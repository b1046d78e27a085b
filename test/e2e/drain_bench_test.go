package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/test/framework"
)

// BenchmarkDrainNode drains one kwok node of 110 pods, 10 of them behind a
// maxUnavailable: 1 PodDisruptionBudget, once with lull (label -> Drained)
// and once with the built `kubectl drain`, in the same run on the same
// cluster, and prints the wall-time and API-request ratios. lull's requests
// are the sum of every drainer replica's client-go metrics (everything
// they sent meanwhile, leader election and the standby included), broken
// down by verb and resource from the API server's audit log; kubectl's
// are the responses in its -v=6 log. The ratio is refused when fewer
// requests were counted than the API server saw evictions.
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

// cleanupNode deletes ns and waits until it is gone: the pods kubectl's
// drain evicted were recreated on other nodes, lull's among them, and a
// namespace still terminating there made lull's drain evict them too (403,
// "being terminated"), skewing its count.
func cleanupNode(ns, node string) {
	ctx := context.Background()
	_ = cluster.Clientset.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cluster.Clientset.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
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
	return time.Since(start), countResponses(&out), pods
}

// countResponses counts the API responses in a client-go -v=6 log.
func countResponses(log *bytes.Buffer) int {
	n := 0
	sc := bufio.NewScanner(log)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if requestLine.MatchString(sc.Text()) {
			n++
		}
	}
	return n
}

func drainWithLull(b *testing.B, node string) (time.Duration, int, int) {
	ctx := context.Background()
	pods := fillNode(b, "bench-lull", node)
	defer cleanupNode("bench-lull", node)
	c, err := client.New(cluster.Config, client.Options{Scheme: lullscheme.New()})
	if err != nil {
		b.Fatal(err)
	}
	before, leaseBefore := scrapeDrainers(b), leaderLease(b)
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
	end := time.Now()
	after, leaseAfter := scrapeDrainers(b), leaderLease(b)
	requests := 0
	var perReplica, leading []string
	for _, p := range drainerProcs() {
		d := after[p.name].requests - before[p.name].requests
		requests += d
		perReplica = append(perReplica, fmt.Sprintf("%s %d", p.name, d))
		if before[p.name].leading && after[p.name].leading {
			leading = append(leading, p.name)
		}
	}
	au := drainerAudit(b, start, end)
	left := pods - podsOnNode(b, "bench-lull", node)
	fmt.Printf("lull drain of %s: %d requests counted from every drainer replica's rest_client_requests_total (%s)\n", node, requests, strings.Join(perReplica, ", "))
	fmt.Printf("  leader: %s\n", describeLeader(leading, leaseBefore, leaseAfter, au))
	fmt.Printf("  %d requests in the API server's audit log (lull-drainer's user agents, both replicas), by verb and resource:\n", au.total)
	for _, k := range slices.Sorted(maps.Keys(au.by)) {
		fmt.Printf("    %-58s %4d\n", k, au.by[k])
	}
	others := au.total - au.evicted
	fmt.Printf("  evictions: %d succeeded (pods that left the node: %d), %d refused; the others: %d, of which leader election %d (per time, not per node) and %d for the drain itself\n",
		au.evicted, left, au.refused, others, au.leaderElection, others-au.leaderElection)
	unpatch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, lullv1alpha1.MaintenanceLabel)
	_, _ = cluster.Clientset.CoreV1().Nodes().Patch(ctx, node, "application/merge-patch+json", []byte(unpatch), metav1.PatchOptions{})
	if left > au.evicted {
		b.Fatalf("%d pods left node %s but the audit log shows only %d successful evictions by lull-drainer: the audit log is incomplete; no ratio", left, node, au.evicted)
	}
	if requests < au.evicted {
		b.Fatalf("counted %d lull-drainer requests but the API server saw %d evictions from it: the count misses the replica that drained (%s); no ratio", requests, au.evicted, strings.Join(perReplica, ", "))
	}
	return end.Sub(start), requests, pods
}

// replicaMetrics is what one drainer replica's metrics say.
type replicaMetrics struct {
	requests int // rest_client_requests_total, all codes and methods
	leading  bool
}

// scrapeDrainers reads every drainer replica's metrics endpoint; a replica
// that does not answer fails the benchmark (its requests would be missed).
func scrapeDrainers(b *testing.B) map[string]replicaMetrics {
	out := map[string]replicaMetrics{}
	for _, p := range drainerProcs() {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", p.metrics))
		if err != nil {
			b.Fatalf("reading %s's metrics (its requests must be counted): %v", p.name, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatalf("reading %s's metrics: %v", p.name, err)
		}
		m := replicaMetrics{leading: strings.Contains(string(body), `leader_election_master_status{name="lull-drainer"} 1`)}
		for _, line := range strings.Split(string(body), "\n") {
			if !strings.HasPrefix(line, "rest_client_requests_total{") {
				continue
			}
			f := strings.Fields(line)
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
				m.requests += int(v)
			}
		}
		out[p.name] = m
	}
	return out
}

// leaderLease reads the drainer's leader-election Lease.
func leaderLease(b *testing.B) *coordinationv1.Lease {
	l, err := cluster.Clientset.CoordinationV1().Leases("lull-system").Get(context.Background(), "lull-drainer", metav1.GetOptions{})
	if err != nil {
		b.Fatalf("reading the leader-election Lease lull-system/lull-drainer: %v", err)
	}
	return l
}

// describeLeader says which replica led the drain: the Lease's holder
// (the replica's identity, lull-drainer/<name>), whether it changed, the
// replica whose metrics said it led before and after, and the replicas
// that evicted (their user agents name them).
func describeLeader(leading []string, before, after *coordinationv1.Lease, au *drainAudit) string {
	holder := ptr.Deref(after.Spec.HolderIdentity, "")
	same := ptr.Deref(before.Spec.HolderIdentity, "") == holder &&
		ptr.Deref(before.Spec.LeaseTransitions, 0) == ptr.Deref(after.Spec.LeaseTransitions, 0)
	lease := fmt.Sprintf("Lease lull-system/lull-drainer held by %s (transitions %d)", holder, ptr.Deref(after.Spec.LeaseTransitions, 0))
	if !same {
		lease += fmt.Sprintf(", changed during the drain (was %s, transitions %d)", ptr.Deref(before.Spec.HolderIdentity, ""), ptr.Deref(before.Spec.LeaseTransitions, 0))
	} else {
		lease += ", unchanged during the drain"
	}
	return fmt.Sprintf("%v led before and after (leader_election_master_status); %s; evictions sent by %v", leading, lease, slices.Sorted(maps.Keys(au.evictedBy)))
}

// drainAudit is lull-drainer's share of the API server's audit log in a
// time span.
type drainAudit struct {
	total int
	// by counts requests by verb, resource and outcome.
	by                               map[string]int
	evicted, refused, leaderElection int
	evictedBy                        map[string]int
}

// replicaUA finds the replica's identity in lull-drainer's user agent
// ("lull-drainer/<version> (<identity>)"); leader election's client has
// its own user agent without it.
var replicaUA = regexp.MustCompile(`\((lull-drainer[^)]*)\)`)

// drainerAudit counts the requests lull-drainer's replicas sent between
// from and to, as the API server's audit log records them
// (hack/lib/cluster.sh write_audit_policy). It first waits until the log
// holds a drainer request received after to (leader election sends one
// every retry period), so the span's last requests are in it.
func drainerAudit(b *testing.B, from, to time.Time) *drainAudit {
	path := filepath.Join(cluster.Dir, "logs", "kube-apiserver-audit.log")
	var events []auditEvent
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		// The API server rotates the log at 100 MB (a 5,000-node wave
		// writes more): loggedDrainerRequests reads the rotated files too.
		all, err := loggedDrainerRequests()
		if err != nil {
			return false, err
		}
		events = events[:0]
		past := false
		for _, a := range all {
			past = past || a.RequestReceivedTimestamp.After(to)
			if !a.RequestReceivedTimestamp.Before(from) && !a.RequestReceivedTimestamp.After(to) {
				events = append(events, a)
			}
		}
		return past, nil
	})
	if err != nil {
		b.Fatalf("the audit log %s never showed a lull-drainer request after the drain: %v", path, err)
	}
	au := &drainAudit{by: map[string]int{}, evictedBy: map[string]int{}}
	for _, a := range events {
		au.total++
		key, code := a.Verb+" "+a.RequestURI, 0
		if a.ResponseStatus != nil {
			code = a.ResponseStatus.Code
		}
		if o := a.ObjectRef; o != nil {
			key = a.Verb + " " + o.Resource
			if o.Subresource != "" {
				key += "/" + o.Subresource
			}
			switch {
			case o.Resource == "leases" && o.Namespace == "lull-system":
				key += " " + o.Namespace + "/" + o.Name + " (leader election)"
				au.leaderElection++
			case o.Resource == "leases" || o.Resource == "configmaps":
				key += " " + o.Namespace
			}
			if o.Resource == "pods" && o.Subresource == "eviction" && a.Verb == "create" {
				if code == http.StatusCreated {
					au.evicted++
					replica := "?"
					if m := replicaUA.FindStringSubmatch(a.UserAgent); m != nil {
						replica = m[1]
					}
					au.evictedBy[replica]++
				} else {
					au.refused++
				}
			}
		}
		if code >= 300 {
			key += fmt.Sprintf(" -> %d", code)
			if code != http.StatusNotFound && code != http.StatusConflict && a.ResponseStatus.Message != "" {
				key += " (" + a.ResponseStatus.Message + ")" // say why a refusal is unexpected
			}
		}
		au.by[key]++
	}
	return au
}

// podsOnNode counts ns's pods on node that are not terminating.
func podsOnNode(b *testing.B, ns, node string) int {
	list, err := cluster.Clientset.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		b.Fatalf("listing the pods on %s: %v", node, err)
	}
	n := 0
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

func tail(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}
