package integration

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
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"lull.dev/lull/drainer/alerts"
	"lull.dev/lull/test/framework"
)

// youngRules are the rules of the Prometheus that TestAlertsGateWaitsFor
// ARestartedPrometheus starts: LullYoungAlert always fires after its 30s
// for:, evaluated every second; LullSlowAlert (severity info, for: 10m,
// in a group evaluated every 2s beside a recording rule) is one the
// gate's matcher cannot count, so it must not make the gate wait 10m.
const youngRules = `groups:
  - name: lull-young
    interval: 1s
    rules:
      - alert: LullYoungAlert
        expr: vector(1)
        for: 30s
        labels:
          severity: page
  - name: lull-slow
    interval: 2s
    rules:
      - record: lull:one
        expr: vector(1)
      - alert: LullSlowAlert
        expr: lull:one > 0
        for: 10m
        labels:
          severity: info
`

// A Prometheus that has just started (an empty store, as an emptyDir
// gives after a reschedule) reports LullYoungAlert pending, or not at
// all, for 30s although it always fires: the alerts gate must not take
// that for quiet. Right after the start the gate's answer is incomplete
// (Unknown, naming the start and when its rules are evaluated again),
// also while Prometheus itself reports the alert pending; once the rules
// have been evaluated for the intervals and the for:, the gate reports the
// alert firing — and never in between an answer that nothing fires. The
// real binary's /api/v1/status/runtimeinfo and /api/v1/rules are what
// the client reads.
func TestAlertsGateWaitsForARestartedPrometheus(t *testing.T) {
	url := startRulesPrometheus(t, youngRules)
	started := time.Now()
	c := &alerts.Client{URL: url}
	f, err := alerts.ParseFilter([]string{`severity="page"`}, nil, true)
	require.NoError(t, err)

	var incomplete, incompleteWhilePending int
	var lastErr error
	for {
		require.Less(t, time.Since(started), 90*time.Second, "no complete answer within 90s; last error: %v", lastErr)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		got, err := c.Firing(ctx, f)
		cancel()
		// What Prometheus itself says, asked after the gate.
		state := youngAlertState(t, url)
		switch {
		case err == nil:
			require.NotEmpty(t, got, "%s after the start the gate's answer is that nothing fires, and Prometheus reports LullYoungAlert %q", time.Since(started), state)
			require.Equal(t, "LullYoungAlert", got[0].Name)
			require.Equal(t, "firing", got[0].State)
			require.Greater(t, incomplete, 0, "an incomplete answer came first")
			require.Greater(t, incompleteWhilePending, 0, "the gate held while Prometheus reported the alert pending")
			// 30s for:, then 1s + 2s + 2×1s of intervals; far less than
			// LullSlowAlert's 10m.
			require.GreaterOrEqual(t, time.Since(started), 30*time.Second)
			require.Less(t, time.Since(started), 60*time.Second)
			t.Logf("complete %s after the start: %s; %d incomplete answers before (%d while Prometheus reported it pending); the last: %v",
				time.Since(started).Round(time.Second), alerts.Summary(got, 5), incomplete, incompleteWhilePending, lastErr)
			return
		case errors.Is(err, alerts.ErrIncomplete):
			incomplete++
			if state == "pending" {
				incompleteWhilePending++
			}
			require.Contains(t, err.Error(), "Prometheus started at ")
			lastErr = err
		default:
			// Not serving its API yet (connection refused, 503 while the
			// store opens): only before the first incomplete answer.
			require.Zero(t, incomplete, "after an incomplete answer: %v", err)
			lastErr = err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// youngAlertState is LullYoungAlert's state in Prometheus' own
// /api/v1/alerts: "pending", "firing", or "" (absent, or no answer).
func youngAlertState(t *testing.T, url string) string {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/v1/alerts", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var answer struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&answer) != nil {
		return ""
	}
	for _, a := range answer.Data.Alerts {
		if a.Labels["alertname"] == "LullYoungAlert" {
			return a.State
		}
	}
	return ""
}

// startRulesPrometheus starts _output/bin/prometheus (hack/build-binaries.sh
// prometheus) on a free port of 127.0.0.1 with its store in t.TempDir(),
// evaluating rules (every second unless a group says otherwise) and
// scraping nothing; it returns its URL at once, without waiting for it to
// be ready. t.Cleanup stops it (SIGTERM, SIGKILL after 10s); a failure
// to start prints the tail of its log.
func startRulesPrometheus(t *testing.T, rules string) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rules.yml"), []byte(rules), 0o644))
	config := fmt.Sprintf("global:\n  evaluation_interval: 1s\nrule_files:\n  - %q\n", filepath.Join(dir, "rules.yml"))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644))
	return startLoopback(t, "prometheus", dir, func(addr string) []string {
		return []string{"--config.file=" + filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path=" + filepath.Join(dir, "data"), "--web.listen-address=" + addr}
	})
}

// startLoopback starts the binary name (from the binaries directory:
// hack/build-binaries.sh builds it) in dir with args(addr), addr a free
// port of 127.0.0.1 it is to listen on; it returns http://addr once
// something listens there, without waiting for the server to be ready.
// t.Cleanup stops it (SIGTERM, SIGKILL after 10s); a failure to start
// prints the tail of its log (dir/<name>.log).
func startLoopback(t *testing.T, name, dir string, args func(addr string) []string) string {
	t.Helper()
	bin := filepath.Join(framework.BinDir(), name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s not found: run 'make binaries' (hack/build-binaries.sh %s builds it): %v", bin, name, err)
	}
	logFile := filepath.Join(dir, name+".log")
	for attempt := 1; ; attempt++ {
		// The server binds its own port: take a free one and hand it
		// over; if another process takes it meanwhile, try another.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())

		logF, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		require.NoError(t, err)
		cmd := exec.Command(bin, args(addr)...)
		cmd.Dir = dir
		cmd.Stdout, cmd.Stderr = logF, logF
		// Never outlive the test binary, even if it is killed.
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

		// Listening (or gone) within a few seconds.
		gone := errors.New(name + " exited")
		err = errors.New("not listening")
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			select {
			case <-exited:
				err = gone
			default:
				var conn net.Conn
				if conn, err = net.DialTimeout("tcp", addr, time.Second); err == nil {
					_ = conn.Close()
				}
			}
			if err == nil || errors.Is(err, gone) {
				break
			}
		}
		if err == nil {
			t.Logf("%s: listening at http://%s (data and log in %s)", name, addr, dir)
			return "http://" + addr
		}
		log, _ := os.ReadFile(logFile)
		if strings.Contains(string(log), "address already in use") && attempt < 3 {
			continue
		}
		t.Fatalf("%s at %s: %v; its log:\n%s", name, addr, err, tail(string(log), 30))
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
