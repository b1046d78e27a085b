package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// faultEnv is a drain held in the middle while a fault is injected: node a
// has the pods of an app pinned to it (node label <key>=yes) behind a
// PodDisruptionBudget of maxUnavailable 1, so after the first eviction the
// drain waits for a replacement that has nowhere to go until unblock labels
// the spare node; node b of the same window (maxUnavailable 1) waits for the
// budget meanwhile.
type faultEnv struct {
	*sysEnv
	name     string
	a, b     string
	spare    string
	key      string
	iv       *invariants
	labelled time.Time
}

func newFaultEnv(t *testing.T, name string) *faultEnv {
	t.Helper()
	e := newSysEnv(t)
	f := &faultEnv{sysEnv: e, name: name, key: "e2e-" + name}
	nodes := e.pickNodes("e2e-"+name, 2)
	f.a, f.b = nodes[0], nodes[1]
	f.spare = e.pickNodes("e2e-"+name+"-spare", 1)[0]
	e.oneAtATimeWindow("e2e-" + name)
	e.patchNode(f.a, fmt.Sprintf(`{"metadata":{"labels":{%q:"yes"}}}`, f.key))
	t.Cleanup(func() {
		for _, n := range []string{f.a, f.spare} {
			e.patchNodeBg(n, fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, f.key))
		}
	})
	cluster.GuardedApp(t, f.key, 4, policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))},
		func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{f.key: "yes"} })
	waitAppRunning(t.Context(), t, f.key, 4)
	f.iv = e.watchInvariants(f.a, f.b, f.spare)
	f.iv.budget("e2e-"+name, 1, f.a, f.b)
	f.iv.restrict(f.spare) // no request: nothing may leave it
	return f
}

// midDrain requests maintenance of a, waits until the drain has evicted a
// pod and is held by the budget, then requests maintenance of b.
func (f *faultEnv) midDrain() {
	f.t.Helper()
	f.labelled = time.Now()
	f.patchNode(f.a, `{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`)
	require.NoError(f.t, wait.PollUntilContextTimeout(f.t.Context(), 100*time.Millisecond, 2*time.Minute, true,
		func(context.Context) (bool, error) { return f.iv.evictions(f.a) > 0, nil }),
		"no eviction from %s; %s", f.a, cluster.LogsHint())
	f.patchNode(f.b, `{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`)
	f.t.Logf("%s: drain of %s under way (%d evicted) after %v", f.name, f.a, f.iv.evictions(f.a), time.Since(f.labelled).Round(time.Millisecond))
}

// unblock lets the held drain go on: the pinned app's replacements may run
// on the spare node.
func (f *faultEnv) unblock() {
	f.t.Helper()
	f.patchNode(f.spare, fmt.Sprintf(`{"metadata":{"labels":{%q:"yes"}}}`, f.key))
}

// finish waits until both requests drained (one at a time), completes them
// and checks the invariants; it returns the violation count.
func (f *faultEnv) finish(timeout time.Duration) int {
	f.t.Helper()
	for _, n := range []string{f.a, f.b} {
		f.waitNM(n, "Drained", timeout, inPhase(lullv1alpha1.PhaseDrained))
		f.complete(n)
	}
	return f.iv.check()
}

// apiReady waits until the API server answers /readyz.
func apiReady(ctx context.Context, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := cluster.Clientset.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil, nil
	})
}

// kube-apiserver is killed (SIGKILL) in the middle of a drain and started
// again with the same flags; lull's processes that exit on losing leader
// election are restarted as a Deployment would. Everything finishes and the
// invariants hold.
func TestFaultAPIServerRestart(t *testing.T) {
	start := time.Now()
	f := newFaultEnv(t, "apiserver")
	api, err := snapshotProc("kube-apiserver")
	require.NoError(t, err)
	sup := superviseLull(t)
	f.midDrain()

	down := time.Now()
	require.NoError(t, api.kill(t.Context()))
	require.NoError(t, portFree(t.Context(), cluster.Config.Host, 30*time.Second), "kube-apiserver's port after the kill")
	require.NoError(t, api.start())
	require.NoError(t, apiReady(t.Context(), 2*time.Minute), "kube-apiserver not ready again; %s", cluster.LogsHint())
	outage := time.Since(down)
	t.Logf("kube-apiserver ready again %v after the kill", outage.Round(time.Millisecond))
	f.unblock()
	violations := f.finish(3 * time.Minute)
	summary("apiserver-restart", map[string]any{"outages": 1, "outage": outage, "violations": violations,
		"restarts": fmtRestarts(sup.restartCounts()), "after_outage": time.Since(down), "duration": time.Since(start)})
}

