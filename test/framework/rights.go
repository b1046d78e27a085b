package framework

import "strings"

// Right says whether Account may do Verb on Resource in Namespace
// (cluster-scoped when empty). Resource is a resource, resource/subresource,
// or resource/name for what lull's Roles grant by name (Leases,
// ConfigMaps, the shipped DisruptionPolicy).
type Right struct {
	Account, Verb, Resource, Namespace string
	Want                               bool
}

// MaintainerAccount stands for a member of the maintainers group bound to
// the lull-maintainer roles as manifests/install/maintainer.yaml says.
const MaintainerAccount = "maintainer"

// CanI is the kubectl auth can-i command line that asks for r, as
// docs/install.md tells admins to: the account is lull's ServiceAccount in
// lull-system, or a member of lull:maintainers.
func (r Right) CanI() []string {
	resource, sub, _ := strings.Cut(r.Resource, "/")
	byName := strings.HasPrefix(resource, "leases") || resource == "configmaps" || resource == "deployments.apps" ||
		resource == "customresourcedefinitions.apiextensions.k8s.io" ||
		(strings.HasPrefix(resource, "disruptionpolicies") && sub != "status")
	if byName && sub != "" {
		resource, sub = resource+"/"+sub, ""
	}
	args := []string{"auth", "can-i", r.Verb, resource}
	if r.Account == MaintainerAccount {
		args = append(args, "--as=e2e-maintainer", "--as-group=lull:maintainers")
	} else {
		args = append(args, "--as=system:serviceaccount:lull-system:"+r.Account)
	}
	if sub != "" {
		args = append(args, "--subresource="+sub)
	}
	if r.Namespace != "" {
		args = append(args, "-n", r.Namespace)
	}
	return args
}

