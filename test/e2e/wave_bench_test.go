package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/budget"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/lease"
	"lull.dev/lull/test/framework"
)

// waveLabel marks the benchmark's nodes; its value is the node's quarter,
// which one window selects.
const (
	waveLabel = "lull.dev/e2e-wave"
	waveNS    = "bench-wave"
)

// waveWindows are the four always-open windows, one per quarter of the
// nodes, with budgets as counts and as percentages.
var waveWindows = []struct {
	name string
	max  intstr.IntOrString
}{
	{"wave-q0", intstr.FromInt32(10)},
	{"wave-q1", intstr.FromInt32(20)},
	{"wave-q2", intstr.FromString("5%")},
	{"wave-q3", intstr.FromString("10%")},
}

// BenchmarkFleetWave requests maintenance on every node of a fleet at once
// and plays the operator, who completes each request as soon as its node
// is Drained (removes the label, as docs/operations.md says). Four
// always-open windows with different budgets govern disjoint quarters of
// the nodes. It measures how soon a freed budget slot is taken by the next
// node of its window, how close the wave comes to the ideal the budgets
// allow, and what lull-drainer spends (CPU, peak RSS, API requests by
// verb, per replica), while the invariant watchers check that no budget is
// exceeded at any moment.
//
//	make bench-wave   (go test ./test/e2e -run '^$' -bench BenchmarkFleetWave -benchtime 1x -timeout 60m)
//
// LULL_WAVE_NODES (default 1000), LULL_WAVE_PODS_PER_NODE (default 1),
// and LULL_WAVE_TIMEOUT (the wave's own bound, default 40m: a 1,000-node
// wave takes ~3 min on 2 cores, 22 min before the 2026-11-24 fixes) change
// the run. After the wave, the same nodes are drained again the way an
// admin would script it without lull (kubectlScript), and lull's wall
// time, kube-apiserver CPU and requests per node are printed as ratios
// against that anchor (LULL_WAVE_ANCHOR=0 leaves it out).
func BenchmarkFleetWave(b *testing.B) {
	n, ppn := envInt(b, "LULL_WAVE_NODES", 1000), envInt(b, "LULL_WAVE_PODS_PER_NODE", 1)
	bound, err := time.ParseDuration(envOr("LULL_WAVE_TIMEOUT", "40m"))
	if err != nil {
		b.Fatalf("LULL_WAVE_TIMEOUT: %v", err)
	}
	if n < 4 {
		b.Fatalf("LULL_WAVE_NODES=%d: need at least 4 nodes (one per window)", n)
	}
	ctx := context.Background()
	w := &wave{b: b, n: n}
	b.Cleanup(w.cleanup)
	setupStart := time.Now()
	w.createNodes(ctx)
	w.createPods(ctx, ppn)
	w.createWindows(ctx)
	setup := time.Since(setupStart)

	iv := newInvariants(b, w.nodes...)
	for q, mw := range waveWindows {
		iv.budget(mw.name, w.max[q], w.quarter(q)...)
	}
	rec := w.watch(ctx)
	idle := apiserverIdleRate(b, 10*time.Second)
	before := sampleDrainers(b)
	apiBefore := apiserverCPU(b)
	waveStart := time.Now()
	w.labelAll(ctx)
	waveCtx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	end, err := rec.waitAllCompleted(waveCtx)
	if err != nil {
		b.Fatalf("the wave did not finish within %s (LULL_WAVE_TIMEOUT): %v; %s", bound, err, cluster.LogsHint())
	}
	after := sampleDrainers(b)
	apiWave := apiserverCPU(b) - apiBefore - idle*time.Since(waveStart).Seconds()
	violations := iv.violations()

	r := rec.result(w, end)
	fmt.Printf("fleet wave: %d kwok nodes, %d pods (%d per node), 4 windows, %s; setup %s\n",
		n, n*ppn, ppn, w.budgetsText(), setup.Round(time.Second))
	r.print()
	printDrainers(before, after)
	fmt.Printf("  budget invariant: %d violations (max disrupting at once: %s)\n", len(violations), w.maxSeen(iv))
	if len(violations) > 0 {
		b.Fatalf("invariant violations: %v", violations)
	}
	au := drainerAudit(b, waveStart, end)
	perNode := float64(au.total) / float64(n)
	fmt.Printf("  lull-drainer: %.1f API requests per drained node (audit log, every replica), kube-apiserver %.3f CPU s per drained node (idle rate %.2f cores subtracted)\n",
		perNode, apiWave/float64(n), idle)
	printPerNode(au, n)
	b.ReportMetric(perNode, "requests-per-node")
	b.ReportMetric(r.ratio(), "wave-ratio")
	b.ReportMetric(r.p50.Seconds(), "free-to-cordon-p50-s")
	b.ReportMetric(r.p99.Seconds(), "free-to-cordon-p99-s")
	b.ReportMetric(float64(after.leaderHWM())/(1<<20), "leader-peak-rss-MB")
	// The anchor an admin would script instead: the same nodes, each
	// window's quarter drained by kubectl drain and uncordoned at once,
	// as many at a time as the window's budget (xargs -P), the four
	// quarters side by side.
	if os.Getenv("LULL_WAVE_ANCHOR") == "0" {
		return // the wave alone (a 5,000-node anchor takes a quarter of an hour more)
	}
	k := w.kubectlScript(ctx, idle)
	kPerNode, kCPU := float64(k.requests)/float64(n), k.apiCPU/float64(n)
	fmt.Printf("  anchor, same run: %s\n", k.command)
	fmt.Printf("  anchor: %s for the %d nodes; %.1f API requests per drained node (its -v=6 logs), kube-apiserver %.3f CPU s per drained node; %d evictions\n",
		k.wall.Round(100*time.Millisecond), n, kPerNode, kCPU, k.evictions)
	fmt.Printf("  lull / anchor: wall %.2f (target <= 1.1), kube-apiserver CPU per node %.2f (target <= 1.0), requests per node %.2f (lull %.1f, target <= 12)\n",
		r.wall.Seconds()/k.wall.Seconds(), (apiWave/float64(n))/kCPU, perNode/kPerNode, perNode)
	b.ReportMetric(r.wall.Seconds()/k.wall.Seconds(), "wall-vs-script")
	b.ReportMetric((apiWave/float64(n))/kCPU, "apiserver-cpu-vs-script")
}

