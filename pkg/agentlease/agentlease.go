// Package agentlease is how lull-agent says it runs on a node, and how the
// drainer asks: the agent keeps a Lease named after its node in the lull
// namespace renewed; a node whose agent lease is not fresh has no agent,
// and a request with host steps waits for one (phase WaitingForAgent).
package agentlease

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

const (
	// Prefix of an agent lease's name: "lull-agent-<node>".
	Prefix = "lull-agent-"
	// Duration is how long an agent lease lasts without renewal.
	Duration = 40 * time.Second
	// RenewEvery is how often the agent renews it.
	RenewEvery = 10 * time.Second
	// ComponentLabel = Component labels agent leases.
	ComponentLabel = "app.kubernetes.io/component"
	Component      = "lull-agent"
)

// Name is the agent lease's name for node.
func Name(node string) string { return Prefix + node }

// Alive reports whether the agent lease shows a running agent at now: it
// was renewed less than its duration ago.
func Alive(l *coordinationv1.Lease, now time.Time) bool {
	if l == nil || l.Spec.RenewTime == nil {
		return false
	}
	d := Duration
	if l.Spec.LeaseDurationSeconds != nil {
		d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return now.Before(l.Spec.RenewTime.Add(d))
}