// etcd is stopped for 30 s in the middle of a drain with SIGSTOP and
// resumed with SIGCONT. A frozen etcd is the harder outage for the API
// server: connections stay open and requests hang until their timeouts, as
// with a stalled disk or a partition, where a stopped process would refuse
// them at once. Everything finishes and the invariants hold.
func TestFaultEtcdStopped(t *testing.T) {
	start := time.Now()
	f := newFaultEnv(t, "etcd")
	etcd := &proc{name: "etcd"}
	sup := superviseLull(t)
	f.midDrain()

	t.Cleanup(func() { _ = etcd.signal(syscall.SIGCONT) })
	require.NoError(t, etcd.signal(syscall.SIGSTOP))
	stopped := time.Now()
	select {
	case <-time.After(30 * time.Second): // the outage itself
	case <-t.Context().Done():
	}
	require.NoError(t, etcd.signal(syscall.SIGCONT))
	require.NoError(t, apiReady(t.Context(), 2*time.Minute), "kube-apiserver not ready after etcd resumed; %s", cluster.LogsHint())
	t.Logf("etcd stopped for %v; API server ready %v after SIGCONT", 30*time.Second, time.Since(stopped)-30*time.Second)
	f.unblock()
	violations := f.finish(3 * time.Minute)
	summary("etcd-stopped", map[string]any{"outages": 1, "outage": 30 * time.Second, "violations": violations,
		"restarts": fmtRestarts(sup.restartCounts()), "after_outage": time.Since(stopped) - 30*time.Second, "duration": time.Since(start)})
}

func fmtRestarts(m map[string]int) string {
	var parts []string
	for _, n := range append(append([]string(nil), lullProcs...), "lull-drainer-proxied") {
		if m[n] > 0 {
			parts = append(parts, fmt.Sprintf("%s:%d", n, m[n]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// tcpProxy passes TCP through to the API server until cut: then it closes
// every connection and refuses new ones until restore.
type tcpProxy struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	cut     bool
	conns   map[net.Conn]bool
	refused int
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { _ = ln.Close(); p.setCut(true) })
	go p.serve()
	return p
}

func (p *tcpProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.refused++
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		go pipe(up, c)
		go pipe(c, up)
	}
}

// setCut cuts (closing every open connection) or restores the path.
func (p *tcpProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			_ = c.Close()
		}
	}
}