// wave is the benchmark's fleet: its nodes, by quarter, and the windows'
// resolved budgets.
type wave struct {
	b     *testing.B
	n     int
	nodes []string
	max   [4]int
	c     client.Client
}

func (w *wave) nodeName(i int) string { return fmt.Sprintf("wave-%05d", i) }

// quarter returns the nodes window q selects: every fourth node.
func (w *wave) quarter(q int) []string {
	var out []string
	for i := q; i < w.n; i += 4 {
		out = append(out, w.nodeName(i))
	}
	return out
}

func (w *wave) budgetsText() string {
	var parts []string
	for q, mw := range waveWindows {
		parts = append(parts, fmt.Sprintf("%s maxUnavailable %s = %d of %d", mw.name, mw.max.String(), w.max[q], len(w.quarter(q))))
	}
	return strings.Join(parts, ", ")
}

func (w *wave) maxSeen(iv *invariants) string {
	var parts []string
	for q, mw := range waveWindows {
		parts = append(parts, fmt.Sprintf("%s %d/%d", mw.name, iv.maxDisrupting(mw.name), w.max[q]))
	}
	return strings.Join(parts, ", ")
}

// parallel runs f for 0..n-1 on 16 workers and returns the first error.
func parallel(n int, f func(i int) error) error {
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	next := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// createNodes creates the kwok nodes (not type=kwok: the other scenarios
// never pick them) and waits until kwok reports them Ready.
func (w *wave) createNodes(ctx context.Context) {
	b, cs := w.b, cluster.Clientset
	var err error
	if w.c, err = client.New(cluster.Config, client.Options{Scheme: lullscheme.New()}); err != nil {
		b.Fatal(err)
	}
	for i := range w.n {
		w.nodes = append(w.nodes, w.nodeName(i))
	}
	err = parallel(w.n, func(i int) error {
		name := w.nodeName(i)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name,
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
				Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
					"kubernetes.io/arch": "amd64", waveLabel: fmt.Sprintf("q%d", i%4)}},
			Status: corev1.NodeStatus{
				Allocatable: corev1.ResourceList{"cpu": resource.MustParse("32"), "memory": resource.MustParse("256Gi"), "pods": resource.MustParse("110")},
				Capacity:    corev1.ResourceList{"cpu": resource.MustParse("32"), "memory": resource.MustParse("256Gi"), "pods": resource.MustParse("110")},
			},
		}
		_, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		b.Fatalf("creating %d nodes: %v", w.n, err)
	}
	ready := 0
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: waveLabel, ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		ready = 0
		for _, nd := range nodes.Items {
			for _, c := range nd.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == w.n, nil
	})
	if err != nil {
		b.Fatalf("%d of %d nodes Ready: %v", ready, w.n, err)
	}
}

