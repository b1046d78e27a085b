package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/lease"
	"lull.dev/lull/test/framework"
)

// Names the admission guard's parameters (manifests/admission/params.yaml)
// ship with; the groups are framework.Guard*.
const (
	admDrainer = "system:serviceaccount:lull-system:lull-drainer"
	admLeaseNS = "lull-leases"
)

// as impersonates user with the operators' RBAC and extra groups.
func as(user string, groups ...string) []string {
	args := []string{"--as=" + user, "--as-group=" + framework.GuardOperators}
	for _, g := range groups {
		args = append(args, "--as-group="+g)
	}
	return args
}

var (
	alice     = as("e2e-alice")
	bob       = as("e2e-bob")
	mo        = as("e2e-mo", framework.GuardMaintainers)
	em        = as("e2e-em", framework.GuardMaintainers, framework.GuardEmergency)
	drainerSA = as(admDrainer)
)

// admAgent is the user name lull-agent authenticates as.
const admAgent = "system:serviceaccount:lull-system:lull-agent"

// agentOn impersonates lull-agent with a token bound to node (the extra the
// API server gives a pod's projected token); node "" is a token bound to no
// node.
func agentOn(node string) []string {
	args := as(admAgent)
	if node != "" {
		args = append(args, "--as-user-extra=authentication.kubernetes.io/node-name="+node)
	}
	return args
}

func agentRefused(node, what string) string {
	return fmt.Sprintf("lull-agent on node %s may %s", node, what)
}

// Guard refusals, as the policies word them.
func labelRefused(user string) string {
	return fmt.Sprintf(`only the lull drainer and members of group %q may add, change or remove the lull.dev/maintenance label; user %q is in neither`, framework.GuardMaintainers, user)
}

// statusLabelRefused: nobody adds, changes or removes the label through
// nodes/status.
const statusLabelRefused = "the lull.dev/maintenance label requests maintenance: it is never added, changed or removed through nodes/status"

func nmRefused(user string) string {
	return fmt.Sprintf(`only the lull drainer and members of group %q may create, update or delete NodeMaintenances; user %q is in neither`, framework.GuardMaintainers, user)
}

func emergencyRefused(what, user string) string {
	return fmt.Sprintf(`only members of group %q may set %s on a NodeMaintenance; user %q is not in it`, framework.GuardEmergency, what, user)
}

func leaseRefused(name, holder, principal, verb, user string) string {
	return fmt.Sprintf(`lease %s/%s is held by %q (acquired by user %q); only that user, the lull drainer and members of group %q may %s it; user %q is none of them`,
		admLeaseNS, name, holder, principal, framework.GuardMaintainers, verb, user)
}

// admStep is one request, allowed (refused empty) or refused by the guard
// with a message containing refused. The steps of a table run in order:
// each starts from the state the previous ones left.
type admStep struct {
	name    string
	as      []string
	args    []string
	refused string
	// principal, when set: the table's lease's lull.dev/holder-principal
	// after the step.
	principal string
}

