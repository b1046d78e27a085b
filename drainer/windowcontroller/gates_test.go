package windowcontroller

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/gate"
	"lull.dev/lull/internal/lullscheme"
)

// fakePrometheus answers /api/v1/alerts with what the test sets, and what
// the client asks first as a Prometheus up for long whose rules have been
// evaluated since (or, warn set, flags its alerts answer as partial).
type fakePrometheus struct {
	mu     sync.Mutex
	alerts string // the alerts array's JSON
	warn   string // a warning in the alerts answer
	auth   string // the last Authorization header
	calls  int    // of /api/v1/alerts
}

func (p *fakePrometheus) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.auth = r.Header.Get("Authorization")
	switch r.URL.Path {
	case "/api/v1/status/runtimeinfo":
		fmt.Fprint(w, `{"status":"success","data":{"startTime":"2026-11-01T00:00:00Z","lastConfigTime":"2026-11-01T00:00:00Z"}}`)
	case "/api/v1/rules":
		fmt.Fprint(w, `{"status":"success","data":{"groups":[{"name":"g","file":"r.yml","interval":30,"lastEvaluation":"2026-11-25T10:00:00Z","rules":[]}]}}`)
	default:
		p.calls++
		warnings := ""
		if p.warn != "" {
			warnings = fmt.Sprintf(`,"warnings":[%q]`, p.warn)
		}
		fmt.Fprintf(w, `{"status":"success","data":{"alerts":%s}%s}`, p.alerts, warnings)
	}
}

func (p *fakePrometheus) set(alerts string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.alerts = alerts
}

const nodeDown = `[{"labels":{"alertname":"NodeDown","severity":"page","instance":"n7"},"state":"firing","activeAt":"2026-11-25T10:00:00Z"},
{"labels":{"alertname":"Watchdog","severity":"none"},"state":"firing","activeAt":"2026-11-25T09:00:00Z"}]`