// createPods binds ppn pods to every node, then a ReplicaSet adopts them,
// so evicted pods are recreated (and scheduled elsewhere) as on a real
// cluster.
func (w *wave) createPods(ctx context.Context, ppn int) {
	b, cs := w.b, cluster.Clientset
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: waveNS}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	labels := map[string]string{"app": "wave"}
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}}
	total := w.n * ppn
	err := parallel(total, func(i int) error {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("wave-%d", i), Namespace: waveNS, Labels: labels}, Spec: *spec.DeepCopy()}
		p.Spec.NodeName = w.nodeName(i % w.n)
		_, err := cs.CoreV1().Pods(waveNS).Create(ctx, p, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		b.Fatalf("creating %d pods: %v", total, err)
	}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "wave", Namespace: waveNS},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(int32(total)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec}},
	}
	if _, err := cs.AppsV1().ReplicaSets(waveNS).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	running, adopted := 0, 0
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(waveNS).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		running, adopted = 0, 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
			if metav1.GetControllerOf(&p) != nil {
				adopted++
			}
		}
		return running == total && adopted == total, nil
	})
	if err != nil {
		b.Fatalf("pods: %d running, %d adopted of %d: %v", running, adopted, total, err)
	}
}

// createWindows creates the four always-open windows and resolves their
// budgets as the drainer does.
func (w *wave) createWindows(ctx context.Context) {
	for q, spec := range waveWindows {
		mw := &lullv1alpha1.MaintenanceWindow{
			ObjectMeta: metav1.ObjectMeta{Name: spec.name},
			Spec: lullv1alpha1.MaintenanceWindowSpec{
				NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{waveLabel: fmt.Sprintf("q%d", q)}},
				Strategy:       lullv1alpha1.StrategyPermissive,
				MaxUnavailable: ptr.To(spec.max),
			},
		}
		if err := w.c.Create(ctx, mw); err != nil {
			w.b.Fatalf("creating window %s: %v", spec.name, err)
		}
		limit, err := budget.MaxUnavailable(mw, len(w.quarter(q)))
		if err != nil {
			w.b.Fatal(err)
		}
		w.max[q] = limit
	}
}

