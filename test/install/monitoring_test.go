package install

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	"lull.dev/lull/agent"
	"lull.dev/lull/drainer/maintenance"
	"lull.dev/lull/drainer/windowcontroller"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/test/framework"
)

func monitoringFile(t *testing.T, name string) []byte {
	t.Helper()
	return readFile(t, filepath.Join(framework.RepoRoot(), "manifests", "monitoring", name))
}

// The alert rules are valid and do what their unit tests say
// (manifests/monitoring/rules_test.yaml), with promtool of the pinned
// Prometheus.
func TestAlertRules(t *testing.T) {
	promtool := bin(t, "promtool")
	dir := filepath.Join(framework.RepoRoot(), "manifests", "monitoring")
	t.Log(run(t, nil, promtool, "check", "rules", filepath.Join(dir, "rules.yaml")))
	out, err := runErr(nil, "/bin/sh", "-c", "cd "+dir+" && "+promtool+" test rules rules_test.yaml")
	if err != nil {
		t.Fatalf("promtool test rules: %v", err)
	}
	t.Log(out)
}

// exported names every metric lull's components export: lull-drainer's
// request and window metrics and lull-agent's (histograms with their
// _bucket, _sum and _count series).
func exported(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := maintenance.NewMetrics(fake.NewClientBuilder().WithScheme(lullscheme.New()).Build())
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	a := agent.NewMetrics(reg)
	// A vector shows in a scrape once it has a child.
	m.Evictions.WithLabelValues("evicted").Inc()
	m.Decisions.WithLabelValues("Drain", "default/kernel-update").Inc()
	a.Actions.WithLabelValues("Reboot", "Succeeded").Inc()
	a.Duration.WithLabelValues("Reboot").Observe(1)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range fams {
		names[f.GetName()] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[f.GetName()+s] = true
			}
		}
	}
	// Scrape-time gauges that say nothing until there is something to
	// say (no window, no request yet) are described instead.
	descs := make(chan *prometheus.Desc, 100)
	m.Describe(descs)
	windowcontroller.NewCollector(clock.RealClock{}).Describe(descs)
	close(descs)
	fq := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range descs {
		if sub := fq.FindStringSubmatch(d.String()); sub != nil {
			names[sub[1]] = true
		}
	}
	return names
}

var lullMetric = regexp.MustCompile(`\blull_[a-z_]+\b`)

// unknownMetrics lists the lull_ metrics the expressions name that no
// component exports.
func unknownMetrics(t *testing.T, exprs []string) []string {
	t.Helper()
	known := exported(t)
	var out []string
	for _, e := range exprs {
		for _, m := range lullMetric.FindAllString(e, -1) {
			if !known[m] && !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Every metric the alert rules and the dashboard query is one lull
// exports, so neither silently shows nothing after a rename.
func TestMonitoringQueriesExportedMetrics(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(monitoringFile(t, "rules.yaml"), &rules); err != nil {
		t.Fatal(err)
	}
	var ruleExprs []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			ruleExprs = append(ruleExprs, r.Expr)
			if !strings.Contains(string(readFile(t, filepath.Join(framework.RepoRoot(), "docs", "operations.md"))), "#### "+r.Alert) {
				t.Errorf("alert %s has no runbook (a heading '#### %s' in docs/operations.md)", r.Alert, r.Alert)
			}
		}
	}
	if len(ruleExprs) < 10 {
		t.Fatalf("only %d rules read", len(ruleExprs))
	}
	if bad := unknownMetrics(t, ruleExprs); len(bad) > 0 {
		t.Errorf("rules.yaml queries metrics lull does not export: %v", bad)
	}

	var dash struct {
		Panels []struct {
			Title   string
			Type    string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(monitoringFile(t, "dashboard.json"), &dash); err != nil {
		t.Fatal(err)
	}
	var dashExprs []string
	for _, p := range dash.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			dashExprs = append(dashExprs, tg.Expr)
		}
	}
	if bad := unknownMetrics(t, dashExprs); len(bad) > 0 {
		t.Errorf("dashboard.json queries metrics lull does not export: %v", bad)
	}
	// The fleet view the issue asks for: requests by phase, waiting
	// reasons, budgets, drains and their blockers, agent steps.
	for _, m := range []string{"lull_maintenance_nodes", "lull_window_nodes_disrupting", "lull_window_max_unavailable",
		"lull_maintenance_disrupting_seconds", "lull_maintenance_blocked_pods", "lull_agent_actions_total", "lull_window_gate_holding"} {
		if !strings.Contains(strings.Join(dashExprs, "\n"), m) {
			t.Errorf("the dashboard shows no %s", m)
		}
	}
	// The check can fail.
	if bad := unknownMetrics(t, []string{"sum(lull_no_such_metric)"}); len(bad) != 1 {
		t.Errorf("an unknown metric went unnoticed: %v", bad)
	}
}

// The chart installs the rules, the dashboard and a PodMonitor when asked
// (and nothing of them by default), with the files' content.
func TestChartMonitoring(t *testing.T) {
	for k := range renderHelm(t) {
		if strings.Contains(k, "PrometheusRule") || strings.Contains(k, "PodMonitor") || strings.HasSuffix(k, "/lull-dashboard") {
			t.Errorf("rendered by default: %s", k)
		}
	}
	h := renderHelm(t, "--set", "monitoring.prometheusRule.enabled=true,monitoring.dashboard.enabled=true,monitoring.podMonitor.enabled=true",
		"--set", "monitoring.prometheusRule.labels.release=kube-prometheus")
	rule := h["monitoring.coreos.com/v1/PrometheusRule/lull-system/lull"]
	if rule == nil {
		t.Fatalf("no PrometheusRule rendered; got %v", keys(h))
	}
	var want map[string]any
	if err := yaml.Unmarshal(monitoringFile(t, "rules.yaml"), &want); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, rule["spec"]); diff != "" {
		t.Errorf("the PrometheusRule's spec is not rules.yaml (-file +chart):\n%s", diff)
	}
	if got := get(t, rule, "metadata", "labels", "release"); got != "kube-prometheus" {
		t.Errorf("PrometheusRule label release = %v", got)
	}
	cm := h["v1/ConfigMap/lull-system/lull-dashboard"]
	if cm == nil {
		t.Fatal("no dashboard ConfigMap rendered")
	}
	if got := get(t, cm, "data", "lull-fleet.json"); strings.TrimSpace(got.(string)) != strings.TrimSpace(string(monitoringFile(t, "dashboard.json"))) {
		t.Error("the dashboard ConfigMap does not hold dashboard.json")
	}
	if got := get(t, cm, "metadata", "labels", "grafana_dashboard"); got != "1" {
		t.Errorf("dashboard label grafana_dashboard = %v", got)
	}
	if h["monitoring.coreos.com/v1/PodMonitor/lull-system/lull"] == nil {
		t.Error("no PodMonitor rendered")
	}
}
