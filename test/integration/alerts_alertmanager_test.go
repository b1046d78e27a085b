package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"lull.dev/lull/drainer/alerts"
)

// A real Alertmanager keeps no alerts across a restart: until Prometheus
// has sent its firing alerts again (its resend delay, and the rule
// evaluation after it), an Alertmanager that has just started answers
// that nothing fires although something does. The alerts gate reads when
// it started from the real binary's GET /api/v2/status (uptime) and holds
// (ErrIncomplete) until AlertmanagerResendWait has passed; after that it
// reports what Alertmanager holds. Time is a fake clock started at the
// real one (Alertmanager's uptime is its own real start).
func TestAlertsGateWaitsForARestartedAlertmanager(t *testing.T) {
	dir := t.TempDir()
	config := "route:\n  receiver: nobody\nreceivers:\n  - name: nobody\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "alertmanager.yml"), []byte(config), 0o644))
	url := startLoopback(t, "alertmanager", dir, func(addr string) []string {
		return []string{"--config.file=" + filepath.Join(dir, "alertmanager.yml"), "--storage.path=" + filepath.Join(dir, "data"),
			"--web.listen-address=" + addr,
			// No gossip: its cluster port would listen on every address.
			"--cluster.listen-address="}
	})
	before := time.Now()
	// What Prometheus sends: one firing alert the gate counts, one it does
	// not (another severity).
	now := time.Now().UTC().Format(time.RFC3339)
	body := fmt.Sprintf(`[{"labels":{"alertname":"LullAMAlert","severity":"page"},"startsAt":%q},`+
		`{"labels":{"alertname":"LullAMInfo","severity":"info"},"startsAt":%q}]`, now, now)
	require.Eventually(t, func() bool {
		resp, err := http.Post(url+"/api/v2/alerts", "application/json", bytes.NewBufferString(body))
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 100*time.Millisecond, "Alertmanager takes alerts at %s", url)

	clk := clocktesting.NewFakePassiveClock(time.Now())
	c := &alerts.Client{URL: url, API: alerts.Alertmanager, Clock: clk}
	f, err := alerts.ParseFilter([]string{`severity="page"`}, nil, true)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	// Just started: it may not hold every firing alert yet, though it
	// holds this one.
	_, err = c.Firing(ctx, f)
	require.Error(t, err)
	require.True(t, errors.Is(err, alerts.ErrIncomplete), "%v", err)
	require.Contains(t, err.Error(), "Alertmanager started at")

	// Past the resend wait after its start: complete, and the gate's
	// matcher picks the alert that counts.
	clk.SetTime(before.Add(alerts.AlertmanagerResendWait + time.Second))
	got, err := c.Firing(ctx, f)
	require.NoError(t, err)
	require.Len(t, got, 1, "%+v", got)
	require.Equal(t, "LullAMAlert", got[0].Name)
}

// startAlertmanager runs the real Alertmanager on loopback, without
// gossip, and returns its URL.
func startAlertmanager(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	config := "route:\n  receiver: nobody\nreceivers:\n  - name: nobody\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "alertmanager.yml"), []byte(config), 0o644))
	return startLoopback(t, "alertmanager", dir, func(addr string) []string {
		return []string{"--config.file=" + filepath.Join(dir, "alertmanager.yml"), "--storage.path=" + filepath.Join(dir, "data"),
			"--web.listen-address=" + addr, "--cluster.listen-address="}
	})
}

// postAlerts posts alerts to Alertmanager as Prometheus would.
func postAlerts(t *testing.T, url, body string) {
	t.Helper()
	require.Eventually(t, func() bool {
		resp, err := http.Post(url+"/api/v2/alerts", "application/json", bytes.NewBufferString(body))
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 100*time.Millisecond, "Alertmanager takes alerts at %s", url)
}

// lull's silences in the real Alertmanager: one put is active with the
// node's matcher; put again with its ID, start and matchers it is
// extended in place (the ID kept, as lull's extension relies on); expired,
// it reads expired; an ID Alertmanager never made is ErrSilenceNotFound.
// The alerts gate asking Alertmanager counts an alert lull's silence alone
// silences (the window ignores it only while lull holds the node down)
// and not one someone else silenced.
func TestSilencesInARealAlertmanager(t *testing.T) {
	url := startAlertmanager(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	now := time.Now().UTC().Format(time.RFC3339)
	postAlerts(t, url, fmt.Sprintf(`[{"labels":{"alertname":"NodeDown","node":"n1","severity":"page"},"startsAt":%q},`+
		`{"labels":{"alertname":"NodeDown","node":"n2","severity":"page"},"startsAt":%q},`+
		`{"labels":{"alertname":"NodeDown","node":"n3","severity":"page"},"startsAt":%q}]`, now, now, now))

	c := &alerts.Client{URL: url, API: alerts.Alertmanager}
	ms, err := alerts.SilenceMatchers([]string{`node="$(NODE_NAME)"`}, "n1", "$(NODE_NAME)")
	require.NoError(t, err)
	start := time.Now()
	id, err := c.PutSilence(ctx, alerts.Silence{Matchers: ms, StartsAt: start, EndsAt: start.Add(10 * time.Minute),
		CreatedBy: alerts.SilenceAuthor, Comment: "lull takes node n1 down"})
	require.NoError(t, err)
	got, err := c.GetSilence(ctx, id)
	require.NoError(t, err)
	require.True(t, got.Active(), "state %s", got.State)
	require.Equal(t, alerts.SilenceAuthor, got.CreatedBy)
	require.Len(t, got.Matchers, 1)
	require.Equal(t, `node="n1"`, got.Matchers[0].String())

	// Extended in place.
	ends := time.Now().Add(20 * time.Minute)
	again, err := c.PutSilence(ctx, alerts.Silence{ID: id, Matchers: ms, StartsAt: got.StartsAt, EndsAt: ends,
		CreatedBy: alerts.SilenceAuthor, Comment: got.Comment})
	require.NoError(t, err)
	require.Equal(t, id, again, "extended in place")
	got, err = c.GetSilence(ctx, id)
	require.NoError(t, err)
	require.WithinDuration(t, ends, got.EndsAt, time.Second)

	// Someone else silences n2.
	other, err := alerts.SilenceMatchers([]string{`node="$(NODE_NAME)"`}, "n2", "$(NODE_NAME)")
	require.NoError(t, err)
	_, err = c.PutSilence(ctx, alerts.Silence{Matchers: other, StartsAt: start, EndsAt: start.Add(time.Hour), CreatedBy: "alice", Comment: "known"})
	require.NoError(t, err)

	// Past Alertmanager's young-server wait, the gate's answer: n1 (lull's
	// silence alone) and n3 count, n2 (someone's silence) does not.
	clk := clocktesting.NewFakePassiveClock(time.Now().Add(alerts.AlertmanagerResendWait + time.Minute))
	gateClient := &alerts.Client{URL: url, API: alerts.Alertmanager, Clock: clk}
	f, err := alerts.ParseFilter([]string{`alertname="NodeDown"`}, nil, true)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		firing, err := gateClient.Firing(ctx, f)
		if err != nil {
			t.Logf("asking: %v", err)
			return false
		}
		var nodes []string
		for _, a := range firing {
			nodes = append(nodes, a.Labels["node"])
		}
		t.Logf("counted: %v", nodes)
		return fmt.Sprint(nodes) == "[n1 n3]"
	}, 20*time.Second, 500*time.Millisecond, "the gate counts n1 (lull's silence alone) and n3, not n2 (someone's silence)")

	// Expired: it reads expired.
	require.NoError(t, c.ExpireSilence(ctx, id))
	got, err = c.GetSilence(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "expired", got.State)
	require.NoError(t, c.ExpireSilence(ctx, id), "expiring again is no error")

	_, err = c.GetSilence(ctx, "00000000-0000-0000-0000-000000000000")
	require.ErrorIs(t, err, alerts.ErrSilenceNotFound)
}