// Rights is docs/install.md's "What the RBAC grants" (and the
// lull-maintainer roles of docs/security.md), right by right: each of
// lull's ServiceAccounts may do what it needs and nothing more. Tested on
// a bare API server with the install applied (test/install) and on the
// local cluster where lull runs as pods (test/e2e/realnode).
var Rights = []Right{
	// lull-drainer
	{"lull-drainer", "create", "pods/eviction", "default", true},
	{"lull-drainer", "get", "daemonsets.apps", "lull-system", true},
	{"lull-drainer", "delete", "daemonsets.apps", "lull-system", false},
	{"lull-drainer", "delete", "pods", "default", false}, // drains through the eviction API only
	{"lull-drainer", "patch", "nodes", "", true},
	{"lull-drainer", "delete", "nodes", "", false},
	{"lull-drainer", "patch", "nodes/status", "", true},      // the node lifecycle conditions (guard: lull-node-conditions)
	{"lull-drainer", "update", "nodes/status", "", false},    // no PUT of a whole node's status
	{"lull-drainer", "get", "secrets", "lull-configs", true}, // alerts gates' credentials, used only when labelled
	{"lull-drainer", "list", "secrets", "lull-configs", false},
	{"lull-drainer", "get", "secrets", "default", false},
	{"lull-drainer", "list", "poddisruptionbudgets.policy", "default", true},
	{"lull-drainer", "create", "nodemaintenances.lull.dev", "", true},
	{"lull-drainer", "delete", "nodemaintenances.lull.dev", "", true},
	{"lull-drainer", "deletecollection", "nodemaintenances.lull.dev", "", false},
	{"lull-drainer", "update", "nodemaintenances.lull.dev/status", "", true},
	{"lull-drainer", "list", "maintenancewindows.lull.dev", "", true},
	{"lull-drainer", "update", "maintenancewindows.lull.dev", "", false}, // people write windows
	{"lull-drainer", "patch", "maintenancewindows.lull.dev", "", false},
	{"lull-drainer", "create", "maintenancewindows.lull.dev", "", false},
	{"lull-drainer", "delete", "maintenancewindows.lull.dev", "", false},
	{"lull-drainer", "update", "maintenancewindows.lull.dev/status", "", true}, // their state
	{"lull-drainer", "get", "maintenancewindows.lull.dev/status", "", true},
	{"lull-drainer", "update", "disruptionpolicies.lull.dev", "", false},
	{"lull-drainer", "create", "disruptionpolicies.lull.dev", "", true},         // the shipped policy; the guard refuses it any other name
	{"lull-drainer", "update", "disruptionpolicies.lull.dev/default", "", true}, // kept as shipped while annotated
	{"lull-drainer", "patch", "disruptionpolicies.lull.dev/default", "", true},
	{"lull-drainer", "update", "disruptionpolicies.lull.dev/site", "", false},
	{"lull-drainer", "delete", "disruptionpolicies.lull.dev/default", "", false},
	{"lull-drainer", "update", "disruptionpolicies.lull.dev/status", "", true},
	{"lull-drainer", "update", "leases.coordination.k8s.io", "lull-leases", true}, // the node disruption leases
	{"lull-drainer", "delete", "leases.coordination.k8s.io", "lull-leases", true},
	{"lull-drainer", "update", "leases.coordination.k8s.io/lull-drainer", "lull-system", true},    // its own leader lease, by name
	{"lull-drainer", "update", "leases.coordination.k8s.io/lull-scheduler", "lull-system", false}, // not the scheduler's
	{"lull-drainer", "update", "leases.coordination.k8s.io/lull-agent-n1", "lull-system", false},  // nor a heartbeat
	{"lull-drainer", "list", "leases.coordination.k8s.io", "lull-system", true},                   // reads the heartbeats
	{"lull-drainer", "delete", "leases.coordination.k8s.io", "lull-system", false},
	{"lull-drainer", "update", "configmaps/lull-budget", "lull-system", true},     // the budget ledger
	{"lull-drainer", "get", "deployments.apps/lull-drainer", "lull-system", true}, // is lull being uninstalled?
	{"lull-drainer", "get", "deployments.apps/lull-scheduler", "lull-system", false},
	{"lull-drainer", "update", "deployments.apps/lull-drainer", "lull-system", false},
	{"lull-drainer", "get", "namespaces", "", true},
	{"lull-drainer", "delete", "namespaces", "", false},
	{"lull-drainer", "get", "customresourcedefinitions.apiextensions.k8s.io/nodemaintenances.lull.dev", "", true},
	{"lull-drainer", "get", "customresourcedefinitions.apiextensions.k8s.io/maintenancewindows.lull.dev", "", false},
	{"lull-drainer", "update", "configmaps/lull-admission", "lull-system", false},
	{"lull-drainer", "watch", "configmaps/lull-admission", "lull-system", true}, // criticalUnits, which the plans drain for
	{"lull-drainer", "list", "configmaps", "lull-system", false},                // that one alone
	{"lull-scheduler", "watch", "configmaps/lull-admission", "lull-system", true},
	{MaintainerAccount, "get", "configmaps/lull-admission", "lull-system", true}, // previews plan with criticalUnits
	{MaintainerAccount, "update", "configmaps/lull-admission", "lull-system", false},
	{"lull-scheduler", "list", "configmaps", "lull-system", false},
	{"lull-scheduler", "update", "configmaps/lull-admission", "lull-system", false},
	{"lull-drainer", "update", "leases.coordination.k8s.io", "kube-node-lease", false},
	{"lull-drainer", "get", "secrets", "lull-system", false},
	{"lull-drainer", "get", "nodeconfigs.lull.dev", "lull-configs", true},   // its UID and content hash, recorded when a request starts
	{"lull-drainer", "list", "nodeconfigs.lull.dev", "lull-configs", false}, // only the one a request names
	{"lull-drainer", "update", "nodeconfigs.lull.dev", "lull-configs", false},
	{"lull-drainer", "create", "tokenreviews.authentication.k8s.io", "", true},        // its metrics endpoint authenticates callers
	{"lull-drainer", "create", "subjectaccessreviews.authorization.k8s.io", "", true}, // and authorizes them
	// lull-scheduler
	{"lull-scheduler", "create", "tokenreviews.authentication.k8s.io", "", true}, // its secure port
	{"lull-scheduler", "create", "subjectaccessreviews.authorization.k8s.io", "", true},
	{"lull-scheduler", "create", "pods/binding", "default", true},
	{"lull-scheduler", "delete", "pods", "default", true}, // preemption
	{"lull-scheduler", "patch", "nodes", "", false},
	{"lull-scheduler", "list", "leases.coordination.k8s.io", "lull-leases", true},
	{"lull-scheduler", "create", "leases.coordination.k8s.io", "lull-leases", false}, // never takes a node lease
	{"lull-scheduler", "update", "leases.coordination.k8s.io", "lull-leases", false},
	{"lull-scheduler", "delete", "leases.coordination.k8s.io", "lull-leases", false},
	{"lull-scheduler", "create", "leases.coordination.k8s.io", "lull-system", true}, // its leader lease (the guard refuses other names)
	{"lull-scheduler", "update", "leases.coordination.k8s.io/lull-scheduler", "lull-system", true},
	{"lull-scheduler", "update", "leases.coordination.k8s.io/lull-drainer", "lull-system", false},
	{"lull-scheduler", "create", "leases.coordination.k8s.io", "default", false}, // no Leases elsewhere (system:kube-scheduler's)
	{"lull-scheduler", "create", "leases.coordination.k8s.io", "kube-system", false},
	{"lull-scheduler", "update", "leases.coordination.k8s.io/kube-scheduler", "kube-system", false},
	{"lull-scheduler", "create", "leasecandidates.coordination.k8s.io", "kube-system", false},
	{"lull-scheduler", "update", "nodemaintenances.lull.dev", "", false},
	{"lull-scheduler", "list", "nodemaintenances.lull.dev", "", true},
	{"lull-scheduler", "list", "maintenancewindows.lull.dev", "", true},
	{"lull-scheduler", "list", "disruptionpolicies.lull.dev", "", true},
	{"lull-scheduler", "update", "persistentvolumes", "", true}, // system:volume-scheduler
	{"lull-scheduler", "get", "configmaps/extension-apiserver-authentication", "kube-system", true},
	{"lull-scheduler", "get", "secrets", "lull-system", false},
	{"lull-scheduler", "get", "nodeconfigs.lull.dev", "lull-configs", false},
	// lull-agent
	{"lull-agent", "update", "nodemaintenances.lull.dev/status", "", true}, // records its steps (its own node's only: the guard)
	{"lull-agent", "patch", "nodemaintenances.lull.dev/status", "", false},
	{"lull-agent", "update", "nodemaintenances.lull.dev", "", false},
	{"lull-agent", "create", "nodemaintenances.lull.dev", "", true}, // its reboot sentinel's request (its own node, that class only: the guard)
	{"lull-agent", "delete", "nodemaintenances.lull.dev", "", true}, // withdrawn, or a finished record replaced (the guard)
	{"lull-agent", "list", "nodemaintenances.lull.dev", "", true},
	{"lull-agent", "patch", "nodes", "", false},
	{"lull-agent", "patch", "nodes/status", "", false},
	{"lull-agent", "create", "pods/eviction", "default", false},
	{"lull-agent", "delete", "pods", "default", false},
	{"lull-agent", "get", "leases.coordination.k8s.io", "lull-leases", true}, // reads the lease before every step
	{"lull-agent", "update", "leases.coordination.k8s.io", "lull-leases", false},
	{"lull-agent", "update", "leases.coordination.k8s.io/lull-agent-n1", "lull-system", true}, // its heartbeat
	{"lull-agent", "delete", "leases.coordination.k8s.io", "lull-system", false},
	{"lull-agent", "get", "secrets", "lull-system", false},
	{"lull-agent", "get", "nodeconfigs.lull.dev", "lull-configs", true}, // the files its WriteFiles step writes
	{"lull-agent", "list", "nodeconfigs.lull.dev", "lull-configs", false},
	{"lull-agent", "create", "nodeconfigs.lull.dev", "lull-configs", false},
	{"lull-agent", "get", "configmaps/lull-admission", "lull-system", true}, // writablePaths, protectedPaths
	{"lull-agent", "get", "configmaps/lull-budget", "lull-system", false},
	// a user bound to the lull-maintainer roles as docs/security.md says
	{MaintainerAccount, "patch", "nodes", "", true},
	{MaintainerAccount, "patch", "nodes/status", "", false},
	{MaintainerAccount, "delete", "nodes", "", false},
	{MaintainerAccount, "create", "nodemaintenances.lull.dev", "", true},
	{MaintainerAccount, "delete", "nodemaintenances.lull.dev", "", true},
	{MaintainerAccount, "update", "nodemaintenances.lull.dev/status", "", false},
	{MaintainerAccount, "update", "maintenancewindows.lull.dev", "", true},
	{MaintainerAccount, "update", "maintenancewindows.lull.dev/status", "", false},
	{MaintainerAccount, "create", "disruptionpolicies.lull.dev", "", true},
	{MaintainerAccount, "list", "pods", "default", true},
	{MaintainerAccount, "create", "pods/eviction", "default", false},
	{MaintainerAccount, "delete", "leases.coordination.k8s.io", "lull-leases", true},
	{MaintainerAccount, "list", "leases.coordination.k8s.io", "lull-system", true},
	{MaintainerAccount, "create", "leases.coordination.k8s.io", "lull-system", false},
	{MaintainerAccount, "get", "secrets", "lull-system", false},
	{MaintainerAccount, "create", "nodeconfigs.lull.dev", "lull-configs", true}, // kubectl lull request --write
	{MaintainerAccount, "delete", "nodeconfigs.lull.dev", "lull-configs", true},
	{MaintainerAccount, "update", "nodeconfigs.lull.dev", "lull-configs", false}, // never changed once created
	{MaintainerAccount, "get", "secrets", "lull-configs", false},
}

