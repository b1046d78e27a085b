package install

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"lull.dev/lull/internal/agentlease"
	"lull.dev/lull/internal/policy"
	"lull.dev/lull/test/framework"
)

// The side doors of issue 27 that the install closes (the admission guard
// of manifests/admission and lull's RBAC), tried on a real kube-apiserver
// with manifests/install applied, as the probes tried them: with
// kubectl --as and --as-group. Each subtest names the finding it covers.

// guardAs impersonates user in the operators' group and groups.
func guardAs(user string, groups ...string) []string {
	args := []string{"--as=" + user, "--as-group=system:authenticated", "--as-group=" + framework.GuardOperators}
	for _, g := range groups {
		args = append(args, "--as-group="+g)
	}
	return args
}

// serviceAccount impersonates a ServiceAccount of namespace ns with its
// own groups only (no operator rights: what its RBAC grants), its token
// bound to node when node is not empty (the user extra the API server
// gives a pod's projected token).
func serviceAccount(ns, name, node string) []string {
	args := []string{"--as=system:serviceaccount:" + ns + ":" + name, "--as-group=system:authenticated",
		"--as-group=system:serviceaccounts", "--as-group=system:serviceaccounts:" + ns}
	if node != "" {
		args = append(args, "--as-user-extra=authentication.kubernetes.io/node-name="+node)
	}
	return args
}

var (
	alice   = guardAs("e2e-alice")
	mo      = guardAs("e2e-mo", framework.GuardMaintainers)
	em      = guardAs("e2e-em", framework.GuardMaintainers, framework.GuardEmergency)
	drainer = serviceAccount("lull-system", "lull-drainer", "")
	sched   = serviceAccount("lull-system", "lull-scheduler", "")
)

// agentOn is lull-agent with a token bound to node, and the operators'
// RBAC: lull-agent updates (PUT) its request's status, which RBAC grants
// it; these tests patch, which the API server admits as the same update.
func agentOn(node string) []string {
	return append(serviceAccount("lull-system", "lull-agent", node), "--as-group="+framework.GuardOperators)
}

// guarded is an API server with lull installed.
type guarded struct {
	t          *testing.T
	kubeconfig string
	dir        string
	files      int
}

func (g *guarded) kubectl(args ...string) (string, error) {
	return runErr(nil, bin(g.t, "kubectl"), append([]string{"--kubeconfig", g.kubeconfig}, args...)...)
}

// must runs kubectl as the cluster admin and fails the test if it fails.
func (g *guarded) must(args ...string) string {
	g.t.Helper()
	out, err := g.kubectl(args...)
	if err != nil {
		g.t.Fatal(err)
	}
	return out
}

// file writes content to a new file of the test and returns its path
// (steps are written before any runs: each has its own file).
func (g *guarded) file(name, content string) string {
	g.t.Helper()
	g.files++
	p := filepath.Join(g.dir, fmt.Sprintf("%03d-%s", g.files, name))
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		g.t.Fatal(err)
	}
	return p
}

// applyCRDs applies lull's CRDs and waits until they are served.
func (g *guarded) applyCRDs() {
	g.t.Helper()
	g.must("apply", "--server-side", "-k", filepath.Join(framework.RepoRoot(), "manifests", "crds"))
	waitEstablished(g.t, g.kubectl, "crd/nodemaintenances.lull.dev", "crd/maintenancewindows.lull.dev", "crd/disruptionpolicies.lull.dev", "crd/nodeconfigs.lull.dev")
}

// operators binds the operators' RBAC and waits until the guard refuses:
// a policy is active some moments after its creation.
func (g *guarded) operators(probe []string, refusal string) {
	g.t.Helper()
	g.must("apply", "-f", g.file("operators.yaml", framework.GuardOperatorRBAC))
	var last string
	err := wait.PollUntilContextTimeout(g.t.Context(), 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		out, err := g.kubectl(probe...)
		if last = out; err != nil {
			last = err.Error()
		}
		return strings.Contains(last, refusal), nil
	})
	if err != nil {
		g.t.Fatalf("the guard never refused %v; last answer: %s", probe, last)
	}
}

// installGuarded starts an API server and installs lull with kustomize,
// as docs/install.md says.
func installGuarded(t *testing.T) *guarded {
	t.Helper()
	g := &guarded{t: t, kubeconfig: apiServer(t), dir: t.TempDir()}
	g.applyCRDs()
	g.must("apply", "--server-side", "-k", filepath.Join(framework.RepoRoot(), "manifests", "install"))
	g.must("create", "-f", g.file("nodes.yaml", guardNodes("n1", "n2", "n3", "n4")))
	g.operators(append(append([]string{}, alice...), "label", "node", "n1", "lull.dev/maintenance=x", "--dry-run=server"), "lull-maintenance-label")
	// A maintainer's label change needs the stamp of a mutating policy,
	// which becomes active on its own, moments apart from the others.
	g.eventuallyAllowed(append(append([]string{}, mo...), "label", "node", "n1", "lull.dev/maintenance=x", "--dry-run=server"))
	return g
}

func guardNodes(names ...string) string {
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Node\nmetadata: {name: %s, labels: {kubernetes.io/hostname: %s}}\n", n, n)
	}
	return b.String()
}

// guardStep is one request: allowed when refused is empty, else refused
// with an answer containing every string of refused (the policy's name,
// a piece of its message).
type guardStep struct {
	name    string
	as      []string
	args    []string
	refused []string
	// eventually: asked again for up to a minute until it is refused, for
	// a server dry run (--dry-run=server) that waits for a policy the API
	// server has not compiled yet (each policy becomes active on its own;
	// under load, seconds apart).
	eventually bool
}

// refusedBy is the refusal of a ValidatingAdmissionPolicy, with pieces
// of its message.
func refusedBy(policy string, message ...string) []string {
	return append([]string{"ValidatingAdmissionPolicy '" + policy + "'"}, message...)
}

// steps runs the steps in order (each starts from the state the ones
// before left) and reports every one whose answer is not the expected
// one, so a run on a commit without the fixes lists every open door.
func (g *guarded) steps(t *testing.T, steps []guardStep) {
	t.Helper()
	for i, s := range steps {
		out, err := g.kubectl(append(append([]string{}, s.as...), s.args...)...)
		if s.eventually {
			_ = wait.PollUntilContextTimeout(g.t.Context(), 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
				out, err = g.kubectl(append(append([]string{}, s.as...), s.args...)...)
				return err != nil, nil
			})
		}
		switch {
		case len(s.refused) == 0 && err != nil:
			t.Errorf("step %d %q: refused, want allowed:\n%v", i+1, s.name, err)
		case len(s.refused) > 0 && err == nil:
			t.Errorf("step %d %q: allowed, want refused (%s):\n%s", i+1, s.name, strings.Join(s.refused, " … "), out)
		case len(s.refused) > 0:
			for _, r := range s.refused {
				if !strings.Contains(err.Error(), r) {
					t.Errorf("step %d %q: refused without %q:\n%v", i+1, s.name, r, err)
					break
				}
			}
		}
	}
}

