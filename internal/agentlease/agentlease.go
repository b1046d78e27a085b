// Package agentlease is how lull-agent says it runs on a node, and how the
// drainer and kubectl-lull's previews ask: the agent keeps a Lease named
// after its node in the agent namespace renewed; a node whose agent lease
// is not fresh has no agent, and a request with host steps waits for one
// (phase WaitingForAgent). The judgement is Check's, for both.
package agentlease

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"lull.dev/lull/internal/settings"
)

const (
	// Prefix of an agent lease's name: "lull-agent-<node>".
	Prefix = "lull-agent-"
	// DefaultNamespace is where lull-agent keeps its leases unless told
	// otherwise (lull-agent's --namespace, lull-drainer's and
	// kubectl-lull's --agent-namespace).
	DefaultNamespace = settings.Namespace
	// Duration is how long an agent lease lasts without renewal.
	Duration = 40 * time.Second
	// RenewEvery is how often the agent renews it.
	RenewEvery = 10 * time.Second
	// MaxDuration caps the duration a lease may claim: a heartbeat that
	// says it lasts for years (written by hand, or by anyone who may write
	// Leases there) shows an agent for this long after its last renewal
	// at most. Who may write agent leases at all is the admission guard's
	// business (only lull-agent, for its own node: docs/security.md).
	MaxDuration = 3 * Duration
	// ComponentLabel = Component labels agent leases.
	ComponentLabel = "app.kubernetes.io/component"
	Component      = settings.Agent
)

// Name is the agent lease's name for node.
func Name(node string) string { return Prefix + node }

// Selector selects agent leases by their label (the drainer's cache of a
// namespace of its own holds only these).
func Selector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{ComponentLabel: Component})
}

// Alive reports whether the agent lease shows a running agent at now: it
// was renewed less than its duration ago, the duration capped at
// MaxDuration. (A heartbeat is judged by its renewTime rather than by
// observation, lease.Observer, since kubectl lull plan judges it once,
// from a snapshot; the cap bounds what a skewed clock or a forged
// duration can keep alive.)
func Alive(l *coordinationv1.Lease, now time.Time) bool {
	if l == nil || l.Spec.RenewTime == nil {
		return false
	}
	d := Duration
	if l.Spec.LeaseDurationSeconds != nil {
		d = min(time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second, MaxDuration)
	}
	return now.Before(l.Spec.RenewTime.Add(d))
}

// Check is the one judgement whether lull-agent runs on node at now, from
// its agent lease in namespace (nil: there is none): true, or false and
// why not, as a waiting request's status says it. A lease that is not
// node's agent lease in namespace counts as none.
func Check(namespace, node string, l *coordinationv1.Lease, now time.Time) (bool, string) {
	key := types.NamespacedName{Namespace: namespace, Name: Name(node)}
	if l == nil || l.Namespace != key.Namespace || l.Name != key.Name {
		return false, fmt.Sprintf("no lull-agent runs on node %s (no Lease %s): is the lull-agent DaemonSet installed, and its pod running on the node?",
			node, key)
	}
	if Alive(l, now) {
		return true, ""
	}
	last := "never"
	if l.Spec.RenewTime != nil {
		last = l.Spec.RenewTime.UTC().Format(time.RFC3339)
	}
	return false, fmt.Sprintf("lull-agent on node %s stopped renewing its lease %s (last renewed %s, by %s)", node, key, last,
		ptr.Deref(l.Spec.HolderIdentity, "?"))
}

// Lookup reads node's agent lease in namespace with c and Checks it at
// now: the drainer reads its cache, a preview its snapshot. A lease that
// is not found is no agent; an error is any other failed read.
func Lookup(ctx context.Context, c client.Reader, namespace, node string, now time.Time) (bool, string, error) {
	var l coordinationv1.Lease
	key := types.NamespacedName{Namespace: namespace, Name: Name(node)}
	err := c.Get(ctx, key, &l)
	if apierrors.IsNotFound(err) {
		ok, why := Check(namespace, node, nil, now)
		return ok, why, nil
	}
	if err != nil {
		return false, "", fmt.Errorf("reading lull-agent's lease %s: %w", key, err)
	}
	ok, why := Check(namespace, node, &l, now)
	return ok, why, nil
}

// RenewedSince reports whether node's agent lease in namespace was renewed
// after t (both written by lull-agent, on the node's clock): the agent ran
// after something it recorded at t. A lease not found was not.
func RenewedSince(ctx context.Context, c client.Reader, namespace, node string, t time.Time) (bool, error) {
	var l coordinationv1.Lease
	key := types.NamespacedName{Namespace: namespace, Name: Name(node)}
	if err := c.Get(ctx, key, &l); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading lull-agent's lease %s: %w", key, err)
	}
	return l.Spec.RenewTime != nil && l.Spec.RenewTime.After(t), nil
}
