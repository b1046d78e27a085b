// Package realnode runs lull the way users install it: as pods from
// manifests/install (through the local overlay) on the local cluster's real
// kubelet node, beside kwok-simulated nodes. It drains kwok nodes and the
// real node, whose containers really stop, upgrades the drainer in the
// middle of a drain, and uninstalls.
package realnode

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/test/e2e"
	"lull.dev/lull/test/framework"
)

const (
	realNode      = "real-node-0"
	realNodeTaint = "lull.dev/local-real-node"
	ns            = "default"
)

var (
	cluster *e2e.Cluster
	c       client.WithWatch
	version string
)

func TestMain(m *testing.M) {
	os.Exit(e2e.RealNodeMain(m, "realnode", 3, "LULL_E2E_REALNODE_PORT_BASE", "28000", nil, func(cl *e2e.Cluster, v string) (err error) {
		cluster, version = cl, v
		c, err = client.NewWithWatch(cl.Config, client.Options{Scheme: lullscheme.New()})
		return err
	}))
}

// tasks lists the real node's running containers as containerd sees them:
// container ID -> host PID.
func tasks(t *testing.T) map[string]int {
	t.Helper()
	out, err := exec.Command(filepath.Join(framework.BinDir(), "ctr"),
		"--address", filepath.Join(cluster.Dir, "node", "containerd", "containerd.sock"),
		"-n", "k8s.io", "tasks", "ls").CombinedOutput()
	require.NoError(t, err, string(out))
	got := map[string]int{}
	for _, line := range strings.Split(string(out), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 3 || f[2] != "RUNNING" {
			continue
		}
		pid, err := strconv.Atoi(f[1])
		require.NoError(t, err, line)
		got[f[0]] = pid
	}
	return got
}

func containerID(s corev1.ContainerStatus) string {
	_, id, _ := strings.Cut(s.ContainerID, "://")
	return id
}

func processAlive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

func poll(t *testing.T, what string, timeout time.Duration, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	last := ""
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, seen := cond(ctx)
		last = seen
		return ok, nil
	})
	require.NoError(t, err, "%s: not after %v; last seen: %s; %s", what, timeout, last, cluster.LogsHint())
}

func waitNM(t *testing.T, node string, phase lullv1alpha1.MaintenancePhase, timeout time.Duration) *lullv1alpha1.NodeMaintenance {
	t.Helper()
	var nm lullv1alpha1.NodeMaintenance
	poll(t, "NodeMaintenance "+node+" "+string(phase), timeout, func(ctx context.Context) (bool, string) {
		if err := c.Get(ctx, client.ObjectKey{Name: node}, &nm); err != nil {
			return false, err.Error()
		}
		return nm.Status.Phase == phase, fmt.Sprintf("%+v", nm.Status)
	})
	return &nm
}

func patchNode(t *testing.T, node, patch string) {
	t.Helper()
	// Not t.Context(): cleanups patch nodes back after it is cancelled.
	_, err := cluster.Clientset.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
}

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := cluster.Kubectl(t.Context(), 3*time.Minute, args...)
	require.NoError(t, err, "kubectl %s: %s", strings.Join(args, " "), out)
	return out
}

// app is an opted-in Deployment (lull-scheduler) with a PodDisruptionBudget,
// waited for until every pod is ready and the budget has seen them.
func app(t *testing.T, name string, replicas int32, minAvailable int32, mutate func(*corev1.PodSpec)) {
	t.Helper()
	cs := cluster.Clientset
	cluster.GuardedApp(t, name, replicas, policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(minAvailable))}, mutate)
	poll(t, name+" ready", 2*time.Minute, func(ctx context.Context) (bool, string) {
		pods := appPods(ctx, name)
		ready := 0
		for _, p := range pods {
			if podReady(&p) {
				ready++
			}
		}
		return ready == int(replicas) && len(pods) == int(replicas), fmt.Sprintf("%d of %d pods ready", ready, len(pods))
	})
	poll(t, name+" budget observed", time.Minute, func(ctx context.Context) (bool, string) {
		p, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.ObservedGeneration == p.Generation && p.Status.CurrentHealthy == replicas, fmt.Sprintf("%+v", p.Status)
	})
}

func appPods(ctx context.Context, name string) []corev1.Pod {
	pods, err := cluster.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		return nil
	}
	return pods.Items
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// healthyWatcher records the fewest ready, not terminating pods of an app
// ever seen at once: a PodDisruptionBudget is respected when that never
// falls below its minAvailable.
type healthyWatcher struct {
	mu       sync.Mutex
	min      int
	onNode   map[string]bool // pods ever bound to the watched node after start
	deletion map[string]time.Time
	node     string
	started  time.Time
}

func watchApp(t *testing.T, name, node string) *healthyWatcher {
	t.Helper()
	w, err := cluster.Clientset.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{LabelSelector: "app=" + name})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	h := &healthyWatcher{min: 1 << 30, onNode: map[string]bool{}, deletion: map[string]time.Time{}, node: node, started: time.Now()}
	state := map[types.UID]*corev1.Pod{}
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			h.mu.Lock()
			if ev.Type == watch.Deleted {
				delete(state, p.UID)
			} else {
				state[p.UID] = p
			}
			if p.DeletionTimestamp != nil {
				if _, seen := h.deletion[p.Name]; !seen {
					h.deletion[p.Name] = time.Now()
				}
			}
			if p.Spec.NodeName == node && p.CreationTimestamp.After(h.started) {
				h.onNode[p.Name] = true
			}
			n := 0
			for _, q := range state {
				if podReady(q) {
					n++
				}
			}
			if len(state) > 0 && n < h.min {
				h.min = n
			}
			h.mu.Unlock()
		}
	}()
	return h
}

