package framework

// The users the admission guard's tests act as (test/install against an
// API server with lull installed, test/e2e against the local cluster).
const (
	// GuardMaintainers and GuardEmergency are the groups the guard's
	// parameters (manifests/admission/params.yaml) ship with.
	GuardMaintainers = "lull:maintainers"
	GuardEmergency   = "lull:emergency"
	// GuardOperators is bound by GuardOperatorRBAC to everything the guard
	// judges, so that each refusal a test sees is the guard's, not RBAC's.
	GuardOperators = "e2e:operators"
)

// GuardOperatorRBAC grants GuardOperators, as far as RBAC goes, all that
// the guard judges: nodes and their status, lull's objects, Leases.
const GuardOperatorRBAC = `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: e2e-operator}
rules:
- apiGroups: [""]
  resources: [nodes, nodes/status]
  verbs: ["*"]
- apiGroups: [lull.dev]
  resources: ["*"]
  verbs: ["*"]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-operator}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-operator}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "e2e:operators"}
`
