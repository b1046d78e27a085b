package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"

	"lull.dev/lull/test/framework"
)

// simAgentGroup is the extra group of the simulated agents: what
// simulating a reboot at the API level needs besides lull-agent's own
// rights (a node's Ready condition and boot ID are node status, which a
// real agent never writes).
const simAgentGroup = "e2e:simulated-agents"

const simAgentRBAC = `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: e2e-simulated-agent}
rules:
- apiGroups: [""]
  resources: [nodes/status]
  verbs: [get, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-simulated-agent}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-simulated-agent}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "e2e:simulated-agents"}
`

var (
	simAgentRBACOnce sync.Once
	simAgentRBACErr  error
)

// simAgentKubeconfig writes a kubeconfig with which a simulated agent acts
// as lull-agent does in its pod: as lull-agent's ServiceAccount, with a
// token bound to its node (the user extra the API server gives a pod's
// projected token), so that RBAC as installed (manifests/agent/rbac.yaml,
// which the host-mode cluster does not apply itself) and the admission
// guard's policies lull-agent, lull-component-leases and
// lull-nodemaintenance-status judge it as they judge the real agent. The
// cluster's admin impersonates that user.
func simAgentKubeconfig(t *testing.T, node string) string {
	t.Helper()
	simAgentRBACOnce.Do(func() {
		dir, err := os.MkdirTemp("", "lull-e2e-simagent-")
		if err != nil {
			simAgentRBACErr = err
			return
		}
		defer os.RemoveAll(dir)
		p := filepath.Join(dir, "rbac.yaml")
		if simAgentRBACErr = os.WriteFile(p, []byte(simAgentRBAC), 0o644); simAgentRBACErr != nil {
			return
		}
		out, err := cluster.Kubectl(context.Background(), time.Minute, "apply",
			"-f", filepath.Join(framework.RepoRoot(), "manifests", "agent", "rbac.yaml"), "-f", p)
		if err != nil {
			simAgentRBACErr = fmt.Errorf("%w: %s", err, out)
		}
	})
	require.NoError(t, simAgentRBACErr, "lull-agent's RBAC for the simulated agents")

	cfg, err := clientcmd.LoadFromFile(cluster.Kubeconfig)
	require.NoError(t, err)
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	require.True(t, ok, "kubeconfig %s has no current context", cluster.Kubeconfig)
	auth := cfg.AuthInfos[ctx.AuthInfo]
	require.NotNil(t, auth, "kubeconfig %s has no user %s", cluster.Kubeconfig, ctx.AuthInfo)
	auth.Impersonate = "system:serviceaccount:lull-system:lull-agent"
	auth.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:lull-system", simAgentGroup}
	auth.ImpersonateUserExtra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
	p := filepath.Join(t.TempDir(), "lull-agent-"+node+".kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, p))
	return p
}
