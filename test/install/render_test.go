package install

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	kubeschedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubeschedulerscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"lull.dev/lull/test/framework"
)

// renderKustomize is `kubectl kustomize manifests/install`.
func renderKustomize(t *testing.T) map[string]object {
	t.Helper()
	out := run(t, nil, bin(t, "kubectl"), "kustomize", filepath.Join(framework.RepoRoot(), "manifests", "install"))
	return objects(t, "kubectl kustomize manifests/install", out)
}

// renderHelm is `helm template` of charts/lull with the CRDs and extra
// arguments (values).
func renderHelm(t *testing.T, args ...string) map[string]object {
	t.Helper()
	a := append([]string{"template", "lull", filepath.Join(framework.RepoRoot(), "charts", "lull"), "--include-crds"}, args...)
	out := run(t, nil, bin(t, "helm"), a...)
	return objects(t, "helm template charts/lull", out)
}

// The chart with its default values renders exactly the objects of the
// kustomization: same names, namespaces, labels and specs, nothing more
// (but its hooks, which only Helm runs: TestChartUninstallHook).
func TestChartDefaultsEqualKustomize(t *testing.T) {
	k := renderKustomize(t)
	h := renderHelm(t, "--no-hooks")
	if diff := cmp.Diff(k, h); diff != "" {
		t.Errorf("helm template charts/lull differs from kubectl kustomize manifests/install (-kustomize +helm):\n%s", diff)
	}
	// What the install must contain, so that an empty or partial render on
	// both sides does not pass.
	for _, want := range []string{
		"apiextensions.k8s.io/v1/CustomResourceDefinition/<nil>/nodemaintenances.lull.dev",
		"apiextensions.k8s.io/v1/CustomResourceDefinition/<nil>/maintenancewindows.lull.dev",
		"apiextensions.k8s.io/v1/CustomResourceDefinition/<nil>/disruptionpolicies.lull.dev",
		"v1/Namespace/<nil>/lull-system",
		"v1/Namespace/<nil>/lull-configs",
		"apiextensions.k8s.io/v1/CustomResourceDefinition/<nil>/nodeconfigs.lull.dev",
		"admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy/<nil>/lull-nodeconfigs",
		"rbac.authorization.k8s.io/v1/Role/lull-configs/lull-maintainer",
		"rbac.authorization.k8s.io/v1/Role/lull-configs/lull-agent",
		"v1/ConfigMap/lull-system/lull-scheduler-config",
		"apps/v1/Deployment/lull-system/lull-scheduler",
		"apps/v1/Deployment/lull-system/lull-drainer",
		"rbac.authorization.k8s.io/v1/RoleBinding/kube-system/lull-scheduler-extension-apiserver-authentication-reader",
		"policy/v1/PodDisruptionBudget/lull-system/lull-drainer",
		"rbac.authorization.k8s.io/v1/ClusterRole/<nil>/lull-metrics-reader",
		"apps/v1/DaemonSet/lull-system/lull-agent",
		"rbac.authorization.k8s.io/v1/ClusterRole/<nil>/lull-agent",
		"admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy/<nil>/lull-agent",
		"admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy/<nil>/lull-maintenance-label-status",
		"admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy/<nil>/lull-nodemaintenance-status",
		"admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy/<nil>/lull-maintenancewindows",
		"admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy/<nil>/lull-disruptionpolicies",
		"admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy/<nil>/lull-component-leases",
		"rbac.authorization.k8s.io/v1/ClusterRole/<nil>/lull-maintainer",
		"rbac.authorization.k8s.io/v1/Role/lull-leases/lull-maintainer",
	} {
		if _, ok := k[want]; !ok {
			t.Errorf("kubectl kustomize manifests/install has no %s; it has:\n%s", want, strings.Join(keys(k), "\n"))
		}
	}
	// The kustomization's parts are what it renders.
	cfg, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "manifests", "scheduler", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, k["v1/ConfigMap/lull-system/lull-scheduler-config"], "data", "config.yaml"); got != string(cfg) {
		t.Errorf("the scheduler ConfigMap is not manifests/scheduler/config.yaml:\n%s", got)
	}
	for _, c := range []string{"lull-scheduler", "lull-drainer", "lull-agent"} {
		d := k["apps/v1/Deployment/lull-system/"+c]
		if c == "lull-agent" {
			d = k["apps/v1/DaemonSet/lull-system/"+c]
		}
		if got, want := get(t, d, "spec", "template", "spec", "containers", 0, "image"), "lull.dev/"+c+":v0.1.0"; got != want {
			t.Errorf("%s image = %v, want %s", c, got, want)
		}
		if got := get(t, d, "spec", "template", "spec", "containers", 0, "imagePullPolicy"); got != "IfNotPresent" {
			t.Errorf("%s imagePullPolicy = %v, want IfNotPresent", c, got)
		}
	}
}