// The window controller asks the alerts gate's server every period and
// records the answer; any failure to ask holds (fails closed); a Secret
// lends its token only when labelled for it.
func TestAlertsGateAsksEveryPeriod(t *testing.T) {
	prom := &fakePrometheus{alerts: nodeDown}
	srv := httptest.NewServer(prom)
	defer srv.Close()
	secret := func(name string, labelled bool) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "lull-system", Name: name}, Data: map[string][]byte{"token": []byte("s3cret\n"),
			"url": []byte(srv.URL), "insecure-http": []byte("true")}}
		if labelled {
			s.Labels = map[string]string{lullv1alpha1.AlertsCredentialsLabel: "true"}
		}
		return s
	}
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(secret("prom", true), secret("sa-token", false)).Build()
	r := &Reconciler{Client: c, Secrets: c, SecretNamespace: "lull-system"}
	mw := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "wave", Generation: 1}, Spec: lullv1alpha1.MaintenanceWindowSpec{
		Gates: &lullv1alpha1.Gates{Alerts: &lullv1alpha1.AlertsGate{URL: srv.URL, Matchers: []string{`severity=~"page|critical"`}, SecretName: "prom"}}}}
	now := time.Date(2026, 11, 25, 10, 5, 0, 0, time.UTC)
	st := &lullv1alpha1.MaintenanceWindowStatus{}
	quiet := func() *metav1.Condition {
		return meta.FindStatusCondition(st.Conditions, lullv1alpha1.WindowConditionAlertsQuiet)
	}

	again := r.gates(context.Background(), mw, nil, st, now)
	require.Equal(t, 30*time.Second, again, "asks again after a period")
	require.Equal(t, metav1.ConditionFalse, quiet().Status)
	require.Equal(t, gate.ReasonAlertsFiring, quiet().Reason)
	require.Contains(t, quiet().Message, `1 alert fires: NodeDown{instance="n7",severity="page"} firing since 2026-11-25T10:00:00Z`)
	require.Equal(t, []string{`NodeDown{instance="n7",severity="page"} firing since 2026-11-25T10:00:00Z`}, st.Alerts.Firing)
	require.Equal(t, "Bearer s3cret", prom.auth)
	mw.Status = *st
	require.True(t, gate.Alerts(mw, now).Hold)

	prom.set(`[]`)
	r.gates(context.Background(), mw, nil, st, now.Add(10*time.Second))
	require.Equal(t, 1, prom.calls, "not asked again within the period")
	r.gates(context.Background(), mw, nil, st, now.Add(30*time.Second))
	require.Equal(t, 2, prom.calls)
	require.Equal(t, metav1.ConditionTrue, quiet().Status)
	require.Equal(t, "no matching alert fires at "+srv.URL, quiet().Message)
	require.Empty(t, st.Alerts.Firing)
	mw.Status = *st
	require.False(t, gate.Alerts(mw, now.Add(30*time.Second)).Hold)
	require.True(t, gate.Alerts(mw, now.Add(30*time.Second+4*time.Minute)).Hold, "an answer three periods old holds")

	// An answer flagged partial is no answer: it holds.
	prom.mu.Lock()
	prom.warn = "partial response: ruler-1 unreachable"
	prom.mu.Unlock()
	r.gates(context.Background(), mw, nil, st, now.Add(60*time.Second))
	require.Equal(t, 3, prom.calls)
	require.Equal(t, metav1.ConditionFalse, quiet().Status, "a partial answer holds")
	require.Equal(t, gate.ReasonAlertsUnknown, quiet().Reason)
	require.Contains(t, quiet().Message, `the answer may be incomplete: the server warns "partial response: ruler-1 unreachable"; the window's nodes do not start until lull gets a complete answer`)
	mw.Status = *st
	require.True(t, gate.Alerts(mw, now.Add(60*time.Second)).Hold)

	srv.Close()
	r.gates(context.Background(), mw, nil, st, now.Add(90*time.Second))
	require.Equal(t, metav1.ConditionFalse, quiet().Status, "an unreachable server holds")
	require.Equal(t, gate.ReasonAlertsUnknown, quiet().Reason)
	require.Contains(t, quiet().Message, "the window's nodes do not start until lull can ask again")

	mw.Generation, mw.Spec.Gates.Alerts.SecretName = 2, "sa-token"
	r.gates(context.Background(), mw, nil, st, now.Add(91*time.Second))
	require.Equal(t, gate.ReasonAlertsUnknown, quiet().Reason, "a new spec is asked at once")
	require.Contains(t, quiet().Message, "Secret lull-system/sa-token lacks the label lull.dev/alerts-credentials=true")

	mw.Generation, mw.Spec.Gates.Alerts.SecretName = 3, "missing"
	r.gates(context.Background(), mw, nil, st, now.Add(92*time.Second))
	require.Contains(t, quiet().Message, "Secret lull-system/missing with alerts credentials does not exist")

	mw.Generation, mw.Spec.Gates = 4, nil
	require.Zero(t, r.gates(context.Background(), mw, nil, st, now.Add(93*time.Second)))
	require.Nil(t, quiet(), "a window without the gate has no condition")
	require.Nil(t, st.Alerts)
}

// The window's Recovered condition says what the drainer's recovery gate
// says.
func TestRecoveredCondition(t *testing.T) {
	now := time.Date(2026, 11, 25, 10, 5, 0, 0, time.UTC)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", Message: "PLEG is not healthy", LastTransitionTime: metav1.Time{Time: now.Add(-30 * time.Second)}}}}}
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "n1"},
		Status: lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseCompleted, Windows: []string{"wave"},
			StartedAt: &metav1.Time{Time: now.Add(-10 * time.Minute)}, CompletedAt: &metav1.Time{Time: now.Add(-time.Minute)}}}
	r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(node).Build()}
	mw := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "wave", Generation: 1}, Spec: lullv1alpha1.MaintenanceWindowSpec{
		Gates: &lullv1alpha1.Gates{Recovery: &lullv1alpha1.RecoveryGate{}}}}
	st := &lullv1alpha1.MaintenanceWindowStatus{}
	again := r.gates(context.Background(), mw, []lullv1alpha1.NodeMaintenance{*nm}, st, now)
	cond := meta.FindStatusCondition(st.Conditions, lullv1alpha1.WindowConditionRecovered)
	require.Equal(t, metav1.ConditionFalse, cond.Status)
	require.Equal(t, gate.ReasonNodeUnwell, cond.Reason)
	require.Contains(t, cond.Message, "node n1 came back unwell after its maintenance")
	require.Contains(t, cond.Message, "Ready is False since 2026-11-25T10:04:30Z (KubeletNotReady: PLEG is not healthy)")
	require.Equal(t, 30*time.Second, again)
}

