package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/alerts"
	"lull.dev/lull/drainer/maintenance"
	"lull.dev/lull/test/framework"
)

// startAlertmanager runs _output/bin/alertmanager (hack/build-binaries.sh)
// on a free port of host, without gossip (its cluster port would listen
// on every address), with its data under t.TempDir(); it returns its
// host:port once /-/ready answers. t.Cleanup stops it.
func startAlertmanager(t *testing.T, host string) string {
	t.Helper()
	bin := filepath.Join(framework.BinDir(), "alertmanager")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s not found: run 'make binaries' (hack/build-binaries.sh alertmanager builds it): %v", bin, err)
	}
	dir := t.TempDir()
	config := "route:\n  receiver: nobody\n  group_wait: 1s\nreceivers:\n  - name: nobody\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "alertmanager.yml"), []byte(config), 0o644))
	logFile := filepath.Join(dir, "alertmanager.log")
	for attempt := 1; ; attempt++ {
		port, err := freeTCPPort(host)
		require.NoError(t, err)
		addr := net.JoinHostPort(host, fmt.Sprint(port))
		logF, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		require.NoError(t, err)
		cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "alertmanager.yml"), "--storage.path="+filepath.Join(dir, "data"),
			"--web.listen-address="+addr, "--cluster.listen-address=")
		cmd.Dir = dir
		cmd.Stdout, cmd.Stderr = logF, logF
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		require.NoError(t, cmd.Start())
		_ = logF.Close()
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		var once sync.Once
		t.Cleanup(func() {
			once.Do(func() {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-exited:
				case <-time.After(10 * time.Second):
					_ = cmd.Process.Kill()
					<-exited
				}
			})
		})
		err = waitReady("http://"+addr+"/-/ready", exited, time.Now().Add(30*time.Second))
		if err == nil {
			t.Logf("alertmanager: ready at http://%s (data and log in %s)", addr, dir)
			return addr
		}
		if errors.Is(err, errExited) && strings.Contains(logTail(logFile, 30), "address already in use") && attempt < 3 {
			continue
		}
		t.Fatalf("alertmanager at %s: %v; last lines of %s:\n%s", addr, err, logFile, logTail(logFile, 30))
	}
}

// amAlert is an alert as Alertmanager's API v2 shows it.
type amAlert struct {
	Labels map[string]string `json:"labels"`
	Status struct {
		State      string   `json:"state"`
		SilencedBy []string `json:"silencedBy"`
	} `json:"status"`
}

// amAlerts are the alerts Alertmanager holds (silenced ones too).
func amAlerts(ctx context.Context, url string) ([]amAlert, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/v2/alerts?active=true&silenced=true&inhibited=true", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out []amAlert
	return out, json.NewDecoder(resp.Body).Decode(&out)
}

// lullSilences are the active silences lull made in Alertmanager at url
// whose matchers name node.
func lullSilences(ctx context.Context, url, node string) ([]alerts.Silence, error) {
	c := &alerts.Client{URL: url, API: alerts.Alertmanager}
	list, err := c.Silences(ctx)
	if err != nil {
		return nil, err
	}
	var out []alerts.Silence
	for _, s := range list {
		if s.Active() && s.CreatedBy == alerts.SilenceAuthor && alerts.SilenceMatches(s.Matchers, map[string]string{"node": node}) {
			out = append(out, s)
		}
	}
	return out, nil
}