// jsonpath reads one field as the cluster admin.
func (g *guarded) jsonpath(t *testing.T, path string, args ...string) string {
	t.Helper()
	out, err := g.kubectl(append(args, "-o", "jsonpath="+path)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func nodeMaintenance(name, spec string) string {
	return fmt.Sprintf("apiVersion: lull.dev/v1alpha1\nkind: NodeMaintenance\nmetadata: {name: %s}\nspec: {nodeName: %s, classes: [kernel-update]%s}\n", name, name, spec)
}

func mergePatch(kind, name, patch string, extra ...string) []string {
	return append([]string{"patch", kind, name, "--type=merge", "-p", patch}, extra...)
}

func statusPatch(kind, name, patch string) []string {
	return mergePatch(kind, name, patch, "--subresource=status")
}

// TestGuard: the doors of issue 27 the admission guard and lull's RBAC
// close, on one API server with lull installed by kustomize (the chart
// renders the same objects: TestChartDefaultsEqualKustomize).
func TestGuard(t *testing.T) {
	g := installGuarded(t)

	// Issue 41, finding 5: the shipped writablePaths are what the shipped
	// rules cover (chrony, registry hosts, units), not all of /etc. The
	// steps below judge the other lists with /etc/** (an admin widens it).
	t.Run("issue 41: the shipped writablePaths are narrow", func(t *testing.T) {
		nc := func(name, path string) string {
			return g.file("nc-w-"+name+".yaml", "apiVersion: lull.dev/v1alpha1\nkind: NodeConfig\nmetadata: {name: "+name+", namespace: lull-configs}\nspec:\n  files:\n"+
				"  - {path: "+path+", contents: cG9vbCB4Cg==}\n")
		}
		g.steps(t, []guardStep{
			{name: "a maintainer cannot write elsewhere in /etc", as: mo, args: []string{"create", "--dry-run=server", "-f", nc("w1", "/etc/lull-tour/greeting")},
				refused: refusedBy("lull-nodeconfigs", "lull-agent may not write /etc/lull-tour/greeting: not in writablePaths (/etc/chrony.conf,"), eventually: true},
			{name: "nor /etc/hosts", as: mo, args: []string{"create", "--dry-run=server", "-f", nc("w2", "/etc/hosts")},
				refused: refusedBy("lull-nodeconfigs", "lull-agent may not write /etc/hosts: not in writablePaths")},
			{name: "chrony's configuration is data a maintainer writes", as: mo, args: []string{"create", "--dry-run=server", "-f", nc("w3", "/etc/chrony/chrony.conf")}},
			{name: "an admin widens the list", args: mergePatch("configmap", "lull-admission", `{"data":{"writablePaths":"/etc/**"}}`, "-n", "lull-system")},
		})
		// The guard reads its parameters from an informer: the wider list
		// applies within moments.
		var last error
		if err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			_, last = g.kubectl(append(append([]string{}, mo...), "create", "--dry-run=server", "-f", nc("w4", "/etc/lull-tour/greeting"))...)
			return last == nil, nil
		}); err != nil {
			t.Errorf("the widened writablePaths never let /etc/lull-tour/greeting through: %v", last)
		}
	})

	// Finding 2: the maintenance label was guarded on nodes only; a user
	// with nodes/status rights (node agents, CNI daemons, cloud
	// controllers) could set or remove it through the status subresource.
	t.Run("finding 2: the label through nodes/status", func(t *testing.T) {
		const label = `{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`
		noStatus := refusedBy("lull-maintenance-label-status", "never added, changed or removed through nodes/status")
		apply := g.file("status-apply.yaml", "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n  labels: {lull.dev/maintenance: node-config}\n")
		g.steps(t, []guardStep{
			{name: "an operator adds it with a status patch", as: alice, args: statusPatch("node", "n1", label), refused: noStatus},
			{name: "an operator adds it with a server-side apply of the status", as: alice,
				args: []string{"apply", "--server-side", "--subresource=status", "--field-manager=e2e-status", "-f", apply}, refused: noStatus},
			{name: "a maintainer cannot use nodes/status either", as: mo, args: statusPatch("node", "n1", label), refused: noStatus},
			{name: "an operator cannot add it on the Node with a server-side apply", as: alice,
				args: []string{"apply", "--server-side", "--field-manager=e2e-node", "-f", apply}, refused: refusedBy("lull-maintenance-label")},
			{name: "a maintainer labels the Node", as: mo, args: []string{"label", "node", "n1", "lull.dev/maintenance=kernel-update"}},
			{name: "an operator cannot remove it with a status patch", as: alice,
				args: statusPatch("node", "n1", `{"metadata":{"labels":{"lull.dev/maintenance":null}}}`), refused: noStatus},
			{name: "an operator cannot change it with a status update", as: alice,
				args: statusPatch("node", "n1", `{"metadata":{"labels":{"lull.dev/maintenance":"hardware"}}}`), refused: noStatus},
			{name: "a status update that leaves it (a heartbeat) passes", as: alice,
				args: statusPatch("node", "n1", `{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"heartbeat"}]}}`)},
			{name: "a maintainer removes it from the Node", as: mo, args: []string{"label", "node", "n1", "lull.dev/maintenance-"}},
		})
		if got := g.jsonpath(t, `{.metadata.labels.lull\.dev/maintenance}`, "get", "node", "n1"); got != "" {
			t.Errorf("node n1 carries lull.dev/maintenance=%s at the end, want none", got)
		}
	})

	// Issue 43, finding 3: whoever labels a Secret as an alerts gate's
	// credentials, or changes where a labelled one may go, decides where a
	// credential is sent: the admin group (or cluster-admin) only. Its
	// token may change, and the label go, with RBAC alone.
	t.Run("issue 43: alerts credentials are bound by an admin", func(t *testing.T) {
		admin := guardAs("e2e-admin", "lull:admins")
		only := refusedBy("lull-alerts-credentials", `only members of group "lull:admins" (or cluster admins) may label a Secret lull.dev/alerts-credentials=true`)
		labelled := g.file("cred.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: prom, namespace: lull-configs, labels: {lull.dev/alerts-credentials: 'true'}}\n"+
			"stringData: {token: t0, url: 'https://prometheus.monitoring:9090'}\n")
		plain := g.file("cred-plain.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: prom2, namespace: lull-configs}\nstringData: {token: t0, url: 'https://evil.example'}\n")
		// Operators who may write Secrets in lull-configs (the probe's
		// "patch but not get", and more): RBAC lets them; the guard decides.
		g.must("-n", "lull-configs", "create", "role", "e2e-secrets", "--verb=get,create,update,patch", "--resource=secrets")
		g.must("-n", "lull-configs", "create", "rolebinding", "e2e-secrets", "--role=e2e-secrets", "--group="+framework.GuardOperators)
		g.steps(t, []guardStep{
			{name: "the credentials guard is active (a dry run)", as: mo, args: []string{"create", "--dry-run=server", "-f", labelled}, refused: only, eventually: true},
			{name: "a maintainer cannot create a labelled Secret", as: mo, args: []string{"create", "-f", labelled}, refused: only},
			{name: "an admin creates it", as: admin, args: []string{"create", "-f", labelled}},
			{name: "a maintainer rotates its token", as: mo, args: mergePatch("secret", "prom", `{"stringData":{"token":"t1"}}`, "-n", "lull-configs")},
			{name: "a maintainer cannot send it elsewhere", as: mo, args: mergePatch("secret", "prom", `{"stringData":{"url":"https://evil.example"}}`, "-n", "lull-configs"), refused: only},
			{name: "nor over plain http", as: mo, args: mergePatch("secret", "prom", `{"stringData":{"insecure-http":"true"}}`, "-n", "lull-configs"), refused: only},
			{name: "a maintainer creates an unlabelled Secret", as: mo, args: []string{"create", "-f", plain}},
			{name: "a maintainer cannot label it", as: mo, args: []string{"label", "-n", "lull-configs", "secret", "prom2", "lull.dev/alerts-credentials=true"}, refused: only},
			{name: "a cluster admin moves the labelled one", args: mergePatch("secret", "prom", `{"stringData":{"url":"https://prometheus.monitoring:9091"}}`, "-n", "lull-configs")},
			{name: "a maintainer removes the label", as: mo, args: []string{"label", "-n", "lull-configs", "secret", "prom", "lull.dev/alerts-credentials-"}},
		})
	})

	// Issue 43, finding 6: whoever could edit lull's namespace (the built-in
	// "edit" role there) rewrote the guard's parameters and minted lull's
	// tokens. Administration of lull is now a named boundary: cluster
	// admins and lull:admins only, whatever RBAC grants.
	t.Run("issue 43: administration of lull needs an admin", func(t *testing.T) {
		admin := guardAs("e2e-admin", "lull:admins")
		only := func(what string) []string {
			return refusedBy("lull-administration", what+` may be written only by lull's administrators (RBAC verb "administer" on lull.admin.lull.dev`)
		}
		g.must("-n", "lull-system", "create", "role", "e2e-editor", "--verb=get,create,update,patch,delete",
			"--resource=configmaps,secrets,pods,replicationcontrollers,deployments.apps,daemonsets.apps,jobs.batch,serviceaccounts/token")
		g.must("-n", "lull-system", "create", "rolebinding", "e2e-editor", "--role=e2e-editor", "--group="+framework.GuardOperators)
		g.must("-n", "lull-system", "create", "role", "e2e-exec", "--verb=create,get", "--resource=pods/exec,pods/attach")
		g.must("-n", "lull-system", "create", "rolebinding", "e2e-exec", "--role=e2e-exec", "--group="+framework.GuardOperators)
		// A pod named as lull's are (the name is what an exec names).
		g.must("-n", "lull-system", "run", "lull-drainer-e2e", "--image=registry.invalid/x", "--restart=Never")
		runsAs := func(name, kind, account string) string {
			pod := "{containers: [{name: c, image: registry.invalid/x}], serviceAccountName: " + account + "}"
			switch kind {
			case "Pod":
				return g.file(name+".yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: "+name+", namespace: lull-system}\nspec: "+pod+"\n")
			case "Job":
				return g.file(name+".yaml", "apiVersion: batch/v1\nkind: Job\nmetadata: {name: "+name+", namespace: lull-system}\nspec: {template: {spec: "+
					strings.TrimSuffix(pod, "}")+", restartPolicy: Never}}}\n")
			}
			return g.file(name+".yaml", "apiVersion: apps/v1\nkind: "+kind+"\nmetadata: {name: "+name+", namespace: lull-system}\nspec: {selector: {matchLabels: {a: b}}, "+
				"template: {metadata: {labels: {a: b}}, spec: "+pod+"}}\n")
		}
		rc := g.file("rc.yaml", "apiVersion: v1\nkind: ReplicationController\nmetadata: {name: rc1, namespace: lull-system}\nspec: {selector: {a: b}, "+
			"template: {metadata: {labels: {a: b}}, spec: {containers: [{name: c, image: registry.invalid/x}], serviceAccountName: lull-drainer}}}\n")
		g.must("create", "clusterrolebinding", "e2e-cluster-admin", "--clusterrole=cluster-admin", "--user=e2e-ca")
		tokenSecret := g.file("sa-secret.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: minted, namespace: lull-system, annotations: {kubernetes.io/service-account.name: lull-agent}}\n"+
			"type: kubernetes.io/service-account-token\n")
		g.steps(t, []guardStep{
			{name: "the administration guard is active (a dry run)", as: alice, args: mergePatch("configmap", "lull-admission", `{"data":{"maintainersGroup":"system:authenticated"}}`, "-n", "lull-system", "--dry-run=server"),
				refused: only("ConfigMap lull-system/lull-admission (lull's configuration)"), eventually: true},
			{name: "an editor cannot make everyone a maintainer", as: alice, args: mergePatch("configmap", "lull-admission", `{"data":{"maintainersGroup":"system:authenticated"}}`, "-n", "lull-system"),
				refused: only("ConfigMap lull-system/lull-admission (lull's configuration)")},
			{name: "nor delete the guard's parameters", as: alice, args: []string{"-n", "lull-system", "delete", "configmap", "lull-admission"}, refused: only("ConfigMap lull-system/lull-admission (lull's configuration)")},
			{name: "nor mint lull-drainer's token", as: alice, args: []string{"-n", "lull-system", "create", "token", "lull-drainer"}, refused: only("a token of ServiceAccount lull-drainer")},
			{name: "nor a token Secret of lull-agent", as: alice, args: []string{"create", "--dry-run=server", "-f", tokenSecret}, refused: only("a token Secret of lull's ServiceAccount")},
			{name: "nor run a pod as lull-agent", as: alice, args: []string{"create", "--dry-run=server", "-f", runsAs("p1", "Pod", "lull-agent")}, refused: only("a Pod that runs as lull's ServiceAccount")},
			{name: "nor a Deployment as lull-drainer", as: alice, args: []string{"create", "--dry-run=server", "-f", runsAs("d1", "Deployment", "lull-drainer")}, refused: only("a Deployment that runs as lull's ServiceAccount")},
			{name: "nor a DaemonSet as lull-scheduler", as: alice, args: []string{"create", "--dry-run=server", "-f", runsAs("ds1", "DaemonSet", "lull-scheduler")}, refused: only("a DaemonSet that runs as lull's ServiceAccount")},
			{name: "nor a Job as lull-drainer", as: alice, args: []string{"create", "--dry-run=server", "-f", runsAs("j1", "Job", "lull-drainer")}, refused: only("a Job that runs as lull's ServiceAccount")},
			{name: "nor exec into lull's pod", as: alice, args: []string{"-n", "lull-system", "exec", "lull-drainer-e2e", "--", "true"},
				refused: only("a command in lull's pod lull-drainer-e2e (pods/exec)")},
			{name: "nor rewrite lull-scheduler's configuration", as: alice, args: mergePatch("configmap", "lull-scheduler-config", `{"data":{"x":"y"}}`, "-n", "lull-system", "--dry-run=server"),
				refused: only("ConfigMap lull-system/lull-scheduler-config (lull's configuration)")},
			{name: "nor a ReplicationController as lull-drainer", as: alice, args: []string{"create", "--dry-run=server", "-f", rc}, refused: only("a ReplicationController that runs as lull's ServiceAccount")},
			{name: "nor change the image lull-drainer's pods run", as: alice, args: []string{"-n", "lull-system", "set", "image", "deployment/lull-drainer", "lull-drainer=registry.invalid/evil", "--dry-run=server"},
				refused: only("a Deployment that runs as lull's ServiceAccount")},
			{name: "an update that leaves the pods alone passes (helm uninstall's mark)", as: alice,
				args: []string{"-n", "lull-system", "annotate", "deployment", "lull-drainer", "lull.dev/e2e-mark=x", "--dry-run=server"}},
			{name: "an editor still runs a pod as another account", as: alice, args: []string{"create", "--dry-run=server", "-f", runsAs("p2", "Pod", "default")}},
			{name: "and writes other ConfigMaps", as: alice, args: []string{"-n", "lull-system", "create", "configmap", "e2e-other", "--from-literal=a=b"}},
			{name: "an admin changes the guard's parameters", as: admin, args: mergePatch("configmap", "lull-admission", `{"metadata":{"annotations":{"e2e/touched":"yes"}}}`, "-n", "lull-system")},
			{name: "an admin runs a pod as lull-agent", as: admin, args: []string{"create", "--dry-run=server", "-f", runsAs("p3", "Pod", "lull-agent")}},
			{name: "a cluster admin too", args: mergePatch("configmap", "lull-admission", `{"metadata":{"annotations":{"e2e/touched":"again"}}}`, "-n", "lull-system")},
			{name: "and one bound to cluster-admin, not in system:masters", as: guardAs("e2e-ca"), args: mergePatch("configmap", "lull-admission", `{"metadata":{"annotations":{"e2e/touched":"thrice"}}}`, "-n", "lull-system")},
		})
	})

	// Issue 43, finding 2: writing what runs code as root (a unit file, a
	// cron job, a PAM module's config, an executable) is root on every
	// node: it needs the host-code group, not only the maintainers group.
	t.Run("issue 43: writing what executes is its own power", func(t *testing.T) {
		hc := guardAs("e2e-hc", framework.GuardMaintainers, "lull:host-code")
		nc := func(name, path, mode string) string {
			m := ""
			if mode != "" {
				m = ", mode: " + mode
			}
			return g.file("nc-"+name+".yaml", "apiVersion: lull.dev/v1alpha1\nkind: NodeConfig\nmetadata: {name: "+name+", namespace: lull-configs}\nspec:\n  files:\n"+
				"  - {path: "+path+", contents: cG9vbCB4Cg=="+m+"}\n")
		}
		code := func(path string) []string {
			return refusedBy("lull-nodeconfigs", `only members of group "lull:host-code" may have lull-agent write `+path)
		}
		var steps []guardStep
		for i, p := range []string{"/etc/systemd/system/x.service", "/etc/systemd/system/chronyd.service.d/10-x.conf", "/etc/cron.d/x",
			"/etc/ld.so.preload", "/etc/pam.d/sshd", "/etc/sudo.conf", "/etc/ssh/sshd_config.d/x.conf", "/etc/udev/rules.d/99-x.rules",
			"/etc/modprobe.d/x.conf", "/etc/profile.d/x.sh", "/etc/default/kubelet", "/etc/containerd/certs.d/r/hosts.toml"} {
			steps = append(steps, guardStep{name: "a maintainer cannot write " + p, as: mo, args: []string{"create", "--dry-run=server", "-f", nc(fmt.Sprintf("c%d", i), p, "")}, refused: code(p)})
		}
		steps = append(steps,
			guardStep{name: "nor an executable file", as: mo, args: []string{"create", "--dry-run=server", "-f", nc("x1", "/etc/lull-tour/run", "493")}, refused: code("/etc/lull-tour/run")},
			guardStep{name: "nor a set-user-ID one", as: mo, args: []string{"create", "--dry-run=server", "-f", nc("x2", "/etc/lull-tour/s", "2048")}, refused: code("/etc/lull-tour/s")},
			guardStep{name: "a maintainer writes configuration data", as: mo, args: []string{"create", "--dry-run=server", "-f", nc("d1", "/etc/chrony/chrony.conf", "420")}},
			guardStep{name: "the host-code group writes a unit", as: hc, args: []string{"create", "--dry-run=server", "-f", nc("h1", "/etc/systemd/system/x.service", "")}},
		)
		g.steps(t, steps)
	})

	// Issue 30: a NodeConfig is what lull-agent writes to a node as root.
	// Only maintainers make or delete one, nobody changes one, and its
	// paths are on the admin's allowlist and off the protected list.
	t.Run("issue 30: NodeConfigs", func(t *testing.T) {
		nodeConfig := func(name string, paths ...string) string {
			out := "apiVersion: lull.dev/v1alpha1\nkind: NodeConfig\nmetadata: {name: " + name + ", namespace: lull-configs}\nspec:\n  files:\n"
			for _, p := range paths {
				out += "  - {path: " + p + ", contents: cG9vbCB4Cg==}\n"
			}
			return out
		}
		notYours := refusedBy("lull-nodeconfigs", "may create or delete NodeConfigs")
		g.steps(t, []guardStep{
			{name: "the NodeConfig guard is active (a dry run)", as: alice, args: []string{"create", "--dry-run=server", "-f", g.file("nc-probe.yaml", nodeConfig("probe", "/etc/chrony.conf"))},
				refused: notYours, eventually: true},
			{name: "a maintainer makes one", as: mo, args: []string{"create", "-f", g.file("nc-chrony.yaml", nodeConfig("chrony", "/etc/chrony.conf", "/etc/chrony.d/pool.conf"))}},
			{name: "an operator cannot", as: alice, args: []string{"create", "-f", g.file("nc-a.yaml", nodeConfig("a", "/etc/chrony.conf"))}, refused: notYours},
			{name: "nobody changes it, maintainers included", as: em,
				args:    []string{"patch", "nodeconfig", "chrony", "-n", "lull-configs", "--type=json", "-p", `[{"op":"replace","path":"/spec/files/0/contents","value":"cmVib290Cg=="}]`},
				refused: refusedBy("lull-nodeconfigs", "cannot be changed once created")},
			{name: "its labels may change", as: mo, args: []string{"label", "nodeconfig", "chrony", "-n", "lull-configs", "rollout=2"}},
			{name: "not the kubelet's credentials", as: mo, args: []string{"create", "-f", g.file("nc-k.yaml", nodeConfig("k", "/etc/chrony.conf", "/etc/kubernetes/kubelet.conf"))},
				refused: refusedBy("lull-nodeconfigs", "lull-agent never writes /etc/kubernetes/kubelet.conf")},
			{name: "not sudoers", as: em, args: []string{"create", "-f", g.file("nc-s.yaml", nodeConfig("s", "/etc/sudoers.d/e2e"))},
				refused: refusedBy("lull-nodeconfigs", "never writes /etc/sudoers.d/e2e")},
			{name: "nothing outside writablePaths", as: mo, args: []string{"create", "-f", g.file("nc-v.yaml", nodeConfig("v", "/var/lib/kubelet/config.yaml", "/root/.ssh/authorized_keys"))},
				refused: refusedBy("lull-nodeconfigs", "lull-agent may not write /var/lib/kubelet/config.yaml, /root/.ssh/authorized_keys: not in writablePaths (/etc/**)")},
			{name: "an operator cannot delete it", as: alice, args: []string{"delete", "nodeconfig", "chrony", "-n", "lull-configs", "--wait=false"}, refused: notYours},
			{name: "a maintainer deletes it", as: mo, args: []string{"delete", "nodeconfig", "chrony", "-n", "lull-configs", "--wait=false"}},
		})
	})

	// Issue 31: lull-agent files and withdraws its own node's reboot
	// request for the reboot sentinel, and nothing else.
	t.Run("issue 31: the reboot sentinel's requests", func(t *testing.T) {
		sentinel := func(node, class, extra string) string {
			return fmt.Sprintf("apiVersion: lull.dev/v1alpha1\nkind: NodeMaintenance\nmetadata: {name: %s, annotations: {lull.dev/requested-by: reboot-sentinel}}\n"+
				"spec: {nodeName: %s, classes: [%s], reason: 'reboot required: /var/run/reboot-required'%s}\n", node, node, class, extra)
		}
		own := refusedBy("lull-agent-requests", "may request maintenance only of its own node")
		only := refusedBy("lull-agent-requests", "may request only a reboot for its reboot sentinel")
		g.steps(t, []guardStep{
			{name: "the sentinel guard is active (a dry run)", as: agentOn("n1"), args: []string{"create", "--dry-run=server", "-f", g.file("s-probe.yaml", sentinel("n6", "reboot-required", ""))},
				refused: own, eventually: true},
			{name: "the agent requests a reboot of its node", as: agentOn("n5"), args: []string{"create", "-f", g.file("s-n5.yaml", sentinel("n5", "reboot-required", ""))}},
			{name: "not of another node", as: agentOn("n1"), args: []string{"create", "-f", g.file("s-n6.yaml", sentinel("n6", "reboot-required", ""))}, refused: own},
			{name: "not another class", as: agentOn("n6"), args: []string{"create", "-f", g.file("s-k.yaml", sentinel("n6", "kernel-update", ""))}, refused: only},
			{name: "no deadline", as: agentOn("n6"), args: []string{"create", "-f", g.file("s-d.yaml", sentinel("n6", "reboot-required", ", deadline: '2030-01-01T00:00:00Z'"))},
				refused: []string{"is forbidden: ValidatingAdmissionPolicy"}}, // lull-agent-requests or lull-emergency-options, whichever is asked first
			{name: "no finalizer of its own", as: agentOn("n6"), args: []string{"create", "-f", g.file("s-f.yaml",
				strings.Replace(sentinel("n6", "reboot-required", ""), "metadata: {", "metadata: {finalizers: [example.com/hold], ", 1))}, refused: only},
			{name: "not unannotated", as: agentOn("n6"), args: []string{"create", "-f", g.file("s-a.yaml", nodeMaintenance("n6", ""))}, refused: only},
			{name: "no token bound to a node", as: serviceAccount("lull-system", "lull-agent", ""), args: []string{"create", "-f", g.file("s-n6b.yaml", sentinel("n6", "reboot-required", ""))},
				refused: refusedBy("lull-agent-requests")},
			{name: "it may not change its request", as: agentOn("n5"), args: mergePatch("nodemaintenance", "n5", `{"spec":{"reason":"x"}}`),
				refused: refusedBy("lull-nodemaintenances", "may create, update or delete NodeMaintenances")},
			{name: "it withdraws its request before it starts", as: agentOn("n5"), args: []string{"delete", "nodemaintenance", "n5", "--wait=false"}},
			{name: "a maintainer requests maintenance of n5", as: mo, args: []string{"create", "-f", g.file("nm-n5.yaml", nodeMaintenance("n5", ""))}},
			{name: "the agent cannot end it", as: agentOn("n5"), args: []string{"delete", "nodemaintenance", "n5", "--wait=false"},
				refused: refusedBy("lull-agent-requests", "may delete only its reboot-sentinel request that has not started, or a finished record")},
			{name: "lull-drainer completes it", as: drainer, args: statusPatch("nodemaintenance", "n5", `{"status":{"phase":"Completed"}}`)},
			{name: "the agent reports its sentinel on it", as: agentOn("n5"), args: statusPatch("nodemaintenance", "n5",
				`{"status":{"conditions":[{"type":"RebootSentinel","status":"True","reason":"StillPresent","message":"still there","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`)},
			{name: "no other condition", as: agentOn("n5"), args: statusPatch("nodemaintenance", "n5",
				`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"X","message":"x","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`),
				refused: refusedBy("lull-agent", "status.conditions")},
			{name: "the agent replaces the finished record", as: agentOn("n5"), args: []string{"delete", "nodemaintenance", "n5", "--wait=false"}},
		})
	})

	// Finding 3: deleting a NodeMaintenance (one or a collection) needed
	// only RBAC, and the drainer then ended the request mid-work; its
	// status (whether lull cordoned the node, its windows, its lease) was
	// anyone's to rewrite.
	t.Run("finding 3: ending a request and its record", func(t *testing.T) {
		notYours := refusedBy("lull-nodemaintenances", "may create, update or delete NodeMaintenances")
		record := refusedBy("lull-nodemaintenance-status", "only lull-drainer and lull-agent write it")
		g.steps(t, []guardStep{
			{name: "a maintainer requests maintenance", as: mo, args: []string{"create", "-f", g.file("nm-n2.yaml", nodeMaintenance("n2", ""))}},
			{name: "an operator cannot delete it", as: alice, args: []string{"delete", "nodemaintenance", "n2", "--wait=false"}, refused: notYours},
			{name: "an operator cannot delete them all (kubectl)", as: alice, args: []string{"delete", "nodemaintenances", "--all", "--wait=false"}, refused: notYours},
			{name: "an operator cannot delete the collection (deletecollection)", as: alice,
				args: []string{"delete", "--raw", "/apis/lull.dev/v1alpha1/nodemaintenances"}, refused: notYours},
			{name: "an operator cannot rewrite its record", as: alice, args: statusPatch("nodemaintenance", "n2", `{"status":{"cordonedByLull":true}}`), refused: record},
			{name: "nor can a member of both groups", as: em, args: statusPatch("nodemaintenance", "n2", `{"status":{"phase":"Completed"}}`), refused: record},
			{name: "lull-drainer records progress", as: drainer, args: statusPatch("nodemaintenance", "n2", `{"status":{"phase":"WaitingForWindow"}}`)},
			{name: "lull-drainer deletes a finished request", as: drainer, args: []string{"delete", "nodemaintenance", "n2", "--wait=false"}},
			{name: "a maintainer requests again", as: mo, args: []string{"create", "-f", g.file("nm-n2.yaml", nodeMaintenance("n2", ""))}},
			{name: "a maintainer deletes it", as: mo, args: []string{"delete", "nodemaintenance", "n2", "--wait=false"}},
		})
	})

	// Finding 5: only a grace period of 0 was reserved; 1 second did the
	// same, and a podSelector that matched nothing left every pod on a
	// node that was then rebooted.
	t.Run("finding 5: grace periods and pod selectors are emergency powers", func(t *testing.T) {
		emergency := func(what string) []string {
			return refusedBy("lull-emergency-options", "only members of group \""+framework.GuardEmergency+"\" may set "+what+" on a NodeMaintenance")
		}
		nm := func(spec string) string { return g.file("nm-n3.yaml", nodeMaintenance("n3", spec)) }
		g.steps(t, []guardStep{
			{name: "a maintainer cannot ask for a grace period of 1 s", as: mo, args: []string{"create", "-f", nm(", drain: {gracePeriodSeconds: 1}")},
				refused: emergency("spec.drain.gracePeriodSeconds")},
			{name: "a maintainer cannot narrow the drain to a pod selector", as: mo,
				args: []string{"create", "-f", nm(", drain: {podSelector: {matchLabels: {app: nothing}}}")}, refused: emergency("spec.drain.podSelector")},
			{name: "a maintainer requests maintenance", as: mo, args: []string{"create", "-f", nm("")}},
			{name: "a maintainer cannot add a long grace period", as: mo, args: mergePatch("nodemaintenance", "n3", `{"spec":{"drain":{"gracePeriodSeconds":3600}}}`),
				refused: emergency("spec.drain.gracePeriodSeconds")},
			{name: "a maintainer may set the drain's timeout and Abort", as: mo, args: mergePatch("nodemaintenance", "n3", `{"spec":{"drain":{"timeout":"20m","escalation":"Abort"}}}`)},
			{name: "an emergency member sets both", as: em,
				args: mergePatch("nodemaintenance", "n3", `{"spec":{"drain":{"gracePeriodSeconds":1,"podSelector":{"matchLabels":{"app":"nothing"}}}}}`)},
			{name: "a maintainer updates the request, keeping them", as: mo, args: mergePatch("nodemaintenance", "n3", `{"spec":{"reason":"ticket 9"}}`)},
			{name: "a maintainer cannot widen the selector's reach", as: mo,
				args: mergePatch("nodemaintenance", "n3", `{"spec":{"drain":{"podSelector":{"matchLabels":{"app":"other"}}}}}`), refused: emergency("spec.drain.podSelector")},
			{name: "a maintainer cannot shorten the grace period", as: mo, args: mergePatch("nodemaintenance", "n3", `{"spec":{"drain":{"gracePeriodSeconds":0}}}`),
				refused: emergency("spec.drain.gracePeriodSeconds")},
			{name: "a maintainer removes them", as: mo, args: mergePatch("nodemaintenance", "n3", `{"spec":{"drain":{"gracePeriodSeconds":null,"podSelector":null}}}`)},
			{name: "a maintainer deletes the request", as: mo, args: []string{"delete", "nodemaintenance", "n3", "--wait=false"}},
		})
	})

	// Finding 6: a window override Permissive (a deadline for every node
	// of the window), a budget of every node, a Force escalation in a
	// policy and host actions disguised as service restarts were admitted
	// for anyone RBAC let write windows and policies.
	t.Run("finding 6: windows", func(t *testing.T) {
		emergency := func(what string) []string {
			return refusedBy("lull-maintenancewindows", "only members of group \""+framework.GuardEmergency+"\" may set "+what+" on a MaintenanceWindow")
		}
		window := func(name, spec string) string {
			return g.file("mw-"+name+".yaml", fmt.Sprintf("apiVersion: lull.dev/v1alpha1\nkind: MaintenanceWindow\nmetadata: {name: %s}\nspec:\n  nodeSelector: {matchLabels: {pool: %s}}\n  strategy: Restrictive\n%s", name, name, spec))
		}
		const open = `{"spec":{"override":{"strategy":"Permissive","until":"2030-01-01T00:00:00Z","reason":"incident 7"}}}`
		g.steps(t, []guardStep{
			{name: "a maintainer cannot create a window opened by an override", as: mo,
				args: []string{"create", "-f", window("w-open", "  override: {strategy: Permissive, until: '2030-01-01T00:00:00Z'}\n")}, refused: emergency("spec.override.strategy: Permissive")},
			{name: "a maintainer cannot create a window for every node at once", as: mo,
				args: []string{"create", "-f", window("w-all", "  maxUnavailable: 100%\n")}, refused: emergency("spec.maxUnavailable of 100% or more")},
			{name: "nor with a count of nodes at the bound", as: mo,
				args: []string{"create", "-f", window("w-all", "  maxUnavailable: 10\n")}, refused: emergency("spec.maxUnavailable of 10 or more")},
			{name: "a maintainer creates an always-open window (a calendar entry)", as: mo,
				args: []string{"create", "-f", g.file("mw-always.yaml", "apiVersion: lull.dev/v1alpha1\nkind: MaintenanceWindow\nmetadata: {name: w-always}\nspec: {nodeSelector: {matchLabels: {pool: canary}}, strategy: Permissive, maxUnavailable: 2}\n")}},
			{name: "a maintainer creates a closed window", as: mo, args: []string{"create", "-f", window("w", "  maxUnavailable: 99%\n")}},
			{name: "a maintainer freezes it", as: mo, args: mergePatch("maintenancewindow", "w", `{"spec":{"override":{"strategy":"Restrictive","until":"2030-01-01T00:00:00Z"}}}`)},
			{name: "a maintainer cannot open it by override", as: mo, args: mergePatch("maintenancewindow", "w", open), refused: emergency("spec.override.strategy: Permissive")},
			{name: "a maintainer cannot raise its budget to every node", as: mo, args: mergePatch("maintenancewindow", "w", `{"spec":{"maxUnavailable":"100%"}}`),
				refused: emergency("spec.maxUnavailable of 100% or more")},
			{name: "an emergency member opens it", as: em, args: mergePatch("maintenancewindow", "w", open)},
			{name: "a maintainer edits it, keeping the override", as: mo, args: mergePatch("maintenancewindow", "w", `{"spec":{"minTimeRemaining":"10m"}}`)},
			{name: "a maintainer cannot extend the opening", as: mo, args: mergePatch("maintenancewindow", "w", `{"spec":{"override":{"until":"2031-01-01T00:00:00Z"}}}`),
				refused: emergency("a later spec.override.until of a Permissive override")},
			{name: "a maintainer cannot extend it to other nodes", as: mo, args: mergePatch("maintenancewindow", "w", `{"spec":{"nodeSelector":{"matchLabels":{"pool":"general"}}}}`),
				refused: emergency("a new spec.nodeSelector of a window with a Permissive override")},
			{name: "a maintainer shortens the opening", as: mo, args: mergePatch("maintenancewindow", "w", `{"spec":{"override":{"until":"2029-01-01T00:00:00Z"}}}`)},
			{name: "a maintainer ends it", as: mo, args: mergePatch("maintenancewindow", "w", `{"spec":{"override":null}}`)},
			{name: "an emergency member sets a budget of every node", as: em, args: mergePatch("maintenancewindow", "w", `{"spec":{"maxUnavailable":"100%"}}`)},
			{name: "a maintainer lowers it", as: mo, args: mergePatch("maintenancewindow", "w", `{"spec":{"maxUnavailable":"50%"}}`)},
			{name: "a maintainer cannot make it a count at the bound", as: mo, args: mergePatch("maintenancewindow", "w", `{"spec":{"maxUnavailable":25}}`),
				refused: emergency("spec.maxUnavailable of 10 or more")},
		})
	})

	t.Run("finding 6: policies", func(t *testing.T) {
		policyFile := func(name, rules string) string {
			return g.file("dp-"+name+".yaml", fmt.Sprintf("apiVersion: lull.dev/v1alpha1\nkind: DisruptionPolicy\nmetadata: {name: %s}\nspec:\n  priority: 10\n  rules:\n%s", name, rules))
		}
		hostAction := func(unit string) []string {
			return refusedBy("lull-disruptionpolicies", "RestartService cannot restart "+unit, "use a Reboot or PowerOff step")
		}
		undrained := func(unit string) []string {
			return refusedBy("lull-disruptionpolicies", "RestartService of "+unit, "disrupts every pod on the node", "lull-system/lull-admission")
		}
		force := refusedBy("lull-disruptionpolicies", "only members of group \""+framework.GuardEmergency+"\" may create or change a DisruptionPolicy with a rule whose drain.escalation is Force")
		restart := func(unit string, more ...string) string {
			steps := append([]string{"{type: RestartService, unit: " + unit + "}"}, more...)
			return "  - {name: r, class: c, steps: [" + strings.Join(steps, ", ") + "]}\n"
		}
		const forceRule = "  - {name: stuck, classPattern: '*', steps: [{type: Drain}], drain: {timeout: 10m, escalation: Force}}\n"
		g.steps(t, []guardStep{
			{name: "reboot.target is a reboot, not a restart", as: em, args: []string{"create", "-f", policyFile("p1", restart("reboot.target"))}, refused: hostAction("reboot.target (rule r)")},
			{name: "poweroff.target, even with a drain", as: em, args: []string{"create", "-f", policyFile("p1", restart("poweroff.target", "{type: Drain}"))},
				refused: hostAction("poweroff.target (rule r)")},
			{name: "systemd-reboot.service", as: em, args: []string{"create", "-f", policyFile("p1", restart("systemd-reboot"))}, refused: hostAction("systemd-reboot.service (rule r)")},
			// Issue 43: exit (a power-off outside a container) and sleep,
			// and a name with spaces around it, are the same doors.
			{name: "systemd-exit, bare", as: em, args: []string{"create", "-f", policyFile("p1", restart("systemd-exit"))}, refused: hostAction("systemd-exit.service (rule r)")},
			{name: "systemd-suspend", as: em, args: []string{"create", "-f", policyFile("p1", restart("systemd-suspend.service"))}, refused: hostAction("systemd-suspend.service (rule r)")},
			{name: "a reload is judged as a restart", as: em, args: []string{"create", "-f", policyFile("p1", "  - {name: r, class: c, steps: [{type: ReloadService, unit: systemd-hibernate}]}\n")},
				refused: hostAction("systemd-hibernate.service (rule r)")},
			{name: "a mount without a drain", as: em, args: []string{"create", "-f", policyFile("p1", restart("var-lib-kubelet.mount"))}, refused: undrained("var-lib-kubelet.mount (rule r)")},
			{name: "dbus without a drain", as: em, args: []string{"create", "-f", policyFile("p1", restart("dbus"))}, refused: undrained("dbus.service (rule r)")},
			{name: "kubelet without a drain, whoever asks", as: em, args: []string{"create", "-f", policyFile("p1", restart("kubelet"))}, refused: undrained("kubelet.service (rule r)")},
			{name: "containerd.service without a drain", as: mo, args: []string{"create", "-f", policyFile("p1", restart("containerd.service"))},
				refused: undrained("containerd.service (rule r)")},
			{name: "a maintainer restarts containerd on a drained node", as: mo, args: []string{"create", "-f", policyFile("p1", restart("containerd.service", "{type: Drain}"))}},
			{name: "a maintainer restarts chronyd without a drain", as: mo, args: []string{"create", "-f", policyFile("p2", restart("chronyd"))}},
			{name: "a maintainer cannot add a Force escalation", as: mo, args: []string{"create", "-f", policyFile("p3", forceRule)}, refused: force},
			{name: "an emergency member adds it", as: em, args: []string{"create", "-f", policyFile("p3", forceRule)}},
			{name: "a maintainer labels that policy", as: mo, args: []string{"label", "disruptionpolicy", "p3", "team=ops"}},
			{name: "a maintainer cannot change what reaches the Force rule", as: mo, args: mergePatch("disruptionpolicy", "p3", `{"spec":{"priority":20}}`), refused: force},
			{name: "a maintainer removes the Force rule", as: mo,
				args: mergePatch("disruptionpolicy", "p3", `{"spec":{"rules":[{"name":"stuck","classPattern":"*","steps":[{"type":"Drain"}],"drain":{"timeout":"10m","escalation":"Wait"}}]}}`)},
		})
	})

	// Issue 32: lull-drainer creates the policy it ships, and no other;
	// it cannot give that policy a Force rule either.
	t.Run("issue 32: the drainer writes only the shipped policy", func(t *testing.T) {
		only := refusedBy("lull-disruptionpolicies", `lull-drainer may write only the DisruptionPolicy "default" it ships, not "site"`)
		g.steps(t, []guardStep{
			{name: "the policy guard is active (a dry run)", as: drainer, args: []string{"create", "--dry-run=server", "-f",
				g.file("dp-site-probe.yaml", "apiVersion: lull.dev/v1alpha1\nkind: DisruptionPolicy\nmetadata: {name: site}\nspec: {rules: [{name: r, class: c, action: Drain}]}\n")},
				refused: only, eventually: true},
			{name: "lull-drainer creates the shipped policy", as: drainer, args: []string{"create", "-f", g.file("dp-default.yaml", string(policy.ShippedYAML()))}},
			{name: "and restores its spec", as: drainer, args: mergePatch("disruptionpolicy", "default", `{"spec":{"priority":-100}}`)},
			{name: "but no Force rule in it", as: drainer, args: mergePatch("disruptionpolicy", "default",
				`{"spec":{"rules":[{"name":"stuck","classPattern":"*","steps":[{"type":"Drain"}],"drain":{"timeout":"10m","escalation":"Force"}}]}}`),
				refused: refusedBy("lull-disruptionpolicies", "drain.escalation is Force")},
			{name: "nor any other policy", as: drainer, args: []string{"create", "-f", g.file("dp-site.yaml",
				"apiVersion: lull.dev/v1alpha1\nkind: DisruptionPolicy\nmetadata: {name: site}\nspec: {rules: [{name: r, class: c, action: Drain}]}\n")},
				refused: only},
			{name: "nor delete the shipped one", as: drainer, args: []string{"delete", "disruptionpolicy", "default"},
				refused: []string{"forbidden"}},
		})
	})

	// Issue 31: a window's status says what its health gates found, and a
	// node's gate trusts it: nobody but lull-drainer writes it, a cluster
	// admin included.
	t.Run("issue 31: a window's gate findings are lull-drainer's", func(t *testing.T) {
		quiet := `{"status":{"conditions":[{"type":"AlertsQuiet","status":"True","reason":"AlertsQuiet","message":"forged","lastTransitionTime":"2026-01-01T00:00:00Z","observedGeneration":1}],"alerts":{"checkedAt":"2030-01-01T00:00:00Z"}}}`
		only := refusedBy("lull-maintenancewindow-status", "only lull-drainer writes it")
		g.steps(t, []guardStep{
			{name: "a maintainer creates a gated window", as: mo, args: []string{"create", "-f", g.file("mw-gated.yaml",
				"apiVersion: lull.dev/v1alpha1\nkind: MaintenanceWindow\nmetadata: {name: gated}\nspec:\n  strategy: Restrictive\n  gates: {alerts: {url: 'http://prometheus.monitoring:9090'}}\n")}},
			{name: "the status guard is active (a dry run)", args: append(statusPatch("maintenancewindow", "gated", quiet), "--dry-run=server"),
				refused: only, eventually: true},
			{name: "the cluster admin cannot say no alert fires", args: statusPatch("maintenancewindow", "gated", quiet), refused: only},
			{name: "lull-drainer records what it found", as: drainer, args: statusPatch("maintenancewindow", "gated", quiet)},
		})
	})

	// The default list of node-critical units is the planner's, which
	// drains before restarting one (internal/policy.NodeCriticalUnits).
	t.Run("finding 6: critical units are the planner's", func(t *testing.T) {
		got := strings.Split(g.jsonpath(t, "{.data.criticalUnits}", "-n", "lull-system", "get", "configmap", "lull-admission"), ",")
		if !slices.Equal(got, policy.NodeCriticalUnits) {
			t.Errorf("lull-admission criticalUnits = %v, want internal/policy.NodeCriticalUnits %v", got, policy.NodeCriticalUnits)
		}
		// And the guard's host-action units are the planner's: each of
		// internal/policy.HostActionUnits, however spelled, is refused.
		for _, unit := range policy.HostActionUnits {
			bare := strings.TrimSuffix(unit, ".service")
			f := g.file("dp-ha.yaml", "apiVersion: lull.dev/v1alpha1\nkind: DisruptionPolicy\nmetadata: {name: ha}\nspec:\n  rules:\n"+
				"  - {name: r, class: c, steps: [{type: RestartService, unit: "+bare+"}]}\n")
			out, err := g.kubectl(append(append([]string{}, em...), "create", "--dry-run=server", "-f", f)...)
			if err == nil || !strings.Contains(err.Error(), "RestartService cannot restart "+unit) {
				t.Errorf("the guard let RestartService %s through (internal/policy.HostActionUnits names it): %v %s", bare, err, out)
			}
			// Issue 43, finding 1: nor may a request name it as a
			// changed unit (a restart in disguise).
			nm := g.file("nm-ha.yaml", "apiVersion: lull.dev/v1alpha1\nkind: NodeMaintenance\nmetadata: {name: n2}\nspec:\n  nodeName: n2\n"+
				"  changes: {units: [chronyd, "+bare+"]}\n")
			out, err = g.kubectl(append(append([]string{}, mo...), "create", "--dry-run=server", "-f", nm)...)
			if err == nil || !strings.Contains(err.Error(), "spec.changes.units names "+unit+", which takes the node down when started") {
				t.Errorf("the guard let a request with spec.changes.units [%s] through: %v %s", bare, err, out)
			}
		}
		nm := g.file("nm-ok.yaml", "apiVersion: lull.dev/v1alpha1\nkind: NodeMaintenance\nmetadata: {name: n2}\nspec:\n  nodeName: n2\n  changes: {units: [chronyd, multi-user.target]}\n")
		if out, err := g.kubectl(append(append([]string{}, mo...), "create", "--dry-run=server", "-f", nm)...); err != nil {
			t.Errorf("a request changing chronyd and a target (a drained reboot) is refused: %v %s", err, out)
		}
	})

	// Finding 7, admission part: lull-scheduler's and lull-drainer's
	// create right in lull-system (RBAC cannot name what is created) no
	// longer reaches each other's leader lease or an agent's heartbeat;
	// a heartbeat cannot claim years; lull-agent writes only its steps'
	// state, times, boot ID and message.
	t.Run("finding 7: lull's own leases and the agent's record", func(t *testing.T) {
		lease := func(name string, seconds int) string {
			return g.file("lease-"+name+".yaml", fmt.Sprintf("apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: %s, namespace: lull-system}\nspec: {holderIdentity: x, leaseDurationSeconds: %d}\n", name, seconds))
		}
		component := func(name, owner string) []string {
			return refusedBy("lull-component-leases", "lease lull-system/"+name, `only its ServiceAccount (user "system:serviceaccount:lull-system:`+owner+`")`)
		}
		maxSeconds := int(agentlease.MaxDuration / time.Second)
		agent := refusedBy("lull-agent", "may change only the state, times, boot ID and message of the steps")
		// The drainer's record of a request that reached its host steps.
		record := `{"status":{"phase":"Acting","cordonedByLull":true,"wasUnschedulable":false,"startedAt":"2026-01-01T00:00:00Z",` +
			`"leaseHolder":"lull-drainer/a","windows":["w"],"nodeAnnotations":["karpenter.sh/do-not-disrupt"],"lastError":"",` +
			`"actions":[{"type":"RestartService","unit":"chronyd","timeout":"5m","state":"Pending"}]}}`
		g.steps(t, []guardStep{
			{name: "lull-scheduler cannot create an agent's heartbeat", as: sched, args: []string{"create", "-f", lease("lull-agent-n4", 40)}, refused: component("lull-agent-n4", "lull-agent")},
			{name: "lull-scheduler cannot create lull-drainer's leader lease", as: sched, args: []string{"create", "-f", lease("lull-drainer", 15)}, refused: component("lull-drainer", "lull-drainer")},
			{name: "lull-drainer cannot create lull-scheduler's", as: drainer, args: []string{"create", "-f", lease("lull-scheduler", 15)}, refused: component("lull-scheduler", "lull-scheduler")},
			{name: "an operator cannot forge a heartbeat", as: alice, args: []string{"create", "-f", lease("lull-agent-n4", 40)}, refused: component("lull-agent-n4", "lull-agent")},
			{name: "lull-scheduler creates its own", as: sched, args: []string{"create", "-f", lease("lull-scheduler", 15)}},
			{name: "lull-drainer creates its own", as: drainer, args: []string{"create", "-f", lease("lull-drainer", 15)}},
			{name: "an agent's heartbeat cannot claim 68 years", as: agentOn("n4"), args: []string{"create", "-f", lease("lull-agent-n4", 2147483647)},
				refused: refusedBy("lull-component-leases", fmt.Sprintf("its leaseDurationSeconds may be at most %d", maxSeconds))},
			{name: "an agent creates its heartbeat", as: agentOn("n4"), args: []string{"create", "-f", lease("lull-agent-n4", 40)}},
			{name: "it cannot write another node's", as: agentOn("n4"), args: []string{"create", "-f", lease("lull-agent-n1", 40)},
				refused: refusedBy("lull-agent", "lull-agent on node n4 may write only its own lease lull-system/lull-agent-n4, not lull-system/lull-agent-n1")},
			// Two policies refuse it; the API server reports either.
			{name: "nor lull-drainer's leader lease", as: agentOn("n4"), args: []string{"-n", "lull-system", "annotate", "lease", "lull-drainer", "e2e=agent"},
				refused: []string{"denied request", "lull-system/lull-drainer"}},
			{name: "nor can it stretch it", as: agentOn("n4"), args: mergePatch("lease", "lull-agent-n4", fmt.Sprintf(`{"spec":{"leaseDurationSeconds":%d}}`, maxSeconds+1), "-n", "lull-system"),
				refused: refusedBy("lull-component-leases", "leaseDurationSeconds may be at most")},
			{name: "a maintainer requests maintenance", as: mo, args: []string{"create", "-f", g.file("nm-n4.yaml", nodeMaintenance("n4", ""))}},
			{name: "lull-drainer records the steps", as: drainer, args: statusPatch("nodemaintenance", "n4", record)},
			{name: "the agent records its step running", as: agentOn("n4"),
				args: statusPatch("nodemaintenance", "n4", `{"status":{"actions":[{"type":"RestartService","unit":"chronyd","timeout":"5m","state":"Running","startedAt":"2026-01-01T00:01:00Z"}]}}`)},
			{name: "it cannot say lull did not cordon the node", as: agentOn("n4"), args: statusPatch("nodemaintenance", "n4", `{"status":{"cordonedByLull":false}}`),
				refused: append(agent, "status.cordonedByLull")},
			{name: "nor that the node was unschedulable before", as: agentOn("n4"), args: statusPatch("nodemaintenance", "n4", `{"status":{"wasUnschedulable":true}}`),
				refused: append(agent, "status.wasUnschedulable")},
			{name: "nor move the start", as: agentOn("n4"), args: statusPatch("nodemaintenance", "n4", `{"status":{"startedAt":"2025-01-01T00:00:00Z"}}`),
				refused: append(agent, "status.startedAt")},
			{name: "nor write the last error", as: agentOn("n4"), args: statusPatch("nodemaintenance", "n4", `{"status":{"lastError":"forged"}}`),
				refused: append(agent, "status.lastError")},
			{name: "nor the lease holder", as: agentOn("n4"), args: statusPatch("nodemaintenance", "n4", `{"status":{"leaseHolder":"someone"}}`),
				refused: append(agent, "status.leaseHolder")},
			{name: "nor the windows it started under", as: agentOn("n4"), args: statusPatch("nodemaintenance", "n4", `{"status":{"windows":null}}`),
				refused: append(agent, "status.windows")},
			{name: "nor the default budget", as: agentOn("n4"), args: statusPatch("nodemaintenance", "n4", `{"status":{"defaultBudget":true}}`),
				refused: append(agent, "status.defaultBudget")},
			{name: "nor the annotations lull set", as: agentOn("n4"), args: statusPatch("nodemaintenance", "n4", `{"status":{"nodeAnnotations":null}}`),
				refused: append(agent, "status.nodeAnnotations")},
			{name: "nor a step's unit", as: agentOn("n4"),
				args:    statusPatch("nodemaintenance", "n4", `{"status":{"actions":[{"type":"RestartService","unit":"kubelet","timeout":"5m","state":"Running"}]}}`),
				refused: append(agent, "the list of steps")},
			{name: "the agent records its step done", as: agentOn("n4"),
				args: statusPatch("nodemaintenance", "n4", `{"status":{"actions":[{"type":"RestartService","unit":"chronyd","timeout":"5m","state":"Succeeded","startedAt":"2026-01-01T00:01:00Z","finishedAt":"2026-01-01T00:02:00Z","message":"restarted"}]}}`)},
			{name: "another node's agent cannot", as: agentOn("n1"), args: statusPatch("nodemaintenance", "n4", `{"status":{"actions":[]}}`),
				refused: refusedBy("lull-agent", "may record steps only on the NodeMaintenance of its own node")},
		})
		if got := g.jsonpath(t, "{.status.cordonedByLull} {.status.windows} {.status.actions[0].state}", "get", "nodemaintenance", "n4"); got != `true ["w"] Succeeded` {
			t.Errorf("n4's record at the end: %s, want true [\"w\"] Succeeded", got)
		}
	})

	// Finding 7, RBAC part: what each account may do, as docs/install.md
	// ("What the RBAC grants") says, asked as an admin would (kubectl auth
	// can-i).
	t.Run("finding 7: RBAC as docs/install.md says", func(t *testing.T) {
		// The bindings manifests/install/maintainer.yaml tells admins to
		// create.
		g.must("create", "clusterrolebinding", "lull-maintainers", "--clusterrole=lull-maintainer", "--group="+framework.GuardMaintainers)
		g.must("-n", "lull-leases", "create", "rolebinding", "lull-maintainers", "--role=lull-maintainer", "--group="+framework.GuardMaintainers)
		g.must("-n", "lull-system", "create", "rolebinding", "lull-maintainers", "--role=lull-maintainer", "--group="+framework.GuardMaintainers)
		g.must("-n", "lull-configs", "create", "rolebinding", "lull-maintainers", "--role=lull-maintainer", "--group="+framework.GuardMaintainers)
		for _, r := range framework.Rights {
			if got := g.canI(t, r); got != r.Want {
				t.Errorf("%s %s %s (namespace %q): can-i says %v, docs/install.md says %v", r.Account, r.Verb, r.Resource, r.Namespace, got, r.Want)
			}
		}
	})

	// lull-scheduler's own ClusterRole is the built-in system:kube-scheduler
	// of this Kubernetes version without its Leases and LeaseCandidates,
	// plus reading lull's objects: nothing more, nothing less.
	t.Run("finding 7: lull-scheduler's role is kube-scheduler's without leases", func(t *testing.T) {
		builtin := g.ruleSet(t, "system:kube-scheduler")
		ours := g.ruleSet(t, "lull-scheduler")
		for r := range builtin {
			if strings.HasPrefix(r, "coordination.k8s.io/leases") || strings.HasPrefix(r, "coordination.k8s.io/leasecandidates") {
				continue
			}
			if !ours[r] {
				t.Errorf("lull-scheduler lacks %s, which system:kube-scheduler grants", r)
			}
		}
		for r := range ours {
			if !builtin[r] && !strings.HasPrefix(r, "lull.dev/") {
				t.Errorf("lull-scheduler grants %s, which system:kube-scheduler does not", r)
			}
			if strings.HasPrefix(r, "coordination.k8s.io/") {
				t.Errorf("lull-scheduler's ClusterRole grants %s: its leases are its Roles'", r)
			}
		}
	})
}