// lull_window_gate_holding says which gate holds a window, and why.
func TestGateHoldingMetric(t *testing.T) {
	c := NewCollector(clocktesting.NewFakeClock(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)))
	mw := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "wave", Generation: 1}, Spec: lullv1alpha1.MaintenanceWindowSpec{
		Gates: &lullv1alpha1.Gates{Alerts: &lullv1alpha1.AlertsGate{URL: "http://prom:9090"}, Recovery: &lullv1alpha1.RecoveryGate{}}}}
	st := &lullv1alpha1.MaintenanceWindowStatus{Conditions: []metav1.Condition{{Type: lullv1alpha1.WindowConditionRecovered, Status: metav1.ConditionTrue, Reason: gate.ReasonRecovered, ObservedGeneration: 1}}}
	c.SetGates("wave", gateStates(mw, st, time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)))
	want := `
# HELP lull_window_gate_holding 1 while the window's health gate (alerts, recovery) holds its nodes from starting, with the reason (AlertsFiring, AlertsUnknown, Settling, NodeUnwell, ...); 0 while it passes. Blocking pods are judged node by node: see lull_maintenance_nodes{phase="WaitingForGates"}.
# TYPE lull_window_gate_holding gauge
lull_window_gate_holding{gate="alerts",reason="AlertsUnknown",window="wave"} 1
lull_window_gate_holding{gate="recovery",reason="Recovered",window="wave"} 0
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "lull_window_gate_holding"))
	c.Forget("wave")
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(""), "lull_window_gate_holding"))
}

// lull_window_nodes_disrupting and lull_window_max_unavailable: a window's
// budget in use and its size.
func TestBudgetMetrics(t *testing.T) {
	c := NewCollector(clocktesting.NewFakeClock(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)))
	c.SetBudget("weekend", 1, 2)
	want := `
# HELP lull_window_max_unavailable How many of the window's nodes lull may disrupt at once (maxUnavailable resolved against the selected nodes; 0: frozen).
# TYPE lull_window_max_unavailable gauge
lull_window_max_unavailable{window="weekend"} 2
# HELP lull_window_nodes_disrupting Nodes selected by the window that lull is disrupting now (cordoned, draining, acting): the budget slots in use.
# TYPE lull_window_nodes_disrupting gauge
lull_window_nodes_disrupting{window="weekend"} 1
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "lull_window_nodes_disrupting", "lull_window_max_unavailable"))
}