// labelAll requests maintenance on every node at once.
func (w *wave) labelAll(ctx context.Context) {
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:"kernel-update"}}}`, lullv1alpha1.MaintenanceLabel))
	err := parallel(w.n, func(i int) error {
		_, err := cluster.Clientset.CoreV1().Nodes().Patch(ctx, w.nodeName(i), types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		w.b.Fatalf("labelling the nodes: %v", err)
	}
}

// cleanup removes what the benchmark made: windows, requests (the drainer
// finalizes any still active), pods, nodes and any lease left behind, so
// the package's other tests find the cluster as before.
func (w *wave) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs := cluster.Clientset
	if w.c == nil {
		return
	}
	for _, mw := range waveWindows {
		_ = w.c.Delete(ctx, &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: mw.name}})
	}
	_ = parallel(len(w.nodes), func(i int) error {
		return client.IgnoreNotFound(w.c.Delete(ctx, &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: w.nodes[i]}}))
	})
	left := 0
	_ = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var list lullv1alpha1.NodeMaintenanceList
		if err := w.c.List(ctx, &list); err != nil {
			return false, nil
		}
		left = 0
		for _, nm := range list.Items {
			if strings.HasPrefix(nm.Name, "wave-") {
				left++
			}
		}
		return left == 0, nil
	})
	if left > 0 {
		w.b.Logf("cleanup: %d NodeMaintenances of the wave still there", left)
	}
	_ = cs.CoreV1().Namespaces().Delete(ctx, waveNS, metav1.DeleteOptions{})
	if err := cs.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: waveLabel}); err != nil {
		w.b.Logf("cleanup: deleting the wave's nodes: %v", err)
	}
	var leases coordinationv1.LeaseList
	if err := w.c.List(ctx, &leases, client.InNamespace(lease.DefaultNamespace)); err == nil {
		for _, l := range leases.Items {
			if strings.HasPrefix(l.Name, "node-wave-") {
				_ = w.c.Delete(ctx, &l)
			}
		}
	}
	_ = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Namespaces().Get(ctx, waveNS, metav1.GetOptions{})
		return err != nil, nil
	})
}

// waveRecorder notes, on the benchmark's clock, when each node was
// cordoned, when its request was Drained, when it stopped holding budget
// (left Drained: the operator completed it) and when it was Completed; and
// plays the operator.
type waveRecorder struct {
	mu        sync.Mutex
	start     time.Time
	cordoned  map[string]time.Time
	drained   map[string]time.Time
	freed     map[string]time.Time
	completed map[string]time.Time
	complete  chan string
	done      chan struct{}
	n         int
}

// watch starts watching the wave's nodes and requests, and the operator:
// every request seen Drained is completed by removing the node's label.
func (w *wave) watch(ctx context.Context) *waveRecorder {
	b := w.b
	rec := &waveRecorder{cordoned: map[string]time.Time{}, drained: map[string]time.Time{}, freed: map[string]time.Time{},
		completed: map[string]time.Time{}, complete: make(chan string, w.n), done: make(chan struct{}), n: w.n}
	sel := labels.SelectorFromSet(nil)
	if r, err := labels.Parse(waveLabel); err == nil {
		sel = r
	}
	c, err := cache.New(cluster.Config, cache.Options{Scheme: lullscheme.New(),
		ByObject: map[client.Object]cache.ByObject{&corev1.Node{}: {Label: sel}}})
	if err != nil {
		b.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	b.Cleanup(cancel)
	handlers := map[client.Object]toolscache.ResourceEventHandler{
		&corev1.Node{}: toolscache.ResourceEventHandlerFuncs{
			AddFunc: rec.node, UpdateFunc: func(_, o any) { rec.node(o) },
		},
		&lullv1alpha1.NodeMaintenance{}: toolscache.ResourceEventHandlerFuncs{
			AddFunc: rec.nm, UpdateFunc: func(_, o any) { rec.nm(o) },
		},
	}
	for obj, h := range handlers {
		inf, err := c.GetInformer(wctx, obj)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := inf.AddEventHandler(h); err != nil {
			b.Fatal(err)
		}
	}
	go func() { _ = c.Start(wctx) }()
	syncCtx, done := context.WithTimeout(wctx, 2*time.Minute)
	defer done()
	if !c.WaitForCacheSync(syncCtx) {
		b.Fatal("wave watchers did not sync")
	}
	unlabel := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, lullv1alpha1.MaintenanceLabel))
	for range 8 {
		go func() {
			for {
				select {
				case <-wctx.Done():
					return
				case node := <-rec.complete:
					// The operator's work is done: remove the label.
					_, err := cluster.Clientset.CoreV1().Nodes().Patch(wctx, node, types.MergePatchType, unlabel, metav1.PatchOptions{})
					if err != nil && wctx.Err() == nil {
						b.Logf("completing %s: %v", node, err)
					}
				}
			}
		}()
	}
	rec.mu.Lock()
	rec.start = time.Now()
	rec.mu.Unlock()
	return rec
}

func (r *waveRecorder) node(o any) {
	n, ok := o.(*corev1.Node)
	if !ok || !n.Spec.Unschedulable {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, seen := r.cordoned[n.Name]; !seen {
		r.cordoned[n.Name] = time.Now()
	}
}

func (r *waveRecorder) nm(o any) {
	nm, ok := o.(*lullv1alpha1.NodeMaintenance)
	if !ok || !strings.HasPrefix(nm.Name, "wave-") {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.start.IsZero() || nm.CreationTimestamp.Time.Before(r.start.Add(-time.Second)) {
		return // not this wave's request
	}
	p := nm.Status.Phase
	if _, ok := r.drained[nm.Name]; !ok && p == lullv1alpha1.PhaseDrained {
		r.drained[nm.Name] = now
		r.complete <- nm.Name // the buffer holds every node
	}
	_, drained := r.drained[nm.Name]
	if _, ok := r.freed[nm.Name]; !ok && drained && p != lullv1alpha1.PhaseDrained {
		r.freed[nm.Name] = now
	}
	if _, ok := r.completed[nm.Name]; !ok && p == lullv1alpha1.PhaseCompleted {
		r.completed[nm.Name] = now
		if len(r.completed) == r.n {
			close(r.done)
		}
	}
}

// waitAllCompleted waits until every request completed and returns when
// the last one did.
func (r *waveRecorder) waitAllCompleted(ctx context.Context) (time.Time, error) {
	select {
	case <-r.done:
	case <-ctx.Done():
		r.mu.Lock()
		defer r.mu.Unlock()
		return time.Time{}, fmt.Errorf("%d of %d requests completed, %d cordoned, %d drained", len(r.completed), r.n, len(r.cordoned), len(r.drained))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var last time.Time
	for _, t := range r.completed {
		if t.After(last) {
			last = t
		}
	}
	return last, nil
}

// waveResult is what the wave measured.
type waveResult struct {
	nodes         int
	wall          time.Duration // first label to last Completed
	ideal         time.Duration
	idealWindow   string
	drainP50      time.Duration
	drainP99      time.Duration
	latencies     []time.Duration // slot freed -> next cordon of the window
	p50, p99, max time.Duration
	// occupancy per window: the time its nodes held a slot (cordoned ->
	// freed) over its budget times the span from labelling to the last
	// free: 1.0 is every slot held all the time.
	occupancy map[string]float64
}

// result computes the figures. A slot freed in a window is matched with
// the window's next cordon (see below). The ideal wave is the longest
// window's summed drain time (cordon -> Drained) divided by its budget:
// every slot busy draining, with no time between one node and the next.
func (r *waveRecorder) result(w *wave, end time.Time) waveResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := waveResult{nodes: w.n, wall: end.Sub(r.start), occupancy: map[string]float64{}}
	var drains []time.Duration
	for q := range waveWindows {
		var frees, cordons []time.Time
		var sum, held time.Duration
		var lastFree time.Time
		for _, node := range w.quarter(q) {
			c, d := r.cordoned[node], r.drained[node]
			if !c.IsZero() && !d.IsZero() {
				drains = append(drains, d.Sub(c))
				sum += d.Sub(c)
			}
			if f, ok := r.freed[node]; ok && !c.IsZero() {
				held += f.Sub(c)
				if f.After(lastFree) {
					lastFree = f
				}
			}
			if !c.IsZero() {
				cordons = append(cordons, c)
			}
			if f, ok := r.freed[node]; ok {
				frees = append(frees, f)
			}
		}
		if span := lastFree.Sub(r.start); span > 0 {
			res.occupancy[waveWindows[q].name] = held.Seconds() / (float64(w.max[q]) * span.Seconds())
		}
		if ideal := sum / time.Duration(w.max[q]); ideal > res.ideal {
			res.ideal, res.idealWindow = ideal, waveWindows[q].name
		}
		slices.SortFunc(frees, time.Time.Compare)
		slices.SortFunc(cordons, time.Time.Compare)
		// Each freed slot is matched, in time order, with the window's
		// first cordon at or after it not matched yet: with the budget
		// full, the cordon that took the slot; below it, the next start
		// anyway. (Pairing the k-th free with the (maxUnavailable+k)-th
		// cordon assumed a full budget, and charged a window that never
		// filled with gaps nobody waited through.)
		next := 0
		for _, f := range frees {
			i, _ := slices.BinarySearchFunc(cordons, f, time.Time.Compare)
			i = max(i, next)
			if i >= len(cordons) {
				break
			}
			res.latencies = append(res.latencies, cordons[i].Sub(f))
			next = i + 1
		}
	}
	res.drainP50, res.drainP99 = percentile(drains, 0.5), percentile(drains, 0.99)
	res.p50, res.p99, res.max = percentile(res.latencies, 0.5), percentile(res.latencies, 0.99), percentile(res.latencies, 1)
	return res
}

func (r waveResult) ratio() float64 { return r.ideal.Seconds() / r.wall.Seconds() }

func (r waveResult) print() {
	fmt.Printf("  wave: %s from labelling every node to the last Completed; ideal %s (%s: summed drain time / budget); ratio ideal/actual %.2f (target >= 0.9)\n",
		r.wall.Round(100*time.Millisecond), r.ideal.Round(100*time.Millisecond), r.idealWindow, r.ratio())
	fmt.Printf("  per-node drain (cordoned -> Drained): p50 %s, p99 %s\n", r.drainP50.Round(10*time.Millisecond), r.drainP99.Round(10*time.Millisecond))
	fmt.Printf("  slot freed -> next cordon of the window: p50 %s, p99 %s, max %s over %d slots (target p99 <= 2s)\n",
		r.p50.Round(10*time.Millisecond), r.p99.Round(10*time.Millisecond), r.max.Round(10*time.Millisecond), len(r.latencies))
	var occ []string
	for _, mw := range waveWindows {
		occ = append(occ, fmt.Sprintf("%s %.2f", mw.name, r.occupancy[mw.name]))
	}
	fmt.Printf("  slot occupancy (time nodes held a slot, cordoned -> freed, over budget x span to the last free): %s\n", strings.Join(occ, ", "))
}

// percentile is the nearest-rank percentile p (0..1] of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// drainerSample is what each lull-drainer replica had spent at a moment.
type drainerSample struct {
	at       time.Time
	replicas []replicaSample
}

type replicaSample struct {
	name     string
	leading  bool
	cpu      float64 // user+system seconds
	hwm      int64   // peak RSS, bytes
	requests map[string]float64
}

func sampleDrainers(b *testing.B) drainerSample {
	s := drainerSample{at: time.Now()}
	for _, d := range drainerProcs() {
		p := &proc{name: d.name}
		pid := p.pid()
		cpu, err := procCPUSeconds(pid)
		if err != nil {
			b.Fatalf("%s: %v", d.name, err)
		}
		hwm, err := procHWM(pid)
		if err != nil {
			b.Fatalf("%s: %v", d.name, err)
		}
		req, err := requestsByVerb(d.metrics)
		if err != nil {
			b.Fatalf("%s: %v", d.name, err)
		}
		s.replicas = append(s.replicas, replicaSample{name: d.name, leading: d.leading(), cpu: cpu, hwm: hwm, requests: req})
	}
	return s
}

func (s drainerSample) leaderHWM() int64 {
	for _, r := range s.replicas {
		if r.leading {
			return r.hwm
		}
	}
	return 0
}

func printDrainers(before, after drainerSample) {
	secs := after.at.Sub(before.at).Seconds()
	for i, a := range after.replicas {
		bf := before.replicas[i]
		role := "standby"
		if a.leading {
			role = "leader"
		}
		if a.leading != bf.leading {
			role += " (leadership changed during the wave)"
		}
		var verbs []string
		total := 0.0
		for _, m := range slices.Sorted(func(yield func(string) bool) {
			for k := range a.requests {
				if !yield(k) {
					return
				}
			}
		}) {
			d := a.requests[m] - bf.requests[m]
			if d > 0 {
				total += d
				verbs = append(verbs, fmt.Sprintf("%s %.1f", m, d/secs))
			}
		}
		fmt.Printf("  %s (%s): CPU %.1f s over the %.0f s wave (%.0f%% of a core), peak RSS %.0f MB, API %.1f req/s (%s)\n",
			a.name, role, a.cpu-bf.cpu, secs, 100*(a.cpu-bf.cpu)/secs, float64(a.hwm)/(1<<20), total/secs, strings.Join(verbs, ", "))
	}
}

// procCPUSeconds reads a process's user+system CPU time from
// /proc/<pid>/stat (fields 14 and 15, in clock ticks of 1/100 s).
func procCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	// Fields after the command name, which may hold spaces: state is
	// field 3, so utime (14) and stime (15) are at 11 and 12 here.
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return (ut + st) / 100, nil
}

// procHWM reads a process's peak resident set (VmHWM) from
// /proc/<pid>/status.
func procHWM(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
}

var restMethod = regexp.MustCompile(`method="([A-Z]+)"`)

// requestsByVerb sums rest_client_requests_total by method from a
// replica's metrics endpoint.
func requestsByVerb(port int) (map[string]float64, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	by := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "rest_client_requests_total{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if m := restMethod.FindStringSubmatch(line); err == nil && m != nil {
			by[m[1]] += v
		}
	}
	return by, nil
}

func envInt(b *testing.B, key string, def int) int {
	v, err := strconv.Atoi(envOr(key, strconv.Itoa(def)))
	if err != nil || v < 1 {
		b.Fatalf("%s=%q: want a positive integer", key, os.Getenv(key))
	}
	return v
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// printPerNode prints the drainer's requests per drained node by verb and
// resource, largest first (those under 0.05 a node are summed as "other").
func printPerNode(au *drainAudit, n int) {
	keys := make([]string, 0, len(au.by))
	for k := range au.by {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if au.by[a] != au.by[b] {
			return au.by[b] - au.by[a]
		}
		return strings.Compare(a, b)
	})
	other := 0
	for _, k := range keys {
		if v := float64(au.by[k]) / float64(n); v >= 0.05 {
			fmt.Printf("    %5.2f  %s\n", v, k)
		} else {
			other += au.by[k]
		}
	}
	if other > 0 {
		fmt.Printf("    %5.2f  other\n", float64(other)/float64(n))
	}
}

// apiserverCPU is kube-apiserver's CPU seconds so far.
func apiserverCPU(b *testing.B) float64 {
	p := &proc{name: "kube-apiserver"}
	cpu, err := procCPUSeconds(p.pid())
	if err != nil {
		b.Fatalf("kube-apiserver: %v", err)
	}
	return cpu
}

// apiserverIdleRate measures kube-apiserver's CPU (cores) over d with the
// fleet idle (kwok's heartbeats, the controllers' resyncs), to subtract
// from the spans measured.
func apiserverIdleRate(b *testing.B, d time.Duration) float64 {
	c0, t0 := apiserverCPU(b), time.Now()
	time.Sleep(d)
	return (apiserverCPU(b) - c0) / time.Since(t0).Seconds()
}

type kubectlResult struct {
	command             string
	requests, evictions int
	apiCPU              float64
	wall                time.Duration
}

var evictionLine = regexp.MustCompile(`"Response" verb="POST" url=".*/eviction"`)

// kubectlScript drains every node of the fleet the way an admin would
// script it without lull: for each window's quarter, xargs runs
// "kubectl drain NODE && kubectl uncordon NODE" for as many nodes at once
// as the window's budget allows; the four quarters run side by side. It
// counts the API responses in kubectl's -v=6 logs and kube-apiserver's
// CPU meanwhile (idle rate subtracted), from the first command to the
// last uncordon.
func (w *wave) kubectlScript(ctx context.Context, idle float64) kubectlResult {
	b := w.b
	kubectl := filepath.Join(framework.BinDir(), "kubectl")
	home := b.TempDir() // kubectl's discovery cache, shared as an admin's would be
	one := fmt.Sprintf(`%s --kubeconfig %s drain "$0" --ignore-daemonsets --delete-emptydir-data --timeout=10m -v=6 && %s --kubeconfig %s uncordon "$0" -v=6`,
		kubectl, cluster.Kubeconfig, kubectl, cluster.Kubeconfig)
	type run struct {
		cmd *exec.Cmd
		out bytes.Buffer
	}
	runs := make([]*run, len(waveWindows))
	for q := range waveWindows {
		r := &run{}
		r.cmd = exec.CommandContext(ctx, "xargs", "-P", strconv.Itoa(w.max[q]), "-n", "1", "sh", "-c", one)
		r.cmd.Stdin = strings.NewReader(strings.Join(w.quarter(q), "\n") + "\n")
		r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
		r.cmd.Env = append(os.Environ(), "HOME="+home)
		runs[q] = r
	}
	c0, t0 := apiserverCPU(b), time.Now()
	for q, r := range runs {
		if err := r.cmd.Start(); err != nil {
			b.Fatalf("xargs for %s: %v", waveWindows[q].name, err)
		}
	}
	for q, r := range runs {
		if err := r.cmd.Wait(); err != nil {
			b.Fatalf("kubectl drain of %s's nodes (xargs -P %d): %v\n%s", waveWindows[q].name, w.max[q], err, tail(r.out.String()))
		}
	}
	wall := time.Since(t0)
	res := kubectlResult{wall: wall, apiCPU: apiserverCPU(b) - c0 - idle*wall.Seconds(),
		command: fmt.Sprintf("per window: printf nodes | xargs -P <maxUnavailable> -n 1 sh -c 'kubectl drain \"$0\" --ignore-daemonsets --delete-emptydir-data && kubectl uncordon \"$0\"' (-P %d, %d, %d, %d)", w.max[0], w.max[1], w.max[2], w.max[3])}
	for _, r := range runs {
		for _, line := range strings.Split(r.out.String(), "\n") {
			if requestLine.MatchString(line) {
				res.requests++
			}
			if evictionLine.MatchString(line) {
				res.evictions++
			}
		}
	}
	return res
}
