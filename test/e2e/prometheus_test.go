package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

	"lull.dev/lull/test/framework"
)

// prometheusNodeIP is the local cluster's bridge address (lull0,
// hack/lib/node.sh NODE_IP): pods on the cluster's real nodes reach it.
const prometheusNodeIP = "10.244.0.1"

// prometheusAlert is the alert rule the tests set off by hand.
const prometheusAlert = "LullE2EAlert"

// prometheusNodeDownAlert fires for a node the test's nodesDown reports
// down (promOptions).
const prometheusNodeDownAlert = "LullE2ENodeDown"

// prometheus is a real Prometheus the test runs: it scrapes a gauge the
// test sets and evaluates one alert rule on it every second.
type prometheus struct {
	// URL is Prometheus's HTTP API, http://ADDRESS:PORT.
	URL string
	// MetricsURL is the /metrics endpoint it scrapes (served by the test).
	MetricsURL string

	gauge atomic.Bool
	stop  func() // stops Prometheus (once; also at the test's end)
	// How it runs, to start it again (restart).
	bin, dir, addr, logFile string
}

// startPrometheus starts _output/bin/prometheus (hack/build-binaries.sh) on
// a free port of the bridge address 10.244.0.1, with its data under
// t.TempDir(); it scrapes a /metrics endpoint the test serves on the same
// address (the gauge lull_e2e_alert) and evaluates the alert LullE2EAlert
// (lull_e2e_alert > 0, for 0s, severity="page") every second. It returns
// once /-/ready answers 200 and the endpoint has been scraped (bounded: 60
// s; a failure prints the tail of Prometheus's log); t.Cleanup stops
// Prometheus (SIGTERM, SIGKILL after 10 s) and the metrics server.
//
// The package's own cluster has simulated nodes only (UpCluster without
// LULL_REAL_NODE=1), so lull0 exists only while a real-node cluster is up:
// without the address on this machine both listen on 127.0.0.1 instead,
// where lull's host processes (the development mode) reach them just as
// well. Nothing listens on a wildcard address.
func startPrometheus(t *testing.T) *prometheus {
	t.Helper()
	return startPrometheusFor(t, 0)
}

// startPrometheusFor is startPrometheus with the alert's for: set to
// pending: it fires only once lull_e2e_alert has been 1 that long.
func startPrometheusFor(t *testing.T, pending time.Duration) *prometheus {
	t.Helper()
	return startPrometheusWith(t, promOptions{pending: pending})
}

// promOptions are what a test's Prometheus does beyond the one alert.
type promOptions struct {
	// pending is LullE2EAlert's for:.
	pending time.Duration
	// alertmanager (host:port) is where Prometheus sends its alerts; none:
	// nowhere.
	alertmanager string
	// nodesDown, when set, is asked at every scrape which nodes are down:
	// each is a series lull_e2e_node_down{node="..."} 1 (0 for those
	// it lists false), which fires LullE2ENodeDown (severity node) as
	// kube-state-metrics' node readiness fires KubeNodeNotReady.
	nodesDown func() map[string]bool
}