// A credential goes only where its owner said (issue 43, finding 3): the
// Secret names the server (or a path prefix) its credentials may be sent
// to, and plain http needs its explicit consent. A window's author who
// names a labelled Secret and a listener of their own gets nothing.
func TestCredentialsMayGo(t *testing.T) {
	yes := []byte("true")
	for name, tc := range map[string]struct {
		allowed  string
		insecure []byte
		target   string
		want     string
	}{
		"the named server":                   {"https://prom.monitoring:9090", nil, "https://prom.monitoring:9090", ""},
		"under its prefix":                   {"https://mon.example/prometheus", nil, "https://mon.example/prometheus/", ""},
		"a prefix with a trailing slash":     {"https://mon.example/prometheus/", nil, "https://mon.example/prometheus/x", ""},
		"plain http, allowed":                {"http://127.0.0.1:9090", yes, "http://127.0.0.1:9090", ""},
		"no url":                             {"", nil, "https://prom.monitoring:9090", "it names no url"},
		"another host":                       {"https://prom.monitoring:9090", nil, "https://evil.example:9090", "may be sent only to https://prom.monitoring:9090"},
		"another port":                       {"https://prom.monitoring:9090", nil, "https://prom.monitoring:9999", "may be sent only to"},
		"a sibling path":                     {"https://mon.example/prometheus", nil, "https://mon.example/prometheus-evil", "may be sent only to"},
		"https named, http asked":            {"https://prom.monitoring:9090", nil, "http://prom.monitoring:9090", "may be sent only to"},
		"plain http without consent":         {"http://prom.monitoring:9090", nil, "http://prom.monitoring:9090", "over plain http"},
		"a url with credentials in it":       {"https://u:p@prom.monitoring", nil, "https://prom.monitoring", "is not an http(s) URL without credentials"},
		"not a URL":                          {"prom.monitoring:9090", nil, "https://prom.monitoring:9090", "is not an http(s) URL"},
		"a host that only starts like it":    {"https://prom.monitoring", nil, "https://prom.monitoring.evil.example", "may be sent only to"},
		"user info smuggled into the target": {"https://prom.monitoring", nil, "https://prom.monitoring@evil.example", "may be sent only to"},
	} {
		t.Run(name, func(t *testing.T) {
			err := credentialsMayGo(tc.allowed, tc.insecure, tc.target)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// A gate whose URL its Secret does not name holds, and the Secret's token
// never reaches the server.
func TestAlertsGateKeepsTheTokenWhereItsOwnerSaid(t *testing.T) {
	prom := &fakePrometheus{alerts: nodeDown}
	srv := httptest.NewServer(prom)
	defer srv.Close()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "lull-configs", Name: "prom", Labels: map[string]string{lullv1alpha1.AlertsCredentialsLabel: "true"}},
		Data: map[string][]byte{"token": []byte("s3cret"), "url": []byte("https://prometheus.monitoring:9090")}}
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(s).Build()
	r := &Reconciler{Client: c, Secrets: c, SecretNamespace: "lull-configs"}
	mw := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "wave", Generation: 1}, Spec: lullv1alpha1.MaintenanceWindowSpec{
		Gates: &lullv1alpha1.Gates{Alerts: &lullv1alpha1.AlertsGate{URL: srv.URL, SecretName: "prom"}}}}
	st := &lullv1alpha1.MaintenanceWindowStatus{}
	r.gates(context.Background(), mw, nil, st, time.Date(2026, 11, 25, 10, 5, 0, 0, time.UTC))
	cond := meta.FindStatusCondition(st.Conditions, lullv1alpha1.WindowConditionAlertsQuiet)
	require.Equal(t, gate.ReasonAlertsUnknown, cond.Reason, "holds")
	require.Contains(t, cond.Message, "may be sent only to https://prometheus.monitoring:9090")
	require.Zero(t, prom.calls, "the server was never asked")
	require.Empty(t, prom.auth, "the token went nowhere")
}