// ruleSet expands a ClusterRole's rules into group/resource verb [names]
// strings.
func (g *guarded) ruleSet(t *testing.T, role string) map[string]bool {
	t.Helper()
	var cr struct {
		Rules []struct {
			APIGroups       []string `json:"apiGroups"`
			Resources       []string `json:"resources"`
			Verbs           []string `json:"verbs"`
			ResourceNames   []string `json:"resourceNames"`
			NonResourceURLs []string `json:"nonResourceURLs"`
		} `json:"rules"`
	}
	if err := json.Unmarshal([]byte(g.must("get", "clusterrole", role, "-o", "json")), &cr); err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, r := range cr.Rules {
		for _, grp := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					names := ""
					if len(r.ResourceNames) > 0 {
						names = " " + strings.Join(slices.Sorted(slices.Values(r.ResourceNames)), ",")
					}
					set[fmt.Sprintf("%s/%s %s%s", grp, res, v, names)] = true
				}
			}
		}
		for _, u := range r.NonResourceURLs {
			for _, v := range r.Verbs {
				set[u+" "+v] = true
			}
		}
	}
	if len(set) == 0 {
		t.Fatalf("ClusterRole %s has no rules", role)
	}
	return set
}

// canI asks kubectl auth can-i as the right's account.
func (g *guarded) canI(t *testing.T, r framework.Right) bool {
	t.Helper()
	out, _ := g.kubectl(r.CanI()...) // exit 1 means "no"
	_, yes := framework.CanIAnswer(out)
	return yes
}