// startPrometheusWith is startPrometheus as o says.
func startPrometheusWith(t *testing.T, o promOptions) *prometheus {
	t.Helper()
	pending := o.pending
	bin := filepath.Join(framework.BinDir(), "prometheus")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s not found: run 'make binaries' (hack/build-binaries.sh prometheus builds it): %v", bin, err)
	}
	host := prometheusNodeIP
	if !localAddress(t, host) {
		t.Logf("prometheus: %s (lull0) is not on this machine (no real-node cluster up); listening on 127.0.0.1 instead", host)
		host = "127.0.0.1"
	}
	dir := t.TempDir() // created before the cleanups below: removed after them

	p := &prometheus{}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	require.NoError(t, err, "metrics endpoint for prometheus")
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		v := 0
		if p.gauge.Load() {
			v = 1
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		fmt.Fprintf(w, "# HELP lull_e2e_alert Set by the e2e test: 1 fires %s.\n# TYPE lull_e2e_alert gauge\nlull_e2e_alert %d\n", prometheusAlert, v)
		if o.nodesDown != nil {
			fmt.Fprintf(w, "# HELP lull_e2e_node_down Set by the e2e test: 1 for a node that is down.\n# TYPE lull_e2e_node_down gauge\n")
			for node, down := range o.nodesDown() {
				d := 0
				if down {
					d = 1
				}
				fmt.Fprintf(w, "lull_e2e_node_down{node=%q} %d\n", node, d)
			}
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	p.MetricsURL = "http://" + ln.Addr().String() + "/metrics"

	rules := fmt.Sprintf(`groups:
  - name: lull-e2e
    interval: 1s
    rules:
      - alert: %s
        expr: lull_e2e_alert > 0
        for: %s
        labels:
          severity: page
      - alert: %s
        expr: lull_e2e_node_down > 0
        labels:
          severity: node
`, prometheusAlert, model(pending), prometheusNodeDownAlert)
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: lull-e2e
    static_configs:
      - targets: [%q]
`, filepath.Join(dir, "rules.yml"), ln.Addr().String())
	if o.alertmanager != "" {
		config += fmt.Sprintf(`alerting:
  alertmanagers:
    - static_configs:
        - targets: [%q]
`, o.alertmanager)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rules.yml"), []byte(rules), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644))

	// Prometheus binds its own port: take a free one and hand it over; if
	// another process takes it in between, try another.
	logFile := filepath.Join(dir, "prometheus.log")
	for attempt := 1; ; attempt++ {
		port, err := freeTCPPort(host)
		require.NoError(t, err)
		addr := net.JoinHostPort(host, fmt.Sprint(port))
		p.URL = "http://" + addr
		p.bin, p.dir, p.addr, p.logFile = bin, dir, addr, logFile
		if err = p.launch(t); err == nil {
			t.Logf("prometheus: ready at %s, scraping %s (data and log in %s)", p.URL, p.MetricsURL, dir)
			return p
		}
		log := logTail(logFile, 30)
		if errors.Is(err, errExited) && strings.Contains(log, "address already in use") && attempt < 3 {
			t.Logf("prometheus: %s was taken meanwhile; trying another port", addr)
			continue
		}
		t.Fatalf("prometheus at %s: %v; last lines of %s:\n%s", p.URL, err, logFile, log)
	}
}

// runPrometheus starts one Prometheus process and registers its stop in
// t.Cleanup; the returned channel closes when it exits, and the returned
// function stops it (SIGTERM, SIGKILL after 10 s) once.
func runPrometheus(t *testing.T, bin, dir, addr, logFile string) (<-chan struct{}, func(), error) {
	logF, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	defer logF.Close()
	cmd := exec.Command(bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--storage.tsdb.retention.time=1h",
		"--web.listen-address="+addr,
		// Apply the scrape targets 1 s after start, not 5 s (a hidden flag).
		"--scrape.discovery-reload-interval=1s",
		// Nothing else: offline as configured (no remote write or read; an
		// Alertmanager only when the test runs one), no admin or lifecycle
		// endpoints.
	)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logF, logF
	// Never outlive the test binary, even if it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				t.Logf("prometheus: no exit 10 s after SIGTERM; killing it")
				_ = cmd.Process.Kill()
				<-exited
			}
		})
	}
	t.Cleanup(stop)
	return exited, stop, nil
}

var errExited = errors.New("prometheus exited before it was ready")

// waitFor asks check every 200 ms until it is done, the process exits, or
// the deadline passes; the error says what the last look saw.
func waitFor(what string, exited <-chan struct{}, deadline time.Time, check func(*http.Client) (bool, string)) error {
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		done, seen := check(client)
		if done {
			return nil
		}
		select {
		case <-exited:
			return errExited
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s in time (last: %s)", what, seen)
		}
	}
}

// waitReady polls url until it answers 200.
func waitReady(url string, exited <-chan struct{}, deadline time.Time) error {
	return waitFor(url+" did not answer 200", exited, deadline, func(client *http.Client) (bool, string) {
		resp, err := client.Get(url)
		if err != nil {
			return false, err.Error()
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

// waitScraped polls /api/v1/targets until the metrics endpoint's target is
// up.
func (p *prometheus) waitScraped(exited <-chan struct{}, deadline time.Time) error {
	return waitFor(p.MetricsURL+" was not scraped", exited, deadline, func(client *http.Client) (bool, string) {
		resp, err := client.Get(p.URL + "/api/v1/targets?state=active")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var ans struct {
			Data struct {
				ActiveTargets []struct {
					ScrapeURL string `json:"scrapeUrl"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"activeTargets"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
			return false, err.Error()
		}
		for _, tg := range ans.Data.ActiveTargets {
			if tg.ScrapeURL == p.MetricsURL {
				return tg.Health == "up", fmt.Sprintf("target %s: health %q, last error %q", tg.ScrapeURL, tg.Health, tg.LastError)
			}
		}
		return false, "target not discovered yet"
	})
}