// ClusterAPIRights are lull-drainer's rights on Cluster API's objects
// (docs/install.md, docs/cluster-api.md): lull's hook on governed
// Machines; never a delete, never a write of what Cluster API decides.
// kubectl auth can-i resolves a resource through discovery, so these are
// asked where Cluster API's CRDs are installed (test/e2e, TestClusterAPIRights).
var ClusterAPIRights = []Right{
	{"lull-drainer", "patch", "machines.cluster.x-k8s.io", "capi", true},
	{"lull-drainer", "watch", "machines.cluster.x-k8s.io", "capi", true},
	{"lull-drainer", "delete", "machines.cluster.x-k8s.io", "capi", false},
	{"lull-drainer", "create", "machines.cluster.x-k8s.io", "capi", false},
	{"lull-drainer", "update", "machines.cluster.x-k8s.io/status", "capi", false},
	{"lull-drainer", "list", "machinedeployments.cluster.x-k8s.io", "capi", true},
	{"lull-drainer", "patch", "machinedeployments.cluster.x-k8s.io", "capi", false},
	{"lull-drainer", "get", "machinesets.cluster.x-k8s.io", "capi", true},
	{"lull-drainer", "update", "machinesets.cluster.x-k8s.io", "capi", false},
	{"lull-drainer", "patch", "clusters.cluster.x-k8s.io", "capi", true}, // the before-upgrade hook
	{"lull-drainer", "delete", "clusters.cluster.x-k8s.io", "capi", false},
	{"lull-drainer", "create", "clusters.cluster.x-k8s.io", "capi", false},
	{"lull-scheduler", "patch", "machines.cluster.x-k8s.io", "capi", false},
	{"lull-agent", "patch", "machines.cluster.x-k8s.io", "capi", false},
}