// The alerts gate ignores the alerts lull's own silence selects for a
// node lull takes down on purpose now, and only those: not another
// node's, not once the node is back or the request ended, not after the
// silence's end, not when the record's matchers select nothing of it.
func TestAlertsGateIgnoresOnlyLullsDownNodes(t *testing.T) {
	const twoDown = `[{"labels":{"alertname":"NodeDown","severity":"page","node":"n1"},"state":"firing","activeAt":"2026-11-25T10:00:00Z"},
{"labels":{"alertname":"NodeDown","severity":"page","node":"n2"},"state":"firing","activeAt":"2026-11-25T10:00:00Z"}]`
	now := time.Date(2026, 11, 25, 10, 5, 0, 0, time.UTC)
	down := func(node string, mut func(*lullv1alpha1.NodeMaintenanceStatus)) *lullv1alpha1.NodeMaintenance {
		nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: node}, Status: lullv1alpha1.NodeMaintenanceStatus{
			Phase: lullv1alpha1.PhaseActing, Actions: []lullv1alpha1.ActionStatus{{Type: lullv1alpha1.StepReboot, State: lullv1alpha1.ActionRunning}},
			Silence: &lullv1alpha1.SilenceStatus{ID: "s-" + node, Window: "other", Matchers: []string{`node="` + node + `"`},
				StartsAt: metav1.Time{Time: now.Add(-time.Minute)}, EndsAt: metav1.Time{Time: now.Add(9 * time.Minute)}}}}
		if mut != nil {
			mut(&nm.Status)
		}
		return nm
	}
	for name, tc := range map[string]struct {
		alerts string
		nms    []*lullv1alpha1.NodeMaintenance
		quiet  bool
		firing string
	}{
		"the node lull reboots":    {alerts: twoDown[:strings.Index(twoDown, "},\n")+1] + "]", nms: []*lullv1alpha1.NodeMaintenance{down("n1", nil)}, quiet: true},
		"another node's holds":     {alerts: twoDown, nms: []*lullv1alpha1.NodeMaintenance{down("n1", nil)}, firing: `node="n2"`},
		"both down on purpose":     {alerts: twoDown, nms: []*lullv1alpha1.NodeMaintenance{down("n1", nil), down("n2", nil)}, quiet: true},
		"back: it holds":           {alerts: twoDown, nms: []*lullv1alpha1.NodeMaintenance{down("n1", func(s *lullv1alpha1.NodeMaintenanceStatus) { s.Actions[0].State = lullv1alpha1.ActionSucceeded }), down("n2", nil)}, firing: `node="n1"`},
		"reboot timed out":         {alerts: twoDown, nms: []*lullv1alpha1.NodeMaintenance{down("n1", func(s *lullv1alpha1.NodeMaintenanceStatus) { s.Actions[0].State = lullv1alpha1.ActionTimedOut }), down("n2", nil)}, firing: `node="n1"`},
		"request ended":            {alerts: twoDown, nms: []*lullv1alpha1.NodeMaintenance{down("n1", func(s *lullv1alpha1.NodeMaintenanceStatus) { s.Phase = lullv1alpha1.PhaseCompleted }), down("n2", nil)}, firing: `node="n1"`},
		"silence past its end":     {alerts: twoDown, nms: []*lullv1alpha1.NodeMaintenance{down("n1", func(s *lullv1alpha1.NodeMaintenanceStatus) { s.Silence.EndsAt = metav1.Time{Time: now} }), down("n2", nil)}, firing: `node="n1"`},
		"no silence recorded":      {alerts: twoDown, nms: []*lullv1alpha1.NodeMaintenance{down("n1", func(s *lullv1alpha1.NodeMaintenanceStatus) { s.Silence = nil }), down("n2", nil)}, firing: `node="n1"`},
		"powered off: ignored too": {alerts: twoDown, nms: []*lullv1alpha1.NodeMaintenance{down("n1", func(s *lullv1alpha1.NodeMaintenanceStatus) { s.Phase = lullv1alpha1.PhasePoweredOff }), down("n2", nil)}, quiet: true},
	} {
		t.Run(name, func(t *testing.T) {
			prom := &fakePrometheus{alerts: tc.alerts}
			srv := httptest.NewServer(prom)
			defer srv.Close()
			b := fake.NewClientBuilder().WithScheme(lullscheme.New())
			for _, nm := range tc.nms {
				b = b.WithObjects(nm)
			}
			c := b.Build()
			r := &Reconciler{Client: c, Secrets: c, SecretNamespace: "lull-system"}
			mw := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "wave", Generation: 1}, Spec: lullv1alpha1.MaintenanceWindowSpec{
				Gates: &lullv1alpha1.Gates{Alerts: &lullv1alpha1.AlertsGate{URL: srv.URL, Matchers: []string{`alertname="NodeDown"`}}}}}
			st := &lullv1alpha1.MaintenanceWindowStatus{}
			r.gates(context.Background(), mw, nil, st, now)
			q := meta.FindStatusCondition(st.Conditions, lullv1alpha1.WindowConditionAlertsQuiet)
			if tc.quiet {
				require.Equal(t, metav1.ConditionTrue, q.Status, q.Message)
				require.Contains(t, q.Message, "ignored, as their nodes are down on purpose under lull's silences")
				return
			}
			require.Equal(t, metav1.ConditionFalse, q.Status, q.Message)
			require.Equal(t, "1 alert fires", strings.SplitN(q.Message, ":", 2)[0], q.Message)
			require.Contains(t, q.Message, tc.firing)
		})
	}
}