// Finding 8: the agent's policy named lull-agent's user in lull-system, so
// installing lull in another namespace left the agent unrestricted. Now
// no policy spells out lull's namespace: the guard follows it with
// kustomize (an overlay's namespace, which also moves the bindings'
// paramRef to the moved lull-admission ConfigMap) and with Helm
// (namespace).
func TestGuardFollowsNamespace(t *testing.T) {
	const ns = "night"
	lease := func(g *guarded, node string) string {
		return g.file("lease-"+node+".yaml", fmt.Sprintf("apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: lull-agent-%s, namespace: %s}\nspec: {holderIdentity: x, leaseDurationSeconds: 40}\n", node, ns))
	}
	// rbac: the agent's groups beyond its own (the kustomize case installs
	// the guard only, not the agent's RBAC).
	steps := func(g *guarded, rbac ...string) []guardStep {
		agent := func(node string) []string { return append(serviceAccount(ns, "lull-agent", node), rbac...) }
		return []guardStep{
			{name: "an agent cannot write another node's heartbeat", as: agent("n1"), args: []string{"create", "-f", lease(g, "n2")},
				refused: refusedBy("lull-agent", "lull-agent on node n1 may write only its own lease "+ns+"/lull-agent-n1")},
			{name: "an agent writes its own", as: agent("n1"), args: []string{"create", "-f", lease(g, "n1")}},
			{name: "a maintainer requests maintenance", as: mo, args: []string{"create", "-f", g.file("nm-n1.yaml", nodeMaintenance("n1", ""))}},
			{name: "the status guard is active (a dry run)", as: append(serviceAccount("lull-system", "lull-drainer", ""), "--as-group="+framework.GuardOperators),
				args: append(statusPatch("nodemaintenance", "n1", `{"status":{"phase":"Completed"}}`), "--dry-run=server"), refused: refusedBy("lull-nodemaintenance-status"), eventually: true},
			{name: "lull-drainer of " + ns + " records progress", as: append(serviceAccount(ns, "lull-drainer", ""), "--as-group="+framework.GuardOperators),
				args: statusPatch("nodemaintenance", "n1", `{"status":{"phase":"Pending"}}`)},
			{name: "lull-drainer of lull-system is not lull's drainer here", as: append(serviceAccount("lull-system", "lull-drainer", ""), "--as-group="+framework.GuardOperators),
				args: statusPatch("nodemaintenance", "n1", `{"status":{"phase":"Completed"}}`), refused: refusedBy("lull-nodemaintenance-status")},
			{name: "an agent cannot change its request's record", as: append(agent("n1"), "--as-group="+framework.GuardOperators),
				args: statusPatch("nodemaintenance", "n1", `{"status":{"phase":"Completed"}}`), refused: refusedBy("lull-agent", "status.phase")},
		}
	}

	t.Run("kustomize", func(t *testing.T) {
		g := &guarded{t: t, kubeconfig: apiServer(t), dir: t.TempDir()}
		g.applyCRDs()
		overlay := filepath.Join(g.dir, "overlay")
		if err := os.Mkdir(overlay, 0o755); err != nil {
			t.Fatal(err)
		}
		base, err := filepath.Rel(overlay, filepath.Join(framework.RepoRoot(), "manifests", "admission"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte("namespace: "+ns+"\nresources:\n- "+base+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		rendered := g.must("kustomize", overlay)
		objs := objects(t, "the admission guard with namespace "+ns, rendered)
		if _, ok := objs["v1/ConfigMap/"+ns+"/lull-admission"]; !ok {
			t.Fatalf("no ConfigMap %s/lull-admission; rendered:\n%s", ns, strings.Join(keys(objs), "\n"))
		}
		for k, o := range objs {
			if get(t, o, "kind") != "ValidatingAdmissionPolicyBinding" {
				continue
			}
			if ref, ok := get(t, o, "spec").(map[string]any)["paramRef"]; ok {
				if got := get(t, ref, "namespace"); got != ns {
					t.Errorf("%s: paramRef.namespace %v, want %s", k, got, ns)
				}
			}
		}
		if strings.Contains(rendered, "lull-system") {
			t.Errorf("the guard moved to %s still names lull-system:\n%s", ns, rendered)
		}
		g.must("create", "namespace", ns)
		g.must("apply", "--server-side", "-f", g.file("guard.yaml", rendered))
		g.must("create", "-f", g.file("nodes.yaml", guardNodes("n1", "n2")))
		g.operators(append(append([]string{}, alice...), "label", "node", "n1", "lull.dev/maintenance=x", "--dry-run=server"), "lull-maintenance-label")
		g.steps(t, steps(g, "--as-group="+framework.GuardOperators))
	})

	t.Run("helm", func(t *testing.T) {
		g := &guarded{t: t, kubeconfig: apiServer(t), dir: t.TempDir()}
		run(t, nil, bin(t, "helm"), "--kubeconfig", g.kubeconfig, "install", "lull", filepath.Join(framework.RepoRoot(), "charts", "lull"),
			"--set", "namespace="+ns, "--set", "leaseNamespace="+ns+"-leases")
		g.must("create", "-f", g.file("nodes.yaml", guardNodes("n1", "n2")))
		g.operators(append(append([]string{}, alice...), "label", "node", "n1", "lull.dev/maintenance=x", "--dry-run=server"), "lull-maintenance-label")
		g.steps(t, steps(g))
	})
}