// KarpenterRights are lull-drainer's rights on Karpenter's objects
// (docs/install.md, docs/interop.md): its own entry in a NodePool's
// disruption budgets (patch, held by the guard lull-karpenter-writes);
// never a create or delete, never a NodeClaim. Asked where Karpenter's
// CRDs are installed (test/install, TestGuardKarpenterWrites).
var KarpenterRights = []Right{
	{"lull-drainer", "patch", "nodepools.karpenter.sh", "", true},
	{"lull-drainer", "watch", "nodepools.karpenter.sh", "", true},
	{"lull-drainer", "update", "nodepools.karpenter.sh", "", false},
	{"lull-drainer", "create", "nodepools.karpenter.sh", "", false},
	{"lull-drainer", "delete", "nodepools.karpenter.sh", "", false},
	{"lull-drainer", "patch", "nodepools.karpenter.sh/status", "", false},
	{"lull-drainer", "delete", "nodeclaims.karpenter.sh", "", false},
	{"lull-drainer", "patch", "nodeclaims.karpenter.sh", "", false},
	{"lull-scheduler", "patch", "nodepools.karpenter.sh", "", false},
	{"lull-agent", "patch", "nodepools.karpenter.sh", "", false},
}

// CanIAnswer reads kubectl auth can-i's output: the answer is its last
// line (warnings come first); yes reports whether it is "yes".
func CanIAnswer(out string) (answer string, yes bool) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	answer = strings.TrimSpace(lines[len(lines)-1])
	return answer, answer == "yes"
}