// Issue 45: a node lull reboots on purpose has an Alertmanager silence
// exactly while it is down on purpose. A real Prometheus fires
// LullE2ENodeDown{node=...} for a NotReady node (as kube-state-metrics'
// readiness does) and sends it to a real Alertmanager; a window selecting
// the node has spec.silences, and a simulated lull-agent keeps the node
// down for 25 s of boot. Watched every 250 ms: no silence of lull's
// before the host steps are handed out, one active whenever the node is
// down, Alertmanager shows the node's alert silenced by it, and another
// window's alerts gate (asking Prometheus, which knows no silences) stays
// quiet, saying it ignores the alert of a node lull takes down on purpose;
// once the node is back the silence is expired within seconds. The
// control: the same alert for a node lull does not hold holds that gate.
func TestSystemSilenceWhileLullTakesTheNodeDown(t *testing.T) {
	e := newSysEnv(t)
	ctx := t.Context()
	nodes := e.pickNodes("e2e-silence", 1)
	e.pickNodes("e2e-silence-gate", 1)
	node := nodes[0]
	host := prometheusNodeIP
	if !localAddress(t, host) {
		host = "127.0.0.1"
	}
	amAddr := startAlertmanager(t, host)
	amURL := "http://" + amAddr
	var ghost atomic.Bool
	prom := startPrometheusWith(t, promOptions{alertmanager: amAddr, nodesDown: func() map[string]bool {
		down := map[string]bool{"e2e-ghost": ghost.Load()}
		n, err := cluster.Clientset.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err == nil {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					down[node] = c.Status != corev1.ConditionTrue
				}
			}
		}
		return down
	}})

	policy := &lullv1alpha1.DisruptionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "e2e-silence"}, Spec: lullv1alpha1.DisruptionPolicySpec{
		Priority: 100,
		Rules: []lullv1alpha1.DisruptionRule{{Name: "kernel", Class: "e2e-silence-reboot",
			Steps: []lullv1alpha1.Step{{Type: lullv1alpha1.ActionDrain}, {Type: lullv1alpha1.StepReboot}}}}}}
	require.NoError(t, e.c.Create(ctx, policy))
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), policy) })
	e.window(&lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "e2e-silence"}, Spec: lullv1alpha1.MaintenanceWindowSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "e2e-silence"}},
		Strategy:     lullv1alpha1.StrategyPermissive, MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		Silences: &lullv1alpha1.Silences{URL: amURL, Duration: &lullv1alpha1.Duration{Duration: 2 * time.Minute}},
	}})
	e.window(&lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "e2e-silence-gate"}, Spec: lullv1alpha1.MaintenanceWindowSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "e2e-silence-gate"}},
		Strategy:     lullv1alpha1.StrategyPermissive, MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		Gates: &lullv1alpha1.Gates{Alerts: &lullv1alpha1.AlertsGate{URL: prom.URL, Matchers: []string{`alertname="` + prometheusNodeDownAlert + `"`},
			Period: &lullv1alpha1.Duration{Duration: 5 * time.Second}}},
	}})
	iv := e.watchInvariants(node)
	iv.budget("e2e-silence", 1, node)
	firstBoot := watchFirstBootIDs(t, node)
	startSimAgentBooting(t, node, 25*time.Second)
	require.Eventually(t, func() bool { return firstBoot(node) != "" }, time.Minute, 200*time.Millisecond, "the simulated agent gave %s no boot ID", node)

	gateQuiet := func() *metav1.Condition {
		var w lullv1alpha1.MaintenanceWindow
		if e.c.Get(ctx, client.ObjectKey{Name: "e2e-silence-gate"}, &w) != nil {
			return nil
		}
		return meta.FindStatusCondition(w.Status.Conditions, lullv1alpha1.WindowConditionAlertsQuiet)
	}
	require.Eventually(t, func() bool { c := gateQuiet(); return c != nil && c.Status == metav1.ConditionTrue }, time.Minute, 250*time.Millisecond,
		"the gate is quiet before anything is down")
	before, err := lullSilences(ctx, amURL, node)
	require.NoError(t, err)
	require.Empty(t, before, "no silence of lull's before the request")

	iv.permit(node, time.Now())
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: lullv1alpha1.NodeMaintenanceSpec{
		NodeName: node, Classes: []string{"e2e-silence-reboot"}, Reason: "e2e silence"}}
	require.NoError(t, e.c.Create(ctx, nm))
	t.Cleanup(func() { e.deleteNM(node) })

	var sawDown, sawSilenced, sawIgnored bool
	var silenceID string
	var completedAt time.Time
	deadline := time.Now().Add(4 * time.Minute)
	for {
		require.True(t, time.Now().Before(deadline), "the request did not complete; %s", cluster.LogsHint())
		var cur lullv1alpha1.NodeMaintenance
		require.NoError(t, e.c.Get(ctx, client.ObjectKey{Name: node}, &cur))
		n, err := cluster.Clientset.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		require.NoError(t, err)
		down := !nodeReady(n)
		active, err := lullSilences(ctx, amURL, node)
		require.NoError(t, err)
		switch {
		case down:
			sawDown = true
			require.Len(t, active, 1, "node %s is down (request %s) without one silence of lull's", node, cur.Status.Phase)
			silenceID = active[0].ID
		case cur.Status.Phase.Waiting() || cur.Status.Phase == lullv1alpha1.PhaseCordoning || cur.Status.Phase == lullv1alpha1.PhaseDraining:
			require.Empty(t, active, "a silence of lull's before the host steps are handed out (request %s)", cur.Status.Phase)
		}
		if silenceID != "" && !sawSilenced {
			as, err := amAlerts(ctx, amURL)
			require.NoError(t, err)
			for _, a := range as {
				if a.Labels["alertname"] == prometheusNodeDownAlert && a.Labels["node"] == node && a.Status.State == "suppressed" &&
					fmt.Sprint(a.Status.SilencedBy) == fmt.Sprint([]string{silenceID}) {
					sawSilenced = true
					t.Logf("Alertmanager shows %s{node=%q} silenced by lull's silence %s", prometheusNodeDownAlert, node, silenceID)
				}
			}
		}
		if c := gateQuiet(); c != nil {
			require.Equal(t, metav1.ConditionTrue, c.Status, "another window's gate held by the alert of a node lull takes down on purpose: %s", c.Message)
			if !sawIgnored && strings.Contains(c.Message, "ignored") && strings.Contains(c.Message, node) {
				sawIgnored = true
				t.Logf("the other window's gate: %s", c.Message)
			}
		}
		if cur.Status.Phase == lullv1alpha1.PhaseCompleted {
			completedAt = time.Now()
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	require.True(t, sawDown, "the simulated reboot never took %s down", node)
	require.True(t, sawSilenced, "Alertmanager never showed the node's alert silenced by lull's silence")
	require.True(t, sawIgnored, "the other window's gate never said it ignored the node's alert")

	// Back: the silence is expired within seconds, and the record gone.
	require.Eventually(t, func() bool {
		active, err := lullSilences(ctx, amURL, node)
		return err == nil && len(active) == 0
	}, 15*time.Second, 250*time.Millisecond, "lull's silence of %s is still active after the request completed", node)
	got, err := (&alerts.Client{URL: amURL, API: alerts.Alertmanager}).GetSilence(ctx, silenceID)
	require.NoError(t, err)
	require.Equal(t, "expired", got.State)
	t.Logf("silence %s expired at %s, the request completed at %s", silenceID, got.EndsAt.UTC().Format(time.RFC3339), completedAt.UTC().Format(time.RFC3339))
	var done lullv1alpha1.NodeMaintenance
	require.NoError(t, e.c.Get(ctx, client.ObjectKey{Name: node}, &done))
	require.Nil(t, done.Status.Silence)
	c := meta.FindStatusCondition(done.Status.Conditions, maintenance.ConditionSilenced)
	require.NotNil(t, c)
	require.Equal(t, maintenance.ReasonSilenceExpired, c.Reason)

	// The control: the same alert for a node lull does not hold down
	// holds the other window's gate.
	ghost.Store(true)
	require.Eventually(t, func() bool {
		c := gateQuiet()
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "e2e-ghost")
	}, time.Minute, 250*time.Millisecond, "the alert of a node lull does not hold never held the gate")
	ghost.Store(false)
	summary("silences", map[string]any{"violations": iv.check()})
}

// nodeReady reports whether the node's Ready condition is True.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
