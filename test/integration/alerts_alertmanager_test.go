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

	"lull.dev/lull/pkg/alerts"
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