// The admission guard (manifests/admission), installed by local-up.sh in
// host mode as in every install: each rule allows its principals and
// refuses everyone else with a message naming the group that would allow
// it; a lease's acquiring principal is recorded and cannot be forged; a
// kubelet's status update of a node under maintenance passes unless it
// changes the label, which nobody does through nodes/status.
func TestAdmissionGuard(t *testing.T) {
	e := newSysEnv(t)
	ctx := t.Context()
	kubectl := func(args ...string) (string, error) { return cluster.Kubectl(ctx, 30*time.Second, args...) }
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}

	rbac := file("rbac.yaml", framework.GuardOperatorRBAC)
	out, err := kubectl("apply", "-f", rbac)
	require.NoError(t, err, out)
	t.Cleanup(func() {
		_, _ = cluster.Kubectl(context.Background(), 30*time.Second, "delete", "--ignore-not-found", "-f", rbac)
	})
	if out, err := kubectl("get", "namespace", admLeaseNS); err != nil {
		require.Contains(t, out, "NotFound")
		out, err = kubectl("create", "namespace", admLeaseNS)
		require.NoError(t, err, out)
	}

	// Two nodes whose requests wait: their disruption leases are held by
	// someone else, so the drainer neither acts on them nor removes the
	// label while the steps run.
	nodes := e.pickNodes("e2e-admission", 2)
	labelNode, nmNode := nodes[0], nodes[1]
	lc := lease.New(cluster.Clientset, lease.Options{})
	for _, n := range nodes {
		_, err := lc.Acquire(ctx, n, "e2e-admission-blocker", "test", "keeps the requests waiting", 30*time.Minute)
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		bg := context.Background()
		for _, n := range nodes {
			_ = e.c.Delete(bg, &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: n}})
			_ = lc.Release(bg, n, "e2e-admission-blocker")
		}
	})

	// The guard may take a moment to be active after its install: wait
	// for its first refusal (a server-side dry run changes nothing).
	var last string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		last, _ = kubectl(append(alice, "label", "node", labelNode, "lull.dev/maintenance=kernel-update", "--dry-run=server")...)
		return strings.Contains(last, labelRefused("e2e-alice")), nil
	})
	require.NoError(t, err, "the guard never refused a plain operator's label; last: %s", last)

	nm := func(name, spec string) string {
		return file(name+".yaml", fmt.Sprintf("apiVersion: lull.dev/v1alpha1\nkind: NodeMaintenance\nmetadata: {name: %s}\nspec: {nodeName: %s, classes: [kernel-update]%s}\n", nmNode, nmNode, spec))
	}
	const leaseName = "node-e2e-admission"
	heldLease := file("lease.yaml", fmt.Sprintf(`apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: %s
  namespace: %s
  annotations: {lull.dev/holder-principal: e2e-bob}
spec: {holderIdentity: alice-tool, leaseDurationSeconds: 300}
`, leaseName, admLeaseNS))
	const freeName = "node-e2e-admission-free"
	freeLease := file("free.yaml", fmt.Sprintf("apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: %s, namespace: %s}\nspec: {leaseDurationSeconds: 300}\n", freeName, admLeaseNS))
	t.Cleanup(func() {
		_, _ = cluster.Kubectl(context.Background(), 30*time.Second, "-n", admLeaseNS, "delete", "lease", leaseName, freeName, "--ignore-not-found")
	})
	mergeLease := func(name, patch string) []string {
		return []string{"-n", admLeaseNS, "patch", "lease", name, "--type=merge", "-p", patch}
	}
	mergeNM := func(patch string) []string {
		return []string{"patch", "nodemaintenance", nmNode, "--type=merge", "-p", patch}
	}
	mergeStatus := func(patch string) []string {
		return []string{"patch", "nodemaintenance", nmNode, "--subresource=status", "--type=merge", "-p", patch}
	}
	agentLease := func(node string) string {
		return file("agent-"+node+".yaml", fmt.Sprintf("apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: lull-agent-%s, namespace: lull-system}\nspec: {holderIdentity: e2e-agent, leaseDurationSeconds: 30}\n", node))
	}
	t.Cleanup(func() {
		_, _ = cluster.Kubectl(context.Background(), 30*time.Second, "-n", "lull-system", "delete", "lease", "lull-agent-"+labelNode, "lull-agent-"+nmNode, "--ignore-not-found")
	})
	ready := `{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"e2e admission heartbeat"}]}}`

	for _, table := range []struct {
		name  string
		lease string // the lease whose principal the steps check
		steps []admStep
	}{{
		name: "maintenance label",
		steps: []admStep{
			{name: "operator cannot add it", as: alice, args: []string{"label", "node", labelNode, "lull.dev/maintenance=kernel-update"}, refused: labelRefused("e2e-alice")},
			{name: "operator cannot add it through nodes/status", as: alice,
				args: []string{"patch", "node", labelNode, "--subresource=status", "-p", `{"metadata":{"labels":{"lull.dev/maintenance":"kernel-update"}}}`}, refused: statusLabelRefused},
			{name: "maintainer adds it", as: mo, args: []string{"label", "node", labelNode, "lull.dev/maintenance=kernel-update"}},
			{name: "operator cannot change it", as: alice, args: []string{"label", "node", labelNode, "lull.dev/maintenance=node-config", "--overwrite"}, refused: labelRefused("e2e-alice")},
			{name: "operator cannot remove it", as: alice, args: []string{"label", "node", labelNode, "lull.dev/maintenance-"}, refused: labelRefused("e2e-alice")},
			{name: "operator sets another label of the labelled node", as: alice, args: []string{"label", "node", labelNode, "e2e-admission=yes"}},
			{name: "operator removes it again", as: alice, args: []string{"label", "node", labelNode, "e2e-admission-"}},
			{name: "kubelet's status update of the labelled node passes", as: as("system:node:"+labelNode, "system:nodes"),
				args: []string{"patch", "node", labelNode, "--subresource=status", "-p", ready}},
			{name: "kubelet cannot remove the label with a status update", as: as("system:node:"+labelNode, "system:nodes"),
				args: []string{"patch", "node", labelNode, "--subresource=status", "-p", `{"metadata":{"labels":{"lull.dev/maintenance":null}}}`}, refused: statusLabelRefused},
			{name: "maintainer changes it", as: mo, args: []string{"label", "node", labelNode, "lull.dev/maintenance=node-config", "--overwrite"}},
			{name: "maintainer removes it", as: mo, args: []string{"label", "node", labelNode, "lull.dev/maintenance-"}},
		},
	}, {
		name: "NodeMaintenance and its emergency options",
		steps: []admStep{
			{name: "operator cannot create one", as: alice, args: []string{"create", "-f", nm("plain", "")}, refused: nmRefused("e2e-alice")},
			{name: "maintainer cannot create one with a deadline", as: mo, args: []string{"create", "-f", nm("deadline", ", deadline: '2030-01-01T00:00:00Z'")},
				refused: emergencyRefused("spec.deadline", "e2e-mo")},
			{name: "maintainer creates one", as: mo, args: []string{"create", "-f", nm("plain", "")}},
			{name: "operator cannot update it", as: alice, args: mergeNM(`{"spec":{"reason":"mine"}}`), refused: nmRefused("e2e-alice")},
			{name: "maintainer updates it", as: mo, args: mergeNM(`{"spec":{"reason":"ticket 7"}}`)},
			{name: "maintainer cannot set a deadline", as: mo, args: mergeNM(`{"spec":{"deadline":"2030-01-01T00:00:00Z"}}`),
				refused: emergencyRefused("spec.deadline", "e2e-mo")},
			{name: "maintainer cannot set grace period 0", as: mo, args: mergeNM(`{"spec":{"drain":{"gracePeriodSeconds":0}}}`),
				refused: emergencyRefused("spec.drain.gracePeriodSeconds", "e2e-mo")},
			{name: "maintainer cannot set another grace period", as: mo, args: mergeNM(`{"spec":{"drain":{"gracePeriodSeconds":5}}}`),
				refused: emergencyRefused("spec.drain.gracePeriodSeconds", "e2e-mo")},
			{name: "maintainer cannot set Force", as: mo, args: mergeNM(`{"spec":{"drain":{"escalation":"Force"}}}`),
				refused: emergencyRefused("spec.drain.escalation: Force", "e2e-mo")},
			{name: "maintainer may set a drain timeout and escalation Abort", as: mo, args: mergeNM(`{"spec":{"drain":{"timeout":"20m","escalation":"Abort"}}}`)},
			{name: "emergency member sets all three", as: em, args: mergeNM(`{"spec":{"deadline":"2030-01-01T00:00:00Z","drain":{"gracePeriodSeconds":0,"escalation":"Force"}}}`)},
			{name: "maintainer updates it, keeping them", as: mo, args: mergeNM(`{"spec":{"reason":"ticket 8"}}`)},
			{name: "maintainer cannot move the deadline", as: mo, args: mergeNM(`{"spec":{"deadline":"2031-01-01T00:00:00Z"}}`),
				refused: emergencyRefused("spec.deadline", "e2e-mo")},
			{name: "maintainer removes them", as: mo, args: mergeNM(`{"spec":{"deadline":null,"drain":null}}`)},
		},
	}, {
		name:  "held lease",
		lease: leaseName,
		steps: []admStep{
			{name: "operator acquires it; the forged principal is replaced", as: alice, args: []string{"create", "-f", heldLease}, principal: "e2e-alice"},
			{name: "another user cannot renew it", as: bob, args: mergeLease(leaseName, `{"spec":{"leaseTransitions":0}}`),
				refused: leaseRefused(leaseName, "alice-tool", "e2e-alice", "update", "e2e-bob")},
			{name: "another user cannot take it over", as: bob, args: mergeLease(leaseName, `{"spec":{"holderIdentity":"bob-tool"}}`),
				refused: leaseRefused(leaseName, "alice-tool", "e2e-alice", "update", "e2e-bob")},
			{name: "another user cannot delete it", as: bob, args: []string{"-n", admLeaseNS, "delete", "lease", leaseName},
				refused: leaseRefused(leaseName, "alice-tool", "e2e-alice", "delete", "e2e-bob")},
			{name: "the acquirer renews it", as: alice, args: mergeLease(leaseName, `{"spec":{"leaseDurationSeconds":600}}`), principal: "e2e-alice"},
			{name: "the acquirer cannot forge the principal", as: alice, args: []string{"-n", admLeaseNS, "annotate", "lease", leaseName, "--overwrite", "lull.dev/holder-principal=e2e-bob"}, principal: "e2e-alice"},
			{name: "a maintainer cannot remove the principal", as: mo, args: []string{"-n", admLeaseNS, "annotate", "lease", leaseName, "lull.dev/holder-principal-"}, principal: "e2e-alice"},
			{name: "a maintainer updates it", as: mo, args: []string{"-n", admLeaseNS, "annotate", "lease", leaseName, "lull.dev/reason=checked"}, principal: "e2e-alice"},
			{name: "the drainer updates it", as: drainerSA, args: mergeLease(leaseName, `{"spec":{"leaseDurationSeconds":300}}`), principal: "e2e-alice"},
			{name: "the drainer takes it over", as: drainerSA, args: mergeLease(leaseName, `{"spec":{"holderIdentity":"lull-drainer"}}`), principal: admDrainer},
			{name: "the former acquirer cannot update it", as: alice, args: mergeLease(leaseName, `{"spec":{"holderIdentity":"alice-tool"}}`),
				refused: leaseRefused(leaseName, "lull-drainer", admDrainer, "update", "e2e-alice")},
			{name: "the former acquirer cannot delete it", as: alice, args: []string{"-n", admLeaseNS, "delete", "lease", leaseName},
				refused: leaseRefused(leaseName, "lull-drainer", admDrainer, "delete", "e2e-alice")},
			{name: "the drainer releases it", as: drainerSA, args: []string{"-n", admLeaseNS, "delete", "lease", leaseName}},
		},
	}, {
		name:  "lease without holder",
		lease: freeName,
		steps: []admStep{
			{name: "operator creates it without holder", as: alice, args: []string{"create", "-f", freeLease}, principal: "e2e-alice"},
			{name: "another user takes it", as: bob, args: mergeLease(freeName, `{"spec":{"holderIdentity":"bob-tool"}}`), principal: "e2e-bob"},
			{name: "its creator cannot delete it now", as: alice, args: []string{"-n", admLeaseNS, "delete", "lease", freeName},
				refused: leaseRefused(freeName, "bob-tool", "e2e-bob", "delete", "e2e-alice")},
			{name: "a maintainer deletes it", as: mo, args: []string{"-n", admLeaseNS, "delete", "lease", freeName}},
		},
	}, {
		name: "lull-agent keeps to its node",
		steps: []admStep{
			{name: "an agent creates its heartbeat lease", as: agentOn(labelNode), args: []string{"create", "-f", agentLease(labelNode)}},
			{name: "it renews it", as: agentOn(labelNode), args: []string{"-n", "lull-system", "annotate", "lease", "lull-agent-" + labelNode, "e2e=renewed"}},
			{name: "it cannot create another node's", as: agentOn(labelNode), args: []string{"create", "-f", agentLease(nmNode)},
				refused: agentRefused(labelNode, "write only its own lease lull-system/lull-agent-"+labelNode+", not lull-system/lull-agent-"+nmNode)},
			{name: "it cannot touch the drainer's leader lease", as: agentOn(labelNode), args: []string{"-n", "lull-system", "annotate", "lease", "lull-drainer", "e2e=agent"},
				refused: "lull-system/lull-drainer"}, // lull-agent's or lull-component-leases' refusal, whichever the API server reports
			{name: "a token bound to no node writes nothing", as: agentOn(""), args: []string{"-n", "lull-system", "annotate", "--overwrite", "lease", "lull-agent-" + labelNode, "e2e=unbound"},
				refused: "bound to a node; this request carries no node"},
			{name: "it cannot write another node's request", as: agentOn(labelNode), args: mergeStatus(`{"status":{"waitingFor":"agent"}}`),
				refused: agentRefused(labelNode, "record steps only on the NodeMaintenance of its own node, not "+nmNode)},
			{name: "on its node it cannot change the phase", as: agentOn(nmNode), args: mergeStatus(`{"status":{"phase":"Completed"}}`),
				refused: agentRefused(nmNode, "change only the state, times, boot ID and message of the steps")},
			{name: "nor add steps", as: agentOn(nmNode), args: mergeStatus(`{"status":{"actions":[{"type":"Reboot","timeout":"15m","state":"Pending"}]}}`),
				refused: agentRefused(nmNode, "change only the state, times, boot ID and message of the steps")},
		},
	}} {
		t.Run(table.name, func(t *testing.T) {
			for i, s := range table.steps {
				out, err := kubectl(append(append([]string{}, s.as...), s.args...)...)
				if s.refused == "" {
					require.NoError(t, err, "step %d %q: refused:\n%s", i+1, s.name, out)
				} else {
					require.Error(t, err, "step %d %q: allowed:\n%s", i+1, s.name, out)
					require.Contains(t, out, s.refused, "step %d %q: refused for another reason", i+1, s.name)
				}
				if s.principal != "" {
					got, err := kubectl("-n", admLeaseNS, "get", "lease", table.lease, "-o", `jsonpath={.metadata.annotations.lull\.dev/holder-principal}`)
					require.NoError(t, err, got)
					require.Equal(t, s.principal, got, "step %d %q: the recorded principal", i+1, s.name)
				}
			}
		})
	}
}
