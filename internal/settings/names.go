package settings

// Names of lull's install that several components and kubectl-lull use:
// declared here once, so a flag's default, an event's reporter and a
// lease holder's family cannot drift apart.
const (
	// Namespace is where lull is installed: its Deployments and
	// lull-agent's DaemonSet, the leader-election lease, the budget ledger
	// and lull-agent's heartbeat leases.
	Namespace = "lull-system"
	// Drainer names lull-drainer: its Deployment, ServiceAccount and
	// leader-election lease, the reporter of its events, and the holder
	// family of the node leases it takes (its replicas hold them as
	// lull-drainer/<replica>).
	Drainer = "lull-drainer"
	// Scheduler names lull-scheduler: its Deployment and scheduler name.
	Scheduler = "lull-scheduler"
	// Agent names lull-agent: its DaemonSet, the reporter of its events
	// and the component label of its heartbeat leases.
	Agent = "lull-agent"
	// AdmissionConfigMap names the admission guard's parameters, in
	// lull's namespace: writablePaths and protectedPaths (which lull-agent
	// writes by) and criticalUnits (which the guard, the planners in
	// lull-drainer and lull-scheduler, and kubectl-lull's previews decide
	// restarts by).
	AdmissionConfigMap = "lull-admission"
)