// restart stops Prometheus and starts it again at the same address with
// an empty store, as a pod with an emptyDir rescheduled (the drain of a
// wave's previous node does exactly that): its alerts' for: state is
// gone. It returns once the new one is ready and has scraped the gauge.
func (p *prometheus) restart(t *testing.T) {
	t.Helper()
	p.stop()
	require.NoError(t, os.RemoveAll(filepath.Join(p.dir, "data")))
	for attempt := 1; ; attempt++ {
		err := p.launch(t)
		if err == nil {
			return
		}
		if errors.Is(err, errExited) && strings.Contains(logTail(p.logFile, 30), "address already in use") && attempt < 5 {
			time.Sleep(time.Second) // the old process's socket, going
			continue
		}
		t.Fatalf("prometheus restarted at %s: %v; last lines of %s:\n%s", p.URL, err, p.logFile, logTail(p.logFile, 30))
	}
}

// launch runs Prometheus as p says (p.stop stops it) and waits, bounded
// (60 s), until it is ready and has scraped the gauge: ready is not yet
// scraping, and waiting for the first good scrape makes fire's latency
// the steady state's and a scrape that fails say so here.
func (p *prometheus) launch(t *testing.T) error {
	t.Helper()
	exited, stop, err := runPrometheus(t, p.bin, p.dir, p.addr, p.logFile)
	require.NoError(t, err)
	p.stop = stop
	deadline := time.Now().Add(60 * time.Second)
	if err := waitReady(p.URL+"/-/ready", exited, deadline); err != nil {
		return err
	}
	return p.waitScraped(exited, deadline)
}

// model is d as a Prometheus duration (whole seconds).
func model(d time.Duration) string { return fmt.Sprintf("%ds", int(d.Seconds())) }

// fire sets the gauge (1 fires the alert, 0 clears it).
func (p *prometheus) fire(on bool) { p.gauge.Store(on) }

// waitAlert waits (bounded) until GET URL/api/v1/alerts shows LullE2EAlert
// firing (on) or absent (off).
func (p *prometheus) waitAlert(t *testing.T, on bool, timeout time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	var last string
	for {
		state, body, err := p.alertState(client)
		switch {
		case err != nil:
			last = err.Error()
		case on && state == "firing", !on && state == "":
			return
		default:
			last = body
		}
		if time.Now().After(deadline) {
			want := "firing"
			if !on {
				want = "absent"
			}
			t.Fatalf("prometheus: %s not %s within %s; last /api/v1/alerts: %s", prometheusAlert, want, timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// alertState returns LullE2EAlert's state in /api/v1/alerts ("" when it
// is not there) and the answer's body.
func (p *prometheus) alertState(client *http.Client) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/api/v1/alerts", nil)
	if err != nil {
		return "", "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", string(b), fmt.Errorf("%s: %s", resp.Status, b)
	}
	var ans struct {
		Status string `json:"status"`
		Data   struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &ans); err != nil {
		return "", string(b), fmt.Errorf("decoding /api/v1/alerts: %w: %s", err, b)
	}
	if ans.Status != "success" {
		return "", string(b), fmt.Errorf("/api/v1/alerts: status %q: %s", ans.Status, b)
	}
	for _, a := range ans.Data.Alerts {
		if a.Labels["alertname"] == prometheusAlert {
			return a.State, string(b), nil
		}
	}
	return "", string(b), nil
}

// localAddress says whether ip is assigned to an interface of this machine.
func localAddress(t *testing.T, ip string) bool {
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.String() == ip {
			return true
		}
	}
	return false
}

// freeTCPPort returns a port on host nobody listens on right now.
func freeTCPPort(host string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// logTail returns the last n lines of a file.
func logTail(file string, n int) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestRealPrometheusAlertFiresAndClears: a real Prometheus (the pinned
// build) scraping a gauge the test sets fires LullE2EAlert when the gauge is
// 1 and drops it when it is 0 again — what the tests that gate maintenance
// on alerts rely on.
func TestRealPrometheusAlertFiresAndClears(t *testing.T) {
	p := startPrometheus(t)
	p.waitAlert(t, false, 10*time.Second)

	start := time.Now()
	p.fire(true)
	p.waitAlert(t, true, 30*time.Second)
	t.Logf("%s firing %s after the gauge was set to 1", prometheusAlert, time.Since(start).Round(10*time.Millisecond))

	start = time.Now()
	p.fire(false)
	p.waitAlert(t, false, 30*time.Second)
	t.Logf("%s gone %s after the gauge was set to 0", prometheusAlert, time.Since(start).Round(10*time.Millisecond))
}
