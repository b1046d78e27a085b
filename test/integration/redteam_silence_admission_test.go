package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drainer/alerts"
)

// Red team (silences), finding 2 at admission: the CRD's rule "at least
// one equality matcher naming the node" accepts text around
// $(NODE_NAME), so a window's author can write node="$(NODE_NAME)0" and
// have lull silence node-10 while it reboots node-1 (and every alerts
// gate ignore node-10's alerts meanwhile).
func TestRedteamSilenceAdmissionRefusesAffixedNodeName(t *testing.T) {
	ctx := t.Context()
	for i, m := range []string{`node="$(NODE_NAME)0"`, `node="x$(NODE_NAME)"`} {
		w := weekendWindow("redteam-silence-affix-" + string(rune('a'+i)))
		w.Spec.Silences = silences(m)
		err := cp.Client.Create(ctx, w)
		if err == nil {
			_ = cp.Client.Delete(ctx, w)
		}
		require.Error(t, err, "a window whose silence matcher %s names other nodes than the one lull takes down is accepted", m)
	}
}

// Red team (silences), findings 3 and 4 at the API server: what lull
// accepts and records (an expanded matcher from a valid window and a
// valid node name; an ID Alertmanager answered) is refused in
// status.silence, so the status write of the round entering Acting fails
// on every try while the silence exists in Alertmanager: the request
// never moves on, and the error is a validation error of lull's own
// record, not one that names the window.
func TestRedteamSilenceStatusHoldsWhatLullRecords(t *testing.T) {
	ctx := t.Context()
	node := strings.TrimSuffix(strings.Repeat(strings.Repeat("a", 61)+".", 4), ".")
	written := []string{`node="$(NODE_NAME)"`, `instance=~"$(NODE_NAME)|$(NODE_NAME):9100|$(NODE_NAME):9256|$(NODE_NAME):10250"`}
	// The window is admitted.
	w := weekendWindow("redteam-silence-long")
	w.Spec.Silences = silences(written...)
	require.NoError(t, cp.Client.Create(ctx, w))
	defer func() { _ = cp.Client.Delete(ctx, w) }()
	// lull refuses to expand it, saying which matcher is too long (the
	// request then waits with that message, nothing made in Alertmanager).
	_, err := alerts.SilenceMatchers(written, node, lullv1alpha1.SilenceNodeName)
	require.ErrorContains(t, err, "more than 1024: write a shorter one")
	// What lull does record fits: matchers up to the bound, an ID up to 64
	// (alerts.PutSilence refuses a longer one from Alertmanager).
	longest := `node="` + strings.Repeat("a", alerts.MaxSilenceMatcher-len(`node=""`)) + `"`
	ms, err := alerts.SilenceMatchers([]string{`node="$(NODE_NAME)"`}, strings.Repeat("a", alerts.MaxSilenceMatcher-len(`node=""`)), lullv1alpha1.SilenceNodeName)
	require.NoError(t, err)
	require.Equal(t, longest, ms[0].String())
	nm := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "redteam-silence-status"},
		Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: "redteam-silence-status", Classes: []string{"kernel-update"}}}
	require.NoError(t, cp.Client.Create(ctx, nm))
	defer func() { _ = cp.Client.Delete(ctx, nm) }()
	now := time.Now()
	nm.Status = lullv1alpha1.NodeMaintenanceStatus{Phase: lullv1alpha1.PhaseActing,
		Silence: &lullv1alpha1.SilenceStatus{ID: strings.Repeat("f", 64), URL: "http://alertmanager.monitoring:9093", Window: w.Name, Matchers: []string{longest},
			StartsAt: metav1.Time{Time: now}, EndsAt: metav1.Time{Time: now.Add(10 * time.Minute)}}}
	require.NoError(t, cp.Client.Status().Update(ctx, nm), "status.silence as lull records it is admitted")
}

// Red team (silences), finding 13: the alerts gates judge "what lull's
// silence selects" with lull's matcher semantics (PromQL's: a regular
// expression anchored as ^(?s:re)$, "." matching a newline), while
// Alertmanager anchors a silence's regular expression as ^(?:re)$. For a
// label value with a newline (a summary, a message) the gate ignores an
// alert that Alertmanager does not silence: it pages, and the wave goes
// on as if it were silenced. The real Alertmanager is the judge here.
func TestRedteamSilenceGateAgreesWithAlertmanager(t *testing.T) {
	url := startAlertmanager(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	now := time.Now().UTC().Format(time.RFC3339)
	// The control: the same alert without a newline, which both call
	// silenced.
	postAlerts(t, url, fmt.Sprintf(`[{"labels":{"alertname":"NodeDown","node":"n1","reason":"disk\nfull"},"startsAt":%q},`+
		`{"labels":{"alertname":"NodeDown","node":"n1","reason":"diskfull"},"startsAt":%q}]`, now, now))
	written := []string{`node="$(NODE_NAME)"`, `reason=~".+"`}
	ms, err := alerts.SilenceMatchers(written, "n1", lullv1alpha1.SilenceNodeName)
	require.NoError(t, err)
	c := &alerts.Client{URL: url, API: alerts.Alertmanager}
	start := time.Now()
	_, err = c.PutSilence(ctx, alerts.Silence{Matchers: ms, StartsAt: start, EndsAt: start.Add(10 * time.Minute), CreatedBy: alerts.SilenceAuthor, Comment: "red team"})
	require.NoError(t, err)
	labels := map[string]string{"alertname": "NodeDown", "node": "n1", "reason": "disk\nfull"}
	lullSays := alerts.SilenceMatches(ms, labels)
	// What Alertmanager says: is the alert silenced?
	var amSays bool
	require.Eventually(t, func() bool {
		resp, err := http.Get(url + "/api/v2/alerts?silenced=true&active=true&inhibited=true")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var list []struct {
			Labels map[string]string `json:"labels"`
			Status struct {
				State      string   `json:"state"`
				SilencedBy []string `json:"silencedBy"`
			} `json:"status"`
		}
		if json.NewDecoder(resp.Body).Decode(&list) != nil || len(list) != 2 {
			return false
		}
		control := false
		for _, a := range list {
			switch a.Labels["reason"] {
			case "diskfull":
				control = len(a.Status.SilencedBy) > 0
			default:
				amSays = len(a.Status.SilencedBy) > 0
			}
		}
		return control
	}, 20*time.Second, 200*time.Millisecond)
	require.Equal(t, amSays, lullSays, "lull's gate says the silence selects the alert: %v; Alertmanager silences it: %v", lullSays, amSays)
}
