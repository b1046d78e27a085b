package install

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lull.dev/lull/test/framework"
)

// The chart's values.schema.json refuses, at helm install, upgrade, lint
// and template, what would otherwise install a broken or unsafe lull: a
// misspelt key the chart would silently ignore (the default then applies),
// a setting the components refuse at start (a crash loop after the
// install), a value that would end a YAML line in a template. Each
// refusal names the value to fix.
func TestChartValuesSchemaRefuses(t *testing.T) {
	chart := filepath.Join(framework.RepoRoot(), "charts", "lull")
	for _, c := range []struct {
		name   string
		values string
		want   []string // in the refusal
	}{
		{"a misspelt top-level key", "namepsace: ops\n", []string{"namepsace"}},
		{"a misspelt nested key", "drainer:\n  replica: 3\n", []string{"replica"}},
		{"nodesWithoutWindow not one of the two", "nodesWithoutWindow: permissive\n", []string{"nodesWithoutWindow", "Permissive"}},
		{"defaultMaxUnavailable 0", "defaultMaxUnavailable: 0\n", []string{"defaultMaxUnavailable"}},
		{"defaultMaxUnavailable a word", "defaultMaxUnavailable: one\n", []string{"defaultMaxUnavailable"}},
		{"windowHorizon not a Go duration", "windowHorizon: 10 days\n", []string{"windowHorizon"}},
		{"a duration given as a number", "drainer:\n  uninstallHook:\n    timeout: 240\n", []string{"timeout"}},
		{"the sentinel's period", "agent:\n  rebootSentinel:\n    period: 1 minute\n", []string{"period"}},
		{"the sentinel's class not a label value", "agent:\n  rebootSentinel:\n    class: reboot required\n", []string{"class"}},
		{"a pull policy in the wrong case", "drainer:\n  image:\n    pullPolicy: always\n", []string{"pullPolicy"}},
		{"an image repository with a space", "scheduler:\n  image:\n    repository: \"registry.example/lull scheduler\"\n", []string{"repository"}},
		{"agent maxUnavailable not a count or a percentage", "agent:\n  maxUnavailable: ten\n", []string{"maxUnavailable"}},
		{"the emergency percentage above 100", "admission:\n  maxUnavailablePercent: 150\n", []string{"maxUnavailablePercent"}},
		{"the emergency count a string", "admission:\n  maxUnavailableCount: \"ten\"\n", []string{"maxUnavailableCount"}},
		{"a host command over two lines", "agent:\n  commands:\n    reboot: \"systemctl reboot\\nrm -rf /\"\n", []string{"reboot"}},
		{"a writable path not absolute", "admission:\n  writablePaths: [etc/chrony.conf]\n", []string{"writablePaths"}},
		{"a Cluster named without its namespace", "drainer:\n  clusterAPI:\n    cluster: workload-1\n", []string{"cluster"}},
		{"a node selector value not a string", "drainer:\n  nodeSelector:\n    dedicated: true\n", []string{"dedicated"}},
		{"a scheduler name with capitals", "scheduler:\n  schedulerName: Night-Shift\n", []string{"schedulerName"}},
		{"a log level that is no level", "scheduler:\n  logLevel: debug\n", []string{"logLevel"}},
		{"the toleration key not a label key", "tolerationKey: \"lull dev/disruption\"\n", []string{"tolerationKey"}},
		{"monitoring labels not strings", "monitoring:\n  prometheusRule:\n    labels:\n      release: 1\n", []string{"release"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(f, []byte(c.values), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := runErr(nil, bin(t, "helm"), "template", "lull", chart, "--values", f)
			if err == nil {
				t.Fatalf("values\n%s\nrendered, want a refusal:\n%.300s", c.values, out)
			}
			msg := err.Error()
			if !strings.Contains(msg, "schema") {
				t.Errorf("values\n%s\nrefused, but not by the values' schema:\n%s", c.values, msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("values\n%s\nrefused without naming %q:\n%s", c.values, w, msg)
				}
			}
		})
	}
}

// What the schema must let through: the values the docs and tests use,
// one drainer or scheduler without leader election, percentages and
// counts, null to remove a default, Helm's global values.
func TestChartValuesSchemaAccepts(t *testing.T) {
	for _, set := range [][]string{
		{"--set", "drainer.leaderElection=false,drainer.replicas=1,scheduler.leaderElection=false,scheduler.replicas=1"},
		{"--set", "drainer.affinity=null", "--set", "drainer.podDisruptionBudget.maxUnavailable=50%"},
		{"--set", "agent.maxUnavailable=3", "--set", "agent.commands.reboot=", "--set", "agent.commands.restart=echo restarted $LULL_UNIT"},
		{"--set", "agent.rebootSentinel.enabled=true,agent.rebootSentinel.period=90s,agent.rebootSentinel.file="},
		{"--set", "drainer.clusterAPI.managementKubeconfigSecret=mgmt,drainer.clusterAPI.cluster=fleet/workload-1"},
		{"--set", "windowHorizon=8760h,scheduler.horizon=1h30m,drainer.uninstallHook.timeout=45s"},
		{"--set", "global.imageRegistry=registry.example"},
		{"--set", "monitoring.dashboard.enabled=true,monitoring.dashboard.namespace=grafana", "--set-string", "monitoring.dashboard.labels.grafana_dashboard=1"},
		{"--set", "scheduler.nodeSelector.kubernetes\\.io/hostname=node-1", "--set", "scheduler.tolerations[0].key=dedicated", "--set", "scheduler.tolerations[0].operator=Exists"},
		{"--set", "drainer.resources.limits.memory=256Mi"},
	} {
		renderHelm(t, set...)
	}
}

// More than one replica without leader election: every lull-drainer
// replica would reconcile the same requests, every lull-scheduler replica
// bind the same pods. The chart refuses it and says what to set.
func TestChartRefusesReplicasWithoutLeaderElection(t *testing.T) {
	chart := filepath.Join(framework.RepoRoot(), "charts", "lull")
	for _, c := range []struct{ set, want string }{
		{"drainer.leaderElection=false", "drainer.replicas=2 with drainer.leaderElection=false"},
		{"scheduler.leaderElection=false,scheduler.replicas=3", "scheduler.replicas=3 with scheduler.leaderElection=false"},
	} {
		out, err := runErr(nil, bin(t, "helm"), "template", "lull", chart, "--set", c.set)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "leaderElection=true") {
			t.Errorf("--set %s: rendered (err %v), want a refusal saying %q and what to set:\n%.300s", c.set, err, c.want, out)
		}
	}
}