// TestInstalledAsPods: lull-scheduler and lull-drainer run as pods from the
// shipped manifests on the real node, with the images built from this
// commit, probes passing, a leader elected each, and real processes behind
// every container.
func TestInstalledAsPods(t *testing.T) {
	ctx := t.Context()
	cs := cluster.Clientset
	if b, err := os.ReadFile(filepath.Join(cluster.Dir, "install", "seconds")); err == nil {
		t.Logf("install -> all Deployments Available: %ss", strings.TrimSpace(string(b)))
	}
	running := tasks(t)
	var podNames []string
	for _, name := range []string{"lull-scheduler", "lull-drainer"} {
		// Every replica available; a replica may be briefly unready on a
		// loaded machine (a restart after a missed leader-election renewal),
		// so wait a little, and say why if one restarted.
		var d *appsv1.Deployment
		poll(t, name+" all replicas available", 2*time.Minute, func(ctx context.Context) (bool, string) {
			var err error
			if d, err = cs.AppsV1().Deployments("lull-system").Get(ctx, name, metav1.GetOptions{}); err != nil {
				return false, err.Error()
			}
			return d.Status.AvailableReplicas == *d.Spec.Replicas, fmt.Sprintf("%d of %d available", d.Status.AvailableReplicas, *d.Spec.Replicas)
		})
		require.Equal(t, "lull.dev/"+name+":"+version, d.Spec.Template.Spec.Containers[0].Image)
		pods, err := cs.CoreV1().Pods("lull-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name})
		require.NoError(t, err)
		for _, p := range pods.Items {
			if st := p.Status.ContainerStatuses; len(st) > 0 && st[0].RestartCount > 0 {
				t.Logf("%s restarted %d time(s); last termination: %+v", p.Name, st[0].RestartCount, st[0].LastTerminationState.Terminated)
			}
		}
		require.Len(t, pods.Items, int(*d.Spec.Replicas))
		for _, p := range pods.Items {
			require.Equal(t, realNode, p.Spec.NodeName, "%s runs on the real node", p.Name)
			require.True(t, podReady(&p), "%s ready (its readiness probe passes)", p.Name)
			require.NotEmpty(t, p.Status.PodIP)
			st := p.Status.ContainerStatuses[0]
			require.Contains(t, st.ImageID, "sha256:")
			pid, ok := running[containerID(st)]
			require.True(t, ok, "%s: containerd runs its container %s", p.Name, st.ContainerID)
			cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			require.NoError(t, err)
			require.Contains(t, string(cmd), "/"+name, "%s's process", p.Name)
			t.Logf("%s: %s on %s, ip %s, host pid %d", p.Name, p.Spec.Containers[0].Image, p.Spec.NodeName, p.Status.PodIP, pid)
			podNames = append(podNames, p.Name)
		}
		// The leader's identity: lull-drainer/<pod>, as on node leases;
		// kube-scheduler's is its pod's host name and a UUID.
		poll(t, name+" leader elected", time.Minute, func(ctx context.Context) (bool, string) {
			l, err := cs.CoordinationV1().Leases("lull-system").Get(ctx, name, metav1.GetOptions{})
			if err != nil || l.Spec.HolderIdentity == nil {
				return false, fmt.Sprint(err)
			}
			for _, p := range podNames {
				if (name == "lull-drainer" && *l.Spec.HolderIdentity == "lull-drainer/"+p) ||
					(name != "lull-drainer" && strings.HasPrefix(*l.Spec.HolderIdentity, p)) {
					return true, ""
				}
			}
			return false, "holder " + *l.Spec.HolderIdentity
		})
	}
}

// TestServiceAccountRights asks the API server what each of lull's
// ServiceAccounts may do (kubectl auth can-i, as docs/install.md tells
// admins to) and compares it with what docs/install.md says it grants
// (framework.Rights, which test/install also asks of a bare install; the
// maintainers' roles are not bound here).
func TestServiceAccountRights(t *testing.T) {
	for _, r := range framework.Rights {
		if r.Account == framework.MaintainerAccount {
			continue
		}
		out, _ := cluster.Kubectl(t.Context(), time.Minute, r.CanI()...) // exit 1 means "no"
		if answer, got := framework.CanIAnswer(out); got != r.Want {
			t.Errorf("%s %s %s (namespace %q): can-i says %q, docs/install.md says %v", r.Account, r.Verb, r.Resource, r.Namespace, answer, r.Want)
		}
	}
}

// TestAgentOnRealNode: lull-agent runs as a DaemonSet pod from the install
// manifests on the real node, with its shipped ServiceAccount, RBAC and
// security context (root with only CAP_SYS_CHROOT, the host's / read-only:
// real-node-0 is this machine, so the local overlay takes the writable
// /etc and CAP_CHOWN, CAP_FOWNER of WriteFiles away),
// renews its heartbeat lease, and carries out a RestartService step through
// the local cluster's harmless command (hack/local-overlay: it prints the
// unit and the host's name; the image has no shell, so the step
// succeeding shows it ran chrooted into the host). Its writes pass the
// admission guard with its pod-bound token, and the step starts only under
// lull's lease (the fencing watcher).
func TestAgentOnRealNode(t *testing.T) {
	ctx := t.Context()
	cs := cluster.Clientset
	var ds *appsv1.DaemonSet
	poll(t, "lull-agent ready on the real node", 2*time.Minute, func(ctx context.Context) (bool, string) {
		var err error
		if ds, err = cs.AppsV1().DaemonSets("lull-system").Get(ctx, "lull-agent", metav1.GetOptions{}); err != nil {
			return false, err.Error()
		}
		return ds.Status.DesiredNumberScheduled == 1 && ds.Status.NumberReady == 1,
			fmt.Sprintf("%d of %d ready", ds.Status.NumberReady, ds.Status.DesiredNumberScheduled)
	})
	require.Equal(t, "lull.dev/lull-agent:"+version, ds.Spec.Template.Spec.Containers[0].Image)
	pods, err := cs.CoreV1().Pods("lull-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=lull-agent"})
	require.NoError(t, err)
	require.Len(t, pods.Items, 1, "one agent, on the real node only (the overlay keeps it off kwok nodes)")
	p := pods.Items[0]
	require.Equal(t, realNode, p.Spec.NodeName)
	require.Equal(t, "lull-agent", p.Spec.ServiceAccountName)
	sc := p.Spec.Containers[0].SecurityContext
	require.NotNil(t, sc)
	require.Equal(t, int64(0), ptr.Deref(sc.RunAsUser, -1))
	require.False(t, ptr.Deref(sc.Privileged, false), "not privileged")
	require.False(t, ptr.Deref(sc.AllowPrivilegeEscalation, true))
	require.True(t, ptr.Deref(sc.ReadOnlyRootFilesystem, false))
	require.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	require.Equal(t, []corev1.Capability{"SYS_CHROOT"}, sc.Capabilities.Add)
	require.True(t, p.Spec.HostPID, "the host's PID namespace: systemctl reaches systemd only from there")
	require.False(t, p.Spec.HostNetwork || p.Spec.HostIPC, "no host network or IPC namespace")
	pid, ok := tasks(t)[containerID(p.Status.ContainerStatuses[0])]
	require.True(t, ok, "containerd runs the agent's container")
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(status), "\n") {
		// CAP_SYS_CHROOT is bit 18: the agent's process has it and nothing else.
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			require.Equal(t, "0000000000040000", strings.TrimSpace(v), "the agent's effective capabilities")
		}
	}
	poll(t, "the agent's heartbeat lease", time.Minute, func(ctx context.Context) (bool, string) {
		l, err := cs.CoordinationV1().Leases("lull-system").Get(ctx, "lull-agent-"+realNode, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return ptr.Deref(l.Spec.HolderIdentity, "") == p.Name, "holder " + ptr.Deref(l.Spec.HolderIdentity, "")
	})

	pol := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "e2e-agent"}, Spec: lullv1alpha1.DisruptionPolicySpec{
		Priority: 100,
		Rules: []lullv1alpha1.DisruptionRule{{Name: "chrony", Class: "e2e-chrony-config",
			Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.StepRestartService, Unit: "chronyd"}}}},
	}}
	require.NoError(t, c.Create(ctx, pol))
	t.Cleanup(func() { _ = c.Delete(context.Background(), pol) })
	fencing := e2e.WatchStepFencing(t, cluster.Config, realNode)
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: realNode},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: realNode, Classes: []string{"e2e-chrony-config"}, Reason: "e2e: agent on the real node"}}
	require.NoError(t, c.Create(ctx, nm))
	done := waitNM(t, realNode, lullv1alpha1.PhaseCompleted, 2*time.Minute)
	require.Len(t, done.Status.Actions, 1)
	a := done.Status.Actions[0]
	require.Equal(t, lullv1alpha1.StepRestartService, a.Type)
	require.Equal(t, lullv1alpha1.ActionSucceeded, a.State, a.Message)
	host, err := os.ReadFile("/etc/hostname")
	require.NoError(t, err)
	require.Contains(t, a.Message, "unit=chronyd host="+strings.TrimSpace(string(host)), "the command ran in the host's root")
	n, err := cs.CoreV1().Nodes().Get(ctx, realNode, metav1.GetOptions{})
	require.NoError(t, err)
	require.False(t, n.Spec.Unschedulable, "a restart alone needs no cordon")
	_, err = cs.CoordinationV1().Leases("lull-leases").Get(ctx, "node-"+realNode, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the lease is released: %v", err)
	require.Equal(t, 1, fencing.Starts())
	require.Empty(t, fencing.Violations())
	require.NoError(t, c.Delete(ctx, done))
	poll(t, "the request deleted", time.Minute, func(ctx context.Context) (bool, string) {
		err := c.Get(ctx, client.ObjectKey{Name: realNode}, &lullv1alpha1.NodeMaintenance{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// TestDrainKwokNode is the core scenario with lull in pods: a labelled
// simulated node is drained, and opted-in pods never land on it afterwards.
func TestDrainKwokNode(t *testing.T) {
	node := "kwok-node-0"
	patchNode(t, node, `{"metadata":{"labels":{"pool":"e2e-core"}}}`)
	t.Cleanup(func() { patchNode(t, node, `{"metadata":{"labels":{"pool":null,"lull.dev/maintenance":null}}}`) })
	app(t, "core", 6, 1, func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"type": "kwok"} })
	h := watchApp(t, "core", node)
	patchNode(t, node, `{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`)
	nm := waitNM(t, node, lullv1alpha1.PhaseDrained, 2*time.Minute)
	t.Logf("drained: %+v", nm.Status.Pods)
	// More opted-in pods: none of them may land on the drained node.
	_, err := cluster.Clientset.AppsV1().Deployments(ns).Patch(t.Context(), "core", types.MergePatchType, []byte(`{"spec":{"replicas":12}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	poll(t, "12 core pods ready", 2*time.Minute, func(ctx context.Context) (bool, string) {
		n := 0
		for _, p := range appPods(ctx, "core") {
			if podReady(&p) {
				n++
			}
		}
		return n == 12, fmt.Sprint(n)
	})
	h.mu.Lock()
	require.Empty(t, h.onNode, "opted-in pods placed on the node under maintenance")
	require.GreaterOrEqual(t, h.min, 1, "PodDisruptionBudget minAvailable 1 violated")
	h.mu.Unlock()
	patchNode(t, node, `{"metadata":{"labels":{"lull.dev/maintenance":null}}}`)
	waitNM(t, node, lullv1alpha1.PhaseCompleted, time.Minute)
	n, err := cluster.Clientset.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	require.NoError(t, err)
	require.False(t, n.Spec.Unschedulable, "lull uncordons what it cordoned")
}

// TestDrainRealNode drains the real node: its containers' processes stop
// after their grace period, the PodDisruptionBudget holds throughout, and
// the opted-in replacements land on another node.
func TestDrainRealNode(t *testing.T) {
	ctx := t.Context()
	cs := cluster.Clientset
	const delay = 3 * time.Second
	patchNode(t, realNode, `{"metadata":{"labels":{"lull.dev/e2e-target":"yes"}}}`)
	t.Cleanup(func() { patchNode(t, realNode, `{"metadata":{"labels":{"lull.dev/e2e-target":null}}}`) })
	app(t, "graceful", 2, 1, func(s *corev1.PodSpec) {
		s.Containers[0].Image = "lull.dev/e2e-graceful:" + version
		s.Containers[0].ImagePullPolicy = corev1.PullNever
		s.Containers[0].Env = []corev1.EnvVar{{Name: "GRACEFUL_DELAY", Value: delay.String()}}
		s.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1}
		s.TerminationGracePeriodSeconds = ptr.To[int64](20)
		s.Tolerations = []corev1.Toleration{{Key: realNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		s.NodeSelector = map[string]string{"lull.dev/e2e-target": "yes"}
	})
	pids := map[string]int{}
	running := tasks(t)
	for _, p := range appPods(ctx, "graceful") {
		require.Equal(t, realNode, p.Spec.NodeName)
		pid, ok := running[containerID(p.Status.ContainerStatuses[0])]
		require.True(t, ok, "%s has a running container", p.Name)
		pids[p.Name] = pid
	}
	// Somewhere for the replacements to go: a simulated node.
	other := "kwok-node-1"
	patchNode(t, other, `{"metadata":{"labels":{"lull.dev/e2e-target":"yes"}}}`)
	t.Cleanup(func() { patchNode(t, other, `{"metadata":{"labels":{"lull.dev/e2e-target":null}}}`) })

	h := watchApp(t, "graceful", realNode)
	gone := map[string]time.Time{}
	var goneMu sync.Mutex
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			goneMu.Lock()
			for name, pid := range pids {
				if _, done := gone[name]; !done && !processAlive(pid) {
					gone[name] = time.Now()
				}
			}
			goneMu.Unlock()
		}
	}()
	defer close(stop)

	start := time.Now()
	nm := &lullv1alpha1.NodeMaintenance{
		ObjectMeta: metav1.ObjectMeta{Name: realNode},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: realNode, Classes: []string{"kernel-update"}, Reason: "e2e: drain the real node",
			// lull itself runs on this node: evict the workload only.
			Drain: &lullv1alpha1.DrainOptions{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "graceful"}}}},
	}
	require.NoError(t, c.Create(ctx, nm))
	t.Cleanup(func() { _ = c.Delete(context.Background(), nm) })
	drained := waitNM(t, realNode, lullv1alpha1.PhaseDrained, 3*time.Minute)
	t.Logf("real node drained in %v: %+v", time.Since(start).Round(10*time.Millisecond), drained.Status.Pods)

	poll(t, "the evicted containers' processes gone", 30*time.Second, func(context.Context) (bool, string) {
		goneMu.Lock()
		defer goneMu.Unlock()
		return len(gone) == len(pids), fmt.Sprintf("%d of %d gone", len(gone), len(pids))
	})
	h.mu.Lock()
	for name := range pids {
		del, ok := h.deletion[name]
		require.True(t, ok, "%s was evicted", name)
		took := gone[name].Sub(del)
		t.Logf("%s: process %d stopped %v after its eviction (GRACEFUL_DELAY %v)", name, pids[name], took.Round(10*time.Millisecond), delay)
		require.GreaterOrEqual(t, took, delay-500*time.Millisecond, "%s stopped before its grace period's work was done", name)
		require.Less(t, took, 20*time.Second, "%s outlived its grace period", name)
	}
	require.GreaterOrEqual(t, h.min, 1, "PodDisruptionBudget minAvailable 1 violated")
	require.Empty(t, h.onNode, "a replacement landed on the drained real node")
	h.mu.Unlock()
	for _, p := range appPods(ctx, "graceful") {
		require.Equal(t, other, p.Spec.NodeName, "replacement %s", p.Name)
	}
	// lull's own pods were not touched.
	for _, name := range []string{"lull-scheduler", "lull-drainer"} {
		d, err := cs.AppsV1().Deployments("lull-system").Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, *d.Spec.Replicas, d.Status.AvailableReplicas, name)
	}
	// A merge patch of the spec: the drainer may write the status meanwhile.
	require.NoError(t, c.Patch(ctx, &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: realNode}},
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"complete":true}}`))))
	waitNM(t, realNode, lullv1alpha1.PhaseCompleted, time.Minute)
	n, err := cs.CoreV1().Nodes().Get(ctx, realNode, metav1.GetOptions{})
	require.NoError(t, err)
	require.False(t, n.Spec.Unschedulable, "the real node is uncordoned")
}

// TestUpgradeDrainerDuringDrain rolls lull-drainer to a new image while a
// drain is blocked by a PodDisruptionBudget: the node stays cordoned and
// leased to lull throughout, the budget is never exceeded, and the drain
// finishes under the new pods once the budget allows it.
func TestUpgradeDrainerDuringDrain(t *testing.T) {
	ctx := t.Context()
	cs := cluster.Clientset
	node := "kwok-node-2"
	patchNode(t, node, `{"metadata":{"labels":{"pool":"e2e-upgrade"}}}`)
	t.Cleanup(func() { patchNode(t, node, `{"metadata":{"labels":{"pool":null,"lull.dev/maintenance":null}}}`) })
	app(t, "upgrade", 2, 2, func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"pool": "e2e-upgrade"} })
	patchNode(t, node, `{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`)
	poll(t, "the drain blocked by the budget", time.Minute, func(ctx context.Context) (bool, string) {
		var nm lullv1alpha1.NodeMaintenance
		if err := c.Get(ctx, client.ObjectKey{Name: node}, &nm); err != nil {
			return false, err.Error()
		}
		return nm.Status.Phase == lullv1alpha1.PhaseDraining && len(nm.Status.Blockers) > 0, fmt.Sprintf("%+v", nm.Status)
	})

	// Invariants while the drainer is replaced, every 100 ms until the
	// upgrade is over: cordoned, leased by lull, nothing evicted past the
	// budget.
	stop := watchInvariants(ctx, func(ctx context.Context, violated func(string)) {
		if n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil && !n.Spec.Unschedulable {
			violated("node uncordoned during the upgrade")
		}
		l, err := cs.CoordinationV1().Leases("lull-leases").Get(ctx, "node-"+node, metav1.GetOptions{})
		if ctx.Err() == nil && (err != nil || l.Spec.HolderIdentity == nil || !strings.HasPrefix(*l.Spec.HolderIdentity, "lull-drainer")) {
			violated(fmt.Sprintf("node lease not held by lull: %v %+v", err, l))
		}
		ready := 0
		for _, p := range appPods(ctx, "upgrade") {
			if podReady(&p) {
				ready++
			}
		}
		if ctx.Err() == nil && ready < 2 {
			violated(fmt.Sprintf("only %d of 2 pods ready: PodDisruptionBudget violated", ready))
		}
	})

	next := version + "-next"
	out, err := exec.Command(filepath.Join(framework.BinDir(), "ctr"),
		"--address", filepath.Join(cluster.Dir, "node", "containerd", "containerd.sock"), "-n", "k8s.io",
		"images", "tag", "--force", "lull.dev/lull-drainer:"+version, "lull.dev/lull-drainer:"+next).CombinedOutput()
	require.NoError(t, err, string(out))
	kubectl(t, "-n", "lull-system", "set", "image", "deployment/lull-drainer", "lull-drainer=lull.dev/lull-drainer:"+next)
	rolled := time.Now()
	kubectl(t, "-n", "lull-system", "rollout", "status", "deployment/lull-drainer", "--timeout=3m")
	t.Logf("drainer rolled to %s in %v", next, time.Since(rolled).Round(10*time.Millisecond))
	poll(t, "a new drainer leads", time.Minute, func(ctx context.Context) (bool, string) {
		var nm lullv1alpha1.NodeMaintenance
		if err := c.Get(ctx, client.ObjectKey{Name: node}, &nm); err != nil {
			return false, err.Error()
		}
		// The new leader reconciles the blocked drain and refreshes its blockers.
		return drainerLeads(ctx, "lull.dev/lull-drainer:"+next)
	})
	for _, v := range stop() {
		t.Error(v)
	}

	// Let the pods move and the budget allow it: the new drainer finishes.
	_, err = cs.AppsV1().Deployments(ns).Patch(ctx, "upgrade", types.JSONPatchType,
		[]byte(`[{"op":"replace","path":"/spec/template/spec/nodeSelector","value":{"type":"kwok"}}]`), metav1.PatchOptions{})
	require.NoError(t, err)
	_, err = cs.PolicyV1().PodDisruptionBudgets(ns).Patch(ctx, "upgrade", types.MergePatchType, []byte(`{"spec":{"minAvailable":1}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	waitNM(t, node, lullv1alpha1.PhaseDrained, 2*time.Minute)
	patchNode(t, node, `{"metadata":{"labels":{"lull.dev/maintenance":null}}}`)
	waitNM(t, node, lullv1alpha1.PhaseCompleted, time.Minute)
}

// TestMetricsEndpoints scrapes lull-drainer's metrics (HTTPS on :8443) and
// lull-scheduler's (:10259) on every pod's IP, reached from the host through
// the node's bridge, as Prometheus would: only a caller whose token the API
// server authenticates and whose user may get /metrics (the ClusterRole
// lull-metrics-reader) is served.
func TestMetricsEndpoints(t *testing.T) {
	ctx := t.Context()
	cs := cluster.Clientset
	const nobody, scraper = "e2e-metrics-nobody", "e2e-metrics-scraper"
	for _, sa := range []string{nobody, scraper} {
		_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = cs.CoreV1().ServiceAccounts(ns).Delete(context.Background(), sa, metav1.DeleteOptions{}) })
	}
	// Not named lull-*: TestUninstall requires no such binding left.
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: scraper},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "lull-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: scraper, Namespace: ns}},
	}
	_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), scraper, metav1.DeleteOptions{})
	})
	token := func(sa string) string {
		out := kubectl(t, "-n", ns, "create", "token", sa, "--duration=10m")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		return strings.TrimSpace(lines[len(lines)-1])
	}
	nobodyToken, scraperToken := token(nobody), token(scraper)

	// Both endpoints serve self-signed certificates (docs/install.md):
	// Prometheus is configured with insecure_skip_verify as well.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(ctx context.Context, url, token string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, "", err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	for _, tc := range []struct {
		component, port, metric string
		anonymous               int // the status of a request without a token
	}{
		// lull's filter (internal/serving.Reviews) turns anonymous requests away.
		{"lull-drainer", "8443", "lull_lease_renew_failures_total", http.StatusUnauthorized},
		// kube-scheduler's delegated authentication lets them in as
		// system:anonymous, whom authorization then refuses. Its own
		// metrics have values only on the leader; the build info is
		// everywhere.
		{"lull-scheduler", "10259", "kubernetes_build_info", http.StatusForbidden},
	} {
		pods, err := cs.CoreV1().Pods("lull-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + tc.component})
		require.NoError(t, err)
		require.NotEmpty(t, pods.Items)
		for _, p := range pods.Items {
			if !podReady(&p) {
				continue
			}
			url := "https://" + p.Status.PodIP + ":" + tc.port + "/metrics"
			code, body, err := get(ctx, url, "")
			require.NoError(t, err, url)
			require.Equal(t, tc.anonymous, code, "%s without a token: %s", url, body)
			code, body, err = get(ctx, url, nobodyToken)
			require.NoError(t, err, url)
			require.Equal(t, http.StatusForbidden, code, "%s as %s (no rights): %s", url, nobody, body)
			// The binding may take a moment to reach the authorizer.
			poll(t, url+" as "+scraper, time.Minute, func(ctx context.Context) (bool, string) {
				code, body, err := get(ctx, url, scraperToken)
				if err != nil {
					return false, err.Error()
				}
				return code == http.StatusOK, fmt.Sprintf("%d %.200s", code, body)
			})
			_, body, err = get(ctx, url, scraperToken)
			require.NoError(t, err)
			require.True(t, strings.Contains(body, "\n"+tc.metric), "%s serves no %s", url, tc.metric)
			// No plain HTTP on the metrics port.
			resp, err := http.Get("http://" + p.Status.PodIP + ":" + tc.port + "/metrics")
			if err == nil {
				_ = resp.Body.Close()
				require.NotEqual(t, http.StatusOK, resp.StatusCode, "plain HTTP served on %s", url)
			}
			t.Logf("%s %s: anonymous %d, %s 403, %s 200 (%d bytes)", tc.component, url, tc.anonymous, nobody, scraper, len(body))
		}
	}
}

// TestDrainerDisruptionBudget: lull-drainer's PodDisruptionBudget lets the
// eviction API take one replica, refuses the other until the first one's
// replacement is ready, then allows one again.
func TestDrainerDisruptionBudget(t *testing.T) {
	ctx := t.Context()
	cs := cluster.Clientset
	const sys = "lull-system"
	pdb, err := cs.PolicyV1().PodDisruptionBudgets(sys).Get(ctx, "lull-drainer", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, intstr.FromInt32(1), *pdb.Spec.MaxUnavailable)
	poll(t, "the budget allows one disruption", time.Minute, func(ctx context.Context) (bool, string) {
		p, err := cs.PolicyV1().PodDisruptionBudgets(sys).Get(ctx, "lull-drainer", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.ObservedGeneration == p.Generation && p.Status.CurrentHealthy == 2 && p.Status.DisruptionsAllowed == 1, fmt.Sprintf("%+v", p.Status)
	})
	// The replicas that are not on their way out: a pod of the previous
	// rollout (TestUpgradeDrainerDuringDrain) may still be terminating.
	drainers := func(ctx context.Context) []corev1.Pod {
		pods, err := cs.CoreV1().Pods(sys).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=lull-drainer"})
		if err != nil {
			return nil
		}
		var live []corev1.Pod
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				live = append(live, p)
			}
		}
		return live
	}
	before := drainers(ctx)
	require.Len(t, before, 2)
	evict := func(ctx context.Context, name string, dryRun bool) error {
		e := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: sys}}
		if dryRun {
			e.DeleteOptions = &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
		}
		return cs.CoreV1().Pods(sys).EvictV1(ctx, e)
	}
	first, second := before[0].Name, before[1].Name
	require.NoError(t, evict(ctx, first, false), "evicting %s", first)
	err = evict(ctx, second, false)
	require.True(t, apierrors.IsTooManyRequests(err), "evicting %s while %s is gone: want 429 from the budget, got %v", second, first, err)
	t.Logf("evicted %s; %s refused: %v", first, second, err)

	// Refused as long as the replacement is not ready; allowed once it is.
	start := time.Now()
	refusals := 0
	poll(t, "the budget allows evicting "+second+" again", 3*time.Minute, func(ctx context.Context) (bool, string) {
		err := evict(ctx, second, true)
		ready := 0
		for _, p := range drainers(ctx) {
			if p.Name != first && p.Name != second && podReady(&p) {
				ready++
			}
		}
		switch {
		case apierrors.IsTooManyRequests(err):
			refusals++
			return false, fmt.Sprintf("refused (%d replacement ready): %v", ready, err)
		case err != nil:
			return false, err.Error()
		}
		require.Equal(t, 1, ready, "the budget allowed evicting %s before %s's replacement was ready", second, first)
		return true, ""
	})
	t.Logf("refused %d times, allowed again %v after the first eviction", refusals, time.Since(start).Round(100*time.Millisecond))
	require.NoError(t, evict(ctx, second, false), "evicting %s once the replacement is ready", second)
	kubectl(t, "-n", sys, "rollout", "status", "deployment/lull-drainer", "--timeout=3m")
	poll(t, "two drainers ready", 2*time.Minute, func(ctx context.Context) (bool, string) {
		ready := 0
		for _, p := range drainers(ctx) {
			if podReady(&p) {
				ready++
			}
		}
		return ready == 2, fmt.Sprint(ready)
	})
}

// TestUninstall removes lull as docs/install.md says, with a request in
// the middle of a drain (held by a PodDisruptionBudget): kubectl lull
// uninstall previews, then lull-drainer ends it (its cordon undone, its
// lease released, the label kept), then the install is deleted, and
// nothing is left behind.
func TestUninstall(t *testing.T) {
	ctx := t.Context()
	cs := cluster.Clientset
	node := "kwok-node-1"
	app(t, "stuck", 1, 1, func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"kubernetes.io/hostname": node} })
	patchNode(t, node, `{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`)
	t.Cleanup(func() { patchNode(t, node, `{"metadata":{"labels":{"lull.dev/maintenance":null}}}`) })
	poll(t, node+" draining, blocked by its budget", 2*time.Minute, func(ctx context.Context) (bool, string) {
		var nm lullv1alpha1.NodeMaintenance
		if err := c.Get(ctx, client.ObjectKey{Name: node}, &nm); err != nil {
			return false, err.Error()
		}
		return nm.Status.Phase == lullv1alpha1.PhaseDraining && len(nm.Status.Blockers) > 0, string(nm.Status.Phase)
	})
	lull := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, filepath.Join(framework.BinDir(), "kubectl-lull"), append(args, "--kubeconfig", cluster.Kubeconfig)...).CombinedOutput()
		require.NoError(t, err, "kubectl lull %s: %s", strings.Join(args, " "), out)
		return string(out)
	}
	preview := lull("uninstall")
	require.Contains(t, preview, "uncordon (lull's cordon); release the node's lease; keep the label lull.dev/maintenance=kernel-update")
	require.Contains(t, preview, "This is a preview; nothing was changed.")
	out := lull("uninstall", "--yes", "--timeout=2m")
	require.Contains(t, out, "Every request has ended (1). Now delete the install:")
	var nm lullv1alpha1.NodeMaintenance
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: node}, &nm))
	require.Equal(t, lullv1alpha1.PhaseFailed, nm.Status.Phase)
	require.Equal(t, "Uninstalled", meta.FindStatusCondition(nm.Status.Conditions, "Cordoned").Reason)
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	require.NoError(t, err)
	require.False(t, n.Spec.Unschedulable, "lull's cordon undone")
	require.Equal(t, "kernel-update", n.Labels["lull.dev/maintenance"], "the label stays as its user set it")
	_, err = cs.CoordinationV1().Leases("lull-leases").Get(ctx, "node-"+node, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the node's lease released: %v", err)
	require.Len(t, appPods(ctx, "stuck"), 1, "the budget held: its pod was not evicted")

	kubectl(t, "delete", "--ignore-not-found", "--wait=true", "--timeout=3m", "-f", filepath.Join(cluster.Dir, "install", "rendered.yaml"))
	for _, ns := range []string{"lull-system", "lull-leases", "lull-configs"} {
		_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "namespace %s still there: %v", ns, err)
	}
	crds := kubectl(t, "get", "crd", "-o", "name")
	require.NotContains(t, crds, "lull.dev")
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, n := range nodes.Items {
		require.False(t, n.Spec.Unschedulable, "%s left cordoned", n.Name)
	}
	leases, err := cs.CoordinationV1().Leases(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, l := range leases.Items {
		require.False(t, strings.HasPrefix(l.Name, "lull-") || l.Namespace == "lull-system" || l.Namespace == "lull-leases", "lease %s/%s left", l.Namespace, l.Name)
	}
	rbac := kubectl(t, "get", "clusterroles,clusterrolebindings", "-o", "name")
	require.NotContains(t, rbac, "lull-")
	poll(t, "lull's containers gone from the real node", time.Minute, func(context.Context) (bool, string) {
		for _, pid := range tasks(t) {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if strings.Contains(string(cmd), "/lull-") {
				return false, string(cmd)
			}
		}
		return true, ""
	})
}

// TestHelmInstall installs lull a second time, now from the packaged Helm
// chart (the release artifact) with the local cluster's values, drains a
// simulated node with it, and uninstalls it with helm uninstall while the
// node is still held drained.
func TestHelmInstall(t *testing.T) {
	ctx := t.Context()
	cs := cluster.Clientset
	helm := func(args ...string) string { return helmRun(t, args...) }
	chart := packageChart(t, filepath.Join(framework.RepoRoot(), "charts", "lull"), version)
	start := time.Now()
	set := helmLocalValues()
	helm(append([]string{"install", "lull", chart, "--namespace", "default", "--wait", "--timeout", "3m"}, set...)...)
	t.Logf("helm install -> all Deployments Available: %v", time.Since(start).Round(100*time.Millisecond))
	for _, name := range []string{"lull-scheduler", "lull-drainer"} {
		d, err := cs.AppsV1().Deployments("lull-system").Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, *d.Spec.Replicas, d.Status.AvailableReplicas, name)
		require.Equal(t, "lull.dev/"+name+":"+version, d.Spec.Template.Spec.Containers[0].Image)
	}

	node := "kwok-node-0"
	patchNode(t, node, `{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`)
	t.Cleanup(func() { patchNode(t, node, `{"metadata":{"labels":{"lull.dev/maintenance":null}}}`) })
	waitNM(t, node, lullv1alpha1.PhaseDrained, 2*time.Minute)

	// Uninstalled with the request Drained: the chart's pre-delete hook has
	// lull-drainer end it before Helm deletes its rights.
	helm("uninstall", "lull", "--namespace", "default", "--wait", "--timeout", "3m")
	var nm lullv1alpha1.NodeMaintenance
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: node}, &nm))
	require.Equal(t, lullv1alpha1.PhaseFailed, nm.Status.Phase)
	require.Equal(t, "Uninstalled", meta.FindStatusCondition(nm.Status.Conditions, "Cordoned").Reason)
	require.Empty(t, nm.Finalizers, "nothing left for lull-drainer to give back")
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	require.NoError(t, err)
	require.False(t, n.Spec.Unschedulable, "lull's cordon undone")
	require.Equal(t, "kernel-update", n.Labels["lull.dev/maintenance"], "the label stays as its user set it")
	// Helm leaves CRDs; docs/install.md deletes them by name.
	kubectl(t, "delete", "crd", "nodemaintenances.lull.dev", "maintenancewindows.lull.dev", "disruptionpolicies.lull.dev", "nodeconfigs.lull.dev", "--wait=true", "--timeout=2m")
	poll(t, "namespace lull-system gone", 2*time.Minute, func(ctx context.Context) (bool, string) {
		_, err := cs.CoreV1().Namespaces().Get(ctx, "lull-system", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	n, err = cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	require.NoError(t, err)
	require.False(t, n.Spec.Unschedulable)
}

// helmRun runs helm on the cluster; a failure fails the test.
func helmRun(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), filepath.Join(framework.BinDir(), "helm"), append(args, "--kubeconfig", cluster.Kubeconfig)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "helm %s: %s", strings.Join(args, " "), out)
	return string(out)
}

// packageChart packages the chart in dir with appVersion app (its images'
// tag), as a release does, and returns the package.
func packageChart(t *testing.T, dir, app string) string {
	t.Helper()
	dest := t.TempDir()
	out, err := exec.Command(filepath.Join(framework.BinDir(), "helm"), "package", dir, "--app-version", app, "--destination", dest).CombinedOutput()
	require.NoError(t, err, string(out))
	chart, err := filepath.Glob(filepath.Join(dest, "lull-*.tgz"))
	require.NoError(t, err)
	require.Len(t, chart, 1)
	return chart[0]
}

// helmLocalValues are hack/local-overlay's changes as the chart's values:
// images imported (never pulled), lull on the real node, and an agent that
// reloads, restarts, reboots, powers off and writes nothing on this
// machine.
func helmLocalValues() []string {
	var set []string
	for _, c := range []string{"scheduler", "drainer", "agent"} {
		set = append(set, "--set", c+".image.pullPolicy=Never",
			"--set", c+".nodeSelector.kubernetes\\.io/hostname="+realNode,
			"--set", c+".tolerations[0].key="+realNodeTaint, "--set", c+".tolerations[0].operator=Exists",
			"--set", c+".tolerations[0].effect=NoSchedule")
	}
	return append(set, "--set", "agent.commands.restart=echo restarted $LULL_UNIT", "--set", "agent.commands.reload=", "--set", "agent.commands.daemonReload=",
		"--set", "agent.commands.reboot=", "--set", "agent.commands.powerOff=", "--set", "agent.writeFiles=false")
}

// watchInvariants runs check every 100 ms until the returned stop is
// called; check reports each violation it sees with violated. stop waits
// for the last check and returns what was reported (at most 20).
func watchInvariants(ctx context.Context, check func(ctx context.Context, violated func(string))) (stop func() []string) {
	var (
		mu         sync.Mutex
		violations []string
	)
	violated := func(v string) {
		mu.Lock()
		defer mu.Unlock()
		if len(violations) < 20 {
			violations = append(violations, v)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait.UntilWithContext(wctx, func(ctx context.Context) { check(ctx, violated) }, 100*time.Millisecond)
	}()
	return func() []string {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return violations
	}
}

// drainerLeads reports whether the leader-election Lease lull-drainer is
// held by a replica running image, and else who holds it.
func drainerLeads(ctx context.Context, image string) (bool, string) {
	cs := cluster.Clientset
	l, err := cs.CoordinationV1().Leases("lull-system").Get(ctx, "lull-drainer", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return false, fmt.Sprint(err)
	}
	pods, err := cs.CoreV1().Pods("lull-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=lull-drainer"})
	if err != nil {
		return false, err.Error()
	}
	for _, p := range pods.Items {
		if *l.Spec.HolderIdentity == "lull-drainer/"+p.Name && p.Spec.Containers[0].Image == image {
			return true, ""
		}
	}
	return false, "leader " + *l.Spec.HolderIdentity
}