// The leading lull-drainer is cut off from the API server in the middle of
// a drain (a TCP proxy between them closes every connection and refuses new
// ones); the other replica takes over and finishes the work; when the path
// comes back the cut-off replica stands down: the API server's audit log
// has no write from it after the reconnection.
func TestFaultLeaderPartitioned(t *testing.T) {
	start := time.Now()
	ctx := t.Context()
	f := newFaultEnv(t, "partition")
	u, err := url.Parse(cluster.Config.Host)
	require.NoError(t, err)
	proxy := newTCPProxy(t, u.Host)

	// The proxied replica: lull-drainer-2's command line and environment,
	// its own ports, identity and kubeconfig (the API server's certificate
	// names 127.0.0.1, so TLS passes through the proxy unchanged). A short
	// node lease lets the other replica take over the node soon after.
	r2, err := snapshotProc("lull-drainer-2")
	require.NoError(t, err)
	kc, err := os.ReadFile(filepath.Join(cluster.Dir, "lull-drainer.kubeconfig"))
	require.NoError(t, err)
	proxiedKC := filepath.Join(cluster.Dir, "lull-drainer-proxied.kubeconfig")
	require.NoError(t, os.WriteFile(proxiedKC, []byte(strings.ReplaceAll(string(kc), cluster.Config.Host, "https://"+proxy.ln.Addr().String())), 0o600))
	metrics := cluster.DrainerMetricsPort + 4 // +84/+85: free in hack/lib/cluster.sh's port plan
	proxied := &proc{name: "lull-drainer-proxied", env: []string{"KUBECONFIG=" + proxiedKC}}
	for _, a := range r2.args {
		switch {
		case strings.HasPrefix(a, "--metrics-bind-address="):
			a = fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metrics)
		case strings.HasPrefix(a, "--health-probe-bind-address="):
			a = fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", metrics+1)
		}
		proxied.args = append(proxied.args, a)
	}
	proxied.args = append(proxied.args, "--identity=lull-drainer/proxied", "--lease-duration=15s")
	for _, kv := range r2.env {
		if !strings.HasPrefix(kv, "KUBECONFIG=") {
			proxied.env = append(proxied.env, kv)
		}
	}

	// Two replicas for this scenario: lull-drainer and the proxied one,
	// which is made to lead (a replica stopped with SIGTERM hands over).
	sup := superviseLull(t)
	sup.remove("lull-drainer-2")
	require.NoError(t, r2.signal(syscall.SIGTERM))
	t.Cleanup(func() {
		sup.remove(proxied.name)
		_ = proxied.kill(context.Background())
		if !r2.alive() {
			_ = r2.start()
		}
	})
	sup.add(proxied)
	p := drainerProc{name: proxied.name, metrics: metrics}
	r1 := drainerProcs()[0]
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		if p.leading() {
			return true, nil
		}
		if r1.leading() {
			_ = (&proc{name: r1.name}).signal(syscall.SIGTERM) // hands over; the supervisor starts it again
		}
		return false, nil
	}), "the proxied replica never led; %s", cluster.LogsHint())

	f.midDrain()
	cutAt := time.Now()
	proxy.setCut(true)
	took, err := leader(ctx, 2*time.Minute, r1)
	require.NoError(t, err, "lull-drainer did not take over; %s", cluster.LogsHint())
	takeover := time.Since(cutAt)
	// Keep the path cut a little longer than a takeover needs, then let it
	// through again: the proxied replica (or its restarted process) meets a
	// leader that is not itself.
	select {
	case <-time.After(3 * time.Second):
	case <-ctx.Done():
	}
	proxy.setCut(false)
	reconnectAt := time.Now()
	t.Logf("cut at %s; %s leads %v later; reconnected at %s", cutAt.UTC().Format("15:04:05.000"), took, takeover.Round(time.Millisecond), reconnectAt.UTC().Format("15:04:05.000"))
	f.unblock()
	violations := f.finish(3 * time.Minute)
	// The replica is connected again for the whole finish: it had every
	// chance to write.
	restarts := sup.restartCounts()[proxied.name]

	before, during, after := auditWrites(t, "(lull-drainer/proxied)", cutAt, reconnectAt)
	t.Logf("proxied replica's writes: %d before the cut, %d while cut off, %d after reconnecting; its process was started again %d times; %d connections refused while cut",
		len(before), len(during), len(after), restarts, proxy.refused)
	plog, _ := os.ReadFile(filepath.Join(cluster.Dir, "logs", proxied.name+".log"))
	t.Logf("the proxied replica's log says %q %d times (controller-runtime ends the process when it loses leader election)",
		"leader election lost", strings.Count(string(plog), "leader election lost"))
	for _, a := range during {
		t.Logf("  received while cut (sent before the cut, in flight): %s", a)
	}
	for _, a := range before[max(0, len(before)-5):] {
		t.Logf("  last writes before the cut: %s", a)
	}
	require.Empty(t, after, "the cut-off replica wrote after reconnecting")
	require.False(t, p.leading(), "the cut-off replica leads again")
	require.True(t, proxied.alive(), "the cut-off replica does not stand by: its process is not running; %s", cluster.LogsHint())
	summary("leader-partitioned", map[string]any{"outages": 1, "takeover": takeover, "cut": reconnectAt.Sub(cutAt),
		"writes_before": len(before), "writes_cut": len(during), "writes_after": len(after), "proxied_restarts": restarts,
		"violations": violations, "duration": time.Since(start)})
}

// auditWrites reads the API server's audit log (hack/lib/cluster.sh
// write_audit_policy) and returns the writes whose user agent contains ua,
// split at two instants.
func auditWrites(t *testing.T, ua string, t1, t2 time.Time) (before, between, after []auditEvent) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cluster.Dir, "logs", "kube-apiserver-audit.log"))
	require.NoError(t, err)
	for _, line := range bytesLines(b) {
		var a auditEvent
		if json.Unmarshal(line, &a) != nil || !strings.Contains(a.UserAgent, ua) {
			continue
		}
		switch a.Verb {
		case "create", "update", "patch", "delete", "deletecollection":
		default:
			continue
		}
		switch at := a.RequestReceivedTimestamp; {
		case at.Before(t1):
			before = append(before, a)
		case at.Before(t2):
			between = append(between, a)
		default:
			after = append(after, a)
		}
	}
	return before, between, after
}

// portFree waits until the host:port of url can be bound again: a killed
// server's port can outlive the kill by a moment.
func portFree(ctx context.Context, rawURL string, timeout time.Duration) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ln, err := net.Listen("tcp", u.Host)
		if err != nil {
			last = err
			return false, nil
		}
		return true, ln.Close()
	})
	if err != nil {
		return fmt.Errorf("%s still in use after %s: %v", u.Host, timeout, last) //nolint:errorlint // last is nil when no listen failed (a Close did, or time ran out first): %w would print %!w(<nil>)
	}
	return nil
}