// lull-drainer's metrics are HTTPS behind authentication and authorization,
// it may create the reviews that takes, and its budget and anti-affinity
// leave one replica to lead through a node drain.
func TestDrainerMetricsAndAvailability(t *testing.T) {
	k := renderKustomize(t)
	d := k["apps/v1/Deployment/lull-system/lull-drainer"]
	c0 := get(t, d, "spec", "template", "spec", "containers", 0)
	for _, want := range []string{"--metrics-bind-address=:8443", "--metrics-secure=true"} {
		if !slices.Contains(get(t, c0, "command").([]any), any(want)) {
			t.Errorf("drainer command lacks %s: %v", want, get(t, c0, "command"))
		}
	}
	if got := get(t, c0, "ports", 0); !cmp.Equal(got, map[string]any{"name": "metrics", "containerPort": float64(8443)}) {
		t.Errorf("drainer metrics port %v", got)
	}
	rules := get(t, k["rbac.authorization.k8s.io/v1/ClusterRole/<nil>/lull-drainer"], "rules").([]any)
	for _, want := range []map[string]any{
		{"apiGroups": []any{"authentication.k8s.io"}, "resources": []any{"tokenreviews"}, "verbs": []any{"create"}},
		{"apiGroups": []any{"authorization.k8s.io"}, "resources": []any{"subjectaccessreviews"}, "verbs": []any{"create"}},
	} {
		if !slices.ContainsFunc(rules, func(r any) bool { return cmp.Equal(r, any(want)) }) {
			t.Errorf("lull-drainer ClusterRole lacks %v", want)
		}
	}
	reader := get(t, k["rbac.authorization.k8s.io/v1/ClusterRole/<nil>/lull-metrics-reader"], "rules")
	if diff := cmp.Diff([]any{map[string]any{"nonResourceURLs": []any{"/metrics"}, "verbs": []any{"get"}}}, reader); diff != "" {
		t.Errorf("lull-metrics-reader rules (-want +got):\n%s", diff)
	}
	pdb := k["policy/v1/PodDisruptionBudget/lull-system/lull-drainer"]
	if got := get(t, pdb, "spec", "maxUnavailable"); got != float64(1) {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1", got)
	}
	if diff := cmp.Diff(get(t, d, "spec", "selector"), get(t, pdb, "spec", "selector")); diff != "" {
		t.Errorf("PodDisruptionBudget selects other pods than the Deployment (-deployment +budget):\n%s", diff)
	}
	// Preferred only: the local overlay pins both replicas to one node.
	aff := get(t, d, "spec", "template", "spec", "affinity", "podAntiAffinity").(map[string]any)
	if _, required := aff["requiredDuringSchedulingIgnoredDuringExecution"]; required || len(aff) != 1 {
		t.Errorf("drainer anti-affinity must be preferred only: %v", aff)
	}
	term := get(t, aff, "preferredDuringSchedulingIgnoredDuringExecution", 0, "podAffinityTerm")
	if get(t, term, "topologyKey") != "kubernetes.io/hostname" || !cmp.Equal(get(t, term, "labelSelector"), get(t, d, "spec", "selector")) {
		t.Errorf("drainer anti-affinity term %v", term)
	}
}

// The CRDs the chart ships are manifests/crds (hack/update-codegen.sh
// copies them; --verify fails when they differ).
func TestChartCRDsAreManifestCRDs(t *testing.T) {
	root := framework.RepoRoot()
	want, _ := filepath.Glob(filepath.Join(root, "manifests", "crds", "*.yaml"))
	got, _ := filepath.Glob(filepath.Join(root, "charts", "lull", "crds", "*.yaml"))
	base := func(ps []string) (bs []string) {
		for _, p := range ps {
			bs = append(bs, filepath.Base(p))
		}
		return bs
	}
	if diff := cmp.Diff(base(want), base(got)); diff != "" || len(want) == 0 {
		t.Fatalf("charts/lull/crds differs from manifests/crds (-manifests +chart); run 'make generate':\n%s", diff)
	}
	for _, p := range want {
		a, _ := os.ReadFile(p)
		b, _ := os.ReadFile(filepath.Join(root, "charts", "lull", "crds", filepath.Base(p)))
		if string(a) != string(b) {
			t.Errorf("charts/lull/crds/%s differs from manifests/crds; run 'make generate'", filepath.Base(p))
		}
	}
}

