package windowcontroller

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/alerts"
	"lull.dev/lull/internal/lullscheme"
)

// redteamGate asks the alerts gate of a window once, with these requests
// stored, and returns its AlertsQuiet condition.
func redteamGate(t *testing.T, alertsJSON string, now time.Time, nms ...*lullv1alpha1.NodeMaintenance) *metav1.Condition {
	t.Helper()
	prom := &fakePrometheus{alerts: alertsJSON}
	srv := httptest.NewServer(prom)
	t.Cleanup(srv.Close)
	b := fake.NewClientBuilder().WithScheme(lullscheme.New())
	for _, nm := range nms {
		b = b.WithObjects(nm)
	}
	c := b.Build()
	r := &Reconciler{Client: c, Secrets: c, SecretNamespace: "lull-system"}
	mw := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "wave", Generation: 1}, Spec: lullv1alpha1.MaintenanceWindowSpec{
		Gates: &lullv1alpha1.Gates{Alerts: &lullv1alpha1.AlertsGate{URL: srv.URL, Matchers: []string{`alertname="NodeDown"`}}}}}
	st := &lullv1alpha1.MaintenanceWindowStatus{}
	r.gates(context.Background(), mw, nil, st, now)
	q := meta.FindStatusCondition(st.Conditions, lullv1alpha1.WindowConditionAlertsQuiet)
	require.NotNil(t, q)
	return q
}

// Red team (silences), finding 12: a silence someone expired (withdrawn:
// "they want the node's alerts") still makes every alerts gate ignore the
// node's alerts until the recorded end, up to the window's duration (24h
// at most): the gate checks DownOnPurpose and EndsAt, not Withdrawn. The
// alerts are no longer silenced by anyone, they page, and yet the next
// wave goes on as if they did not fire.
func TestRedteamSilenceGateWithdrawnIgnoresNothing(t *testing.T) {
	now := time.Date(2026, 11, 25, 10, 5, 0, 0, time.UTC)
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: lullv1alpha1.NodeMaintenanceStatus{
		Phase: lullv1alpha1.PhaseActing, Actions: []lullv1alpha1.ActionStatus{{Type: lullv1alpha1.StepReboot, State: lullv1alpha1.ActionRunning}},
		Silence: &lullv1alpha1.SilenceStatus{ID: "s-n1", Window: "other", Matchers: []string{`node="n1"`}, Withdrawn: true,
			StartsAt: metav1.Time{Time: now.Add(-2 * time.Minute)}, EndsAt: metav1.Time{Time: now.Add(23 * time.Hour)}}}}
	q := redteamGate(t, `[{"labels":{"alertname":"NodeDown","severity":"page","node":"n1"},"state":"firing","activeAt":"2026-11-25T10:00:00Z"}]`, now, nm)
	require.Equal(t, metav1.ConditionFalse, q.Status,
		"the gate ignores node n1's alert under a silence someone expired (withdrawn): %s", q.Message)
}

// Red team (silences), finding 2 at the gate: the record lull writes for
// node-1 under matchers node="$(NODE_NAME)0" (accepted by admission and
// by SilenceMatchers) is node="node-10", and every alerts gate ignores the
// alerts of node-10, a node lull does not take down.
func TestRedteamSilenceGateIgnoresOnlyTheDownNode(t *testing.T) {
	now := time.Date(2026, 11, 25, 10, 5, 0, 0, time.UTC)
	ms, err := alerts.SilenceMatchers([]string{`node="$(NODE_NAME)0"`}, "node-1", lullv1alpha1.SilenceNodeName)
	if err != nil {
		return // refused: held
	}
	var written []string
	for _, m := range ms {
		written = append(written, m.String())
	}
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "node-1"},
		Status: lullv1alpha1.NodeMaintenanceStatus{
			Phase: lullv1alpha1.PhaseActing, Actions: []lullv1alpha1.ActionStatus{{Type: lullv1alpha1.StepReboot, State: lullv1alpha1.ActionRunning}},
			Silence: &lullv1alpha1.SilenceStatus{ID: "s-1", Window: "other", Matchers: written,
				StartsAt: metav1.Time{Time: now.Add(-time.Minute)}, EndsAt: metav1.Time{Time: now.Add(9 * time.Minute)}}}}
	q := redteamGate(t, `[{"labels":{"alertname":"NodeDown","severity":"page","node":"node-10"},"state":"firing","activeAt":"2026-11-25T10:00:00Z"}]`, now, nm)
	require.Equal(t, metav1.ConditionFalse, q.Status,
		"node-10 is not down, yet the gate ignores its alert because node-1's silence names it: %s", q.Message)
	require.True(t, strings.Contains(q.Message, "node-10"))
}