// Non-default values land where they belong.
func TestChartValues(t *testing.T) {
	values := `
namespace: lull
leaseNamespace: lull-leases
nodesWithoutWindow: Restrictive
defaultPolicy: false
scheduler:
  image: {repository: registry.example/lull/lull-scheduler, tag: v9.9.9, pullPolicy: Always}
  replicas: 1
  schedulerName: night-shift
  leaderElection: false
  horizon: 48h
  logLevel: 4
  resources: {requests: {cpu: 200m}, limits: {memory: 1Gi}}
  nodeSelector: {node-role.kubernetes.io/control-plane: ""}
  tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
  affinity: {podAntiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 1, podAffinityTerm: {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app.kubernetes.io/name: lull-scheduler}}}}]}}
drainer:
  image: {repository: registry.example/lull/lull-drainer, tag: v9.9.8}
  replicas: 1
  podDisruptionBudget: {maxUnavailable: 2}
  leaderElection: false
  allowForce: true
  nodeSelector: {node-role.kubernetes.io/control-plane: ""}
  tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
`
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	h := renderHelm(t, "--values", f)
	has := func(k string) object {
		t.Helper()
		o, ok := h[k]
		if !ok {
			t.Fatalf("no %s; rendered:\n%s", k, strings.Join(keys(h), "\n"))
		}
		return o
	}
	hasNot := func(k string) {
		t.Helper()
		if _, ok := h[k]; ok {
			t.Errorf("%s rendered, want none", k)
		}
	}
	has("v1/Namespace/<nil>/lull")
	has("v1/Namespace/<nil>/lull-leases")
	hasNot("v1/Namespace/<nil>/lull-system")
	hasNot("lull.dev/v1alpha1/DisruptionPolicy/<nil>/default") // the drainer's to create, never the chart's
	has("rbac.authorization.k8s.io/v1/ClusterRole/<nil>/lull-drainer-force")
	has("rbac.authorization.k8s.io/v1/Role/lull-leases/lull-scheduler")
	has("rbac.authorization.k8s.io/v1/Role/lull-leases/lull-drainer")
	for _, k := range []string{
		"rbac.authorization.k8s.io/v1/RoleBinding/lull-leases/lull-scheduler",
		"rbac.authorization.k8s.io/v1/RoleBinding/lull-leases/lull-drainer",
		"rbac.authorization.k8s.io/v1/ClusterRoleBinding/<nil>/lull-drainer-force",
		"rbac.authorization.k8s.io/v1/ClusterRoleBinding/<nil>/lull-scheduler",
		"rbac.authorization.k8s.io/v1/RoleBinding/kube-system/lull-scheduler-extension-apiserver-authentication-reader",
	} {
		if got := get(t, has(k), "subjects", 0, "namespace"); got != "lull" {
			t.Errorf("%s: subject namespace %v, want lull", k, got)
		}
	}
	for _, k := range keys(h) {
		o := h[k]
		if ns := get(t, o, "metadata", "namespace"); ns == "lull-system" {
			t.Errorf("%s is still in lull-system", k)
		}
	}

	// The scheduler's configuration: the profile, its opt-in comment, the
	// leases, and kube-scheduler's own strict decoding accepts it.
	cfgText := get(t, has("v1/ConfigMap/lull/lull-scheduler-config"), "data", "config.yaml").(string)
	for _, want := range []string{
		"one profile, night-shift,", "spec.schedulerName: night-shift.", "(lull/lull-scheduler)",
		"leaseNamespace: lull-leases", "nodesWithoutWindow: Restrictive", "horizon: 48h",
	} {
		if !strings.Contains(cfgText, want) {
			t.Errorf("scheduler config lacks %q:\n%s", want, cfgText)
		}
	}
	obj, _, err := kubeschedulerscheme.Codecs.UniversalDecoder().Decode([]byte(cfgText), nil, nil)
	if err != nil {
		t.Fatalf("kube-scheduler does not accept the rendered config: %v\n%s", err, cfgText)
	}
	sc := obj.(*kubeschedulerconfig.KubeSchedulerConfiguration)
	if len(sc.Profiles) != 1 || sc.Profiles[0].SchedulerName != "night-shift" {
		t.Errorf("profiles = %+v, want one named night-shift", sc.Profiles)
	}
	if sc.LeaderElection.LeaderElect || sc.LeaderElection.ResourceNamespace != "lull" {
		t.Errorf("leaderElection = %+v, want off, in the components' namespace lull", sc.LeaderElection)
	}

	// The Deployments.
	sched := has("apps/v1/Deployment/lull/lull-scheduler")
	drain := has("apps/v1/Deployment/lull/lull-drainer")
	for name, d := range map[string]object{"lull-scheduler": sched, "lull-drainer": drain} {
		pod := get(t, d, "spec", "template", "spec")
		if diff := cmp.Diff(map[string]any{"node-role.kubernetes.io/control-plane": ""}, get(t, pod, "nodeSelector")); diff != "" {
			t.Errorf("%s nodeSelector (-want +got):\n%s", name, diff)
		}
		if got := get(t, pod, "tolerations", 0, "key"); got != "node-role.kubernetes.io/control-plane" {
			t.Errorf("%s tolerations: %v", name, get(t, pod, "tolerations"))
		}
	}
	if got := get(t, sched, "spec", "template", "spec", "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution", 0, "weight"); got != float64(1) {
		t.Errorf("scheduler affinity: %v", get(t, sched, "spec", "template", "spec", "affinity"))
	}
	// The drainer keeps its default: replicas preferably on different nodes.
	if got := get(t, drain, "spec", "template", "spec", "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution", 0, "podAffinityTerm", "topologyKey"); got != "kubernetes.io/hostname" {
		t.Errorf("drainer affinity: %v", get(t, drain, "spec", "template", "spec", "affinity"))
	}
	if got := get(t, has("policy/v1/PodDisruptionBudget/lull/lull-drainer"), "spec", "maxUnavailable"); got != float64(2) {
		t.Errorf("drainer PodDisruptionBudget maxUnavailable %v, want 2", got)
	}
	sc0 := get(t, sched, "spec", "template", "spec", "containers", 0)
	for _, c := range []struct {
		got, want any
		what      string
	}{
		{get(t, sc0, "image"), "registry.example/lull/lull-scheduler:v9.9.9", "scheduler image"},
		{get(t, sc0, "imagePullPolicy"), "Always", "scheduler pullPolicy"},
		{get(t, sched, "spec", "replicas"), float64(1), "scheduler replicas"},
		{get(t, sc0, "resources", "limits", "memory"), "1Gi", "scheduler memory limit"},
		{get(t, sc0, "resources", "requests", "cpu"), "200m", "scheduler cpu request"},
		{slices.Contains(get(t, sc0, "command").([]any), "--v=4"), true, "scheduler --v=4"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	dc0 := get(t, drain, "spec", "template", "spec", "containers", 0)
	if got := get(t, dc0, "image"); got != "registry.example/lull/lull-drainer:v9.9.8" {
		t.Errorf("drainer image %v", got)
	}
	if got := get(t, drain, "spec", "replicas"); got != float64(1) {
		t.Errorf("drainer replicas %v", got)
	}
	args := get(t, dc0, "command").([]any)
	for _, want := range []string{"--leader-elect=false", "--leader-election-namespace=lull", "--lease-namespace=lull-leases", "--budget-namespace=lull", "--nodes-without-window=Restrictive", "--allow-force=true", "--default-policy=false"} {
		if !slices.Contains(args, any(want)) {
			t.Errorf("drainer command lacks %s: %v", want, args)
		}
	}
}

// The drainer's budget and anti-affinity can be switched off (null removes
// a default map in Helm; {} would be merged with it).
func TestChartDrainerWithoutBudgetOrAffinity(t *testing.T) {
	h := renderHelm(t, "--set", "drainer.podDisruptionBudget.enabled=false", "--set", "drainer.affinity=null")
	if _, ok := h["policy/v1/PodDisruptionBudget/lull-system/lull-drainer"]; ok {
		t.Error("PodDisruptionBudget rendered with drainer.podDisruptionBudget.enabled=false")
	}
	if got := get(t, h["apps/v1/Deployment/lull-system/lull-drainer"], "spec", "template", "spec", "affinity"); got != nil {
		t.Errorf("drainer affinity %v with drainer.affinity=null, want none", got)
	}
}

// helm lint passes, with the defaults and with the values of a one-node
// setup (no leader election).
func TestChartLint(t *testing.T) {
	chart := filepath.Join(framework.RepoRoot(), "charts", "lull")
	run(t, nil, bin(t, "helm"), "lint", "--strict", chart)
	run(t, nil, bin(t, "helm"), "lint", "--strict", chart, "--set", "scheduler.leaderElection=false,scheduler.replicas=1,drainer.leaderElection=false,drainer.replicas=1")
}

// Finding 8 of issue 27: without the admission guard the agent's token,
// on every node, could write any node's request status and heartbeat. The
// chart refuses to render the agent without the guard unless told so.
func TestChartRefusesUnguardedAgent(t *testing.T) {
	chart := filepath.Join(framework.RepoRoot(), "charts", "lull")
	out, err := runErr(nil, bin(t, "helm"), "template", "lull", chart, "--set", "admission.enabled=false")
	if err == nil {
		t.Fatalf("helm template with admission.enabled=false rendered:\n%s", out)
	}
	for _, want := range []string{"admission.enabled=false", "lull-agent", "agent.allowWithoutAdmission=true"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q:\n%v", want, err)
		}
	}
	// Told explicitly: the agent without any policy.
	h := renderHelm(t, "--set", "admission.enabled=false", "--set", "agent.allowWithoutAdmission=true")
	if _, ok := h["apps/v1/DaemonSet/lull-system/lull-agent"]; !ok {
		t.Errorf("agent.allowWithoutAdmission=true: no lull-agent DaemonSet")
	}
	for k := range h {
		if strings.Contains(k, "AdmissionPolicy") {
			t.Errorf("admission.enabled=false rendered %s", k)
		}
	}
	// Without the agent, nothing to refuse.
	h = renderHelm(t, "--set", "admission.enabled=false", "--set", "agent.enabled=false")
	if _, ok := h["apps/v1/DaemonSet/lull-system/lull-agent"]; ok {
		t.Errorf("agent.enabled=false rendered the agent")
	}
}

// helm uninstall first runs lull-drainer --uninstall as lull-drainer's
// ServiceAccount, with the drainer's image, settings and placement; only
// during that hook may the account patch its own Deployment.
func TestChartUninstallHook(t *testing.T) {
	h := renderHelm(t, "--set", "drainer.nodeSelector.pool=infra", "--set", "namespace=ops")
	job := h["batch/v1/Job/ops/lull-drainer-uninstall"]
	if job == nil {
		t.Fatalf("no uninstall hook Job; rendered:\n%s", strings.Join(keys(h), "\n"))
	}
	if got := get(t, job, "metadata", "annotations", "helm.sh/hook"); got != "pre-delete" {
		t.Errorf("hook %v, want pre-delete", got)
	}
	pod := get(t, job, "spec", "template", "spec")
	if got := get(t, pod, "serviceAccountName"); got != "lull-drainer" {
		t.Errorf("hook runs as %v", got)
	}
	if got := get(t, pod, "nodeSelector"); !cmp.Equal(got, map[string]any{"pool": "infra"}) {
		t.Errorf("hook placement %v", got)
	}
	d := h["apps/v1/Deployment/ops/lull-drainer"]
	if got, want := get(t, pod, "containers", 0, "image"), get(t, d, "spec", "template", "spec", "containers", 0, "image"); got != want {
		t.Errorf("hook image %v, drainer image %v", got, want)
	}
	cmd := get(t, pod, "containers", 0, "command").([]any)
	for _, want := range []string{"--uninstall", "--leader-election-namespace=ops", "--lease-namespace=lull-leases", "--maintenance-label=lull.dev/maintenance"} {
		if !slices.Contains(cmd, any(want)) {
			t.Errorf("hook command lacks %s: %v", want, cmd)
		}
	}
	role := h["rbac.authorization.k8s.io/v1/Role/ops/lull-drainer-uninstall"]
	want := []any{map[string]any{"apiGroups": []any{"apps"}, "resources": []any{"deployments"}, "resourceNames": []any{"lull-drainer"}, "verbs": []any{"patch"}}}
	if diff := cmp.Diff(want, get(t, role, "rules")); diff != "" {
		t.Errorf("hook Role rules (-want +got):\n%s", diff)
	}
	if got := get(t, role, "metadata", "annotations", "helm.sh/hook"); got != "pre-delete" {
		t.Errorf("the hook's Role is %v, want a pre-delete hook (it must not outlive the uninstall)", got)
	}
	if _, ok := renderHelm(t, "--set", "drainer.uninstallHook.enabled=false")["batch/v1/Job/lull-system/lull-drainer-uninstall"]; ok {
		t.Error("drainer.uninstallHook.enabled=false still renders the hook")
	}
}
