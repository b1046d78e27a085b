// Package lease implements lull's node disruption lease: one
// coordination.k8s.io/v1 Lease per node that every disruptive actor (lull's
// drainer, a reboot daemon, an admin with kubectl) must hold before it
// cordons, drains, reboots or powers off the node. See
// docs/lease-protocol.md for the protocol third-party tools follow.
package lease

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

const (
	// DefaultNamespace holds the node disruption leases: a namespace of
	// their own, so tools invited to write Leases there cannot touch the
	// components' leader-election leases (in lull-system).
	DefaultNamespace = "lull-leases"
	// Medik8sNamespace is where medik8s tools (node-maintenance-operator,
	// self-node-remediation) keep node leases of the same name and shape.
	Medik8sNamespace = "medik8s-leases"
	// AnnotationOperation records what the holder does to the node
	// (drain, reboot, update, power-off, ...).
	AnnotationOperation = "lull.dev/operation"
	// AnnotationReason records why, for people reading it.
	AnnotationReason = "lull.dev/reason"
	// DefaultDuration is the lease duration when a caller gives none.
	DefaultDuration = 5 * time.Minute
	// MaxDuration is the longest lease duration a Lease holds
	// (spec.leaseDurationSeconds is an int32 of seconds).
	MaxDuration = math.MaxInt32 * time.Second
)

// FitsALease reports whether d is a duration a Lease can hold: at least a
// second (spec.leaseDurationSeconds is whole seconds, and 0 is no lease)
// and at most MaxDuration.
func FitsALease(d time.Duration) bool {
	return d >= time.Second && d <= MaxDuration
}

// Name returns the lease name for a node: "node-<nodeName>", the medik8s
// convention, so tools following either can interoperate.
func Name(node string) string { return "node-" + node }

// NodeOf returns the node a lease name belongs to.
func NodeOf(leaseName string) (string, bool) {
	if len(leaseName) <= len("node-") || leaseName[:len("node-")] != "node-" {
		return "", false
	}
	return leaseName[len("node-"):], true
}

// Family is the tool a holder identity belongs to: the part before the
// first "/". Replicas of one tool hold leases as <tool>/<replica>
// ("lull-drainer/lull-drainer-7d9f-x2"), so each write says which replica
// made it, while every replica still recognises the others' leases as
// its tool's.
func Family(holder string) string {
	if i := strings.IndexByte(holder, '/'); i >= 0 {
		return holder[:i]
	}
	return holder
}

// SameFamily reports whether two holder identities are replicas of one
// tool ("lull-drainer" and "lull-drainer/b" are).
func SameFamily(a, b string) bool { return a != "" && b != "" && Family(a) == Family(b) }

// Info describes a node's lease as this client sees it.
type Info struct {
	Node      string
	Namespace string
	Holder    string
	Operation string
	Reason    string
	Acquired  time.Time
	Renewed   time.Time
	Duration  time.Duration
	// Transitions counts changes of holder since the lease was created.
	// With UID it forms the fencing token (see Token).
	Transitions     int32
	UID             types.UID
	ResourceVersion string
	// Expired is this client's judgement by observation: it has seen no
	// change of the lease for Duration on its own clock.
	Expired bool
}

// Token is a fencing token: a holder passes it to whatever it disrupts,
// which rejects tokens older than one it has seen. Tokens compare only for
// the same lease UID (a released lease is deleted; its successor has a new
// UID and starts counting again).
type Token struct {
	UID         types.UID
	Transitions int32
}

// Token returns the lease's fencing token.
func (i *Info) Token() Token { return Token{UID: i.UID, Transitions: i.Transitions} }

// FromLease describes a Lease object (without an expiry judgement).
func FromLease(node string, l *coordinationv1.Lease) *Info {
	i := &Info{
		Node:            node,
		Namespace:       l.Namespace,
		Holder:          ptr.Deref(l.Spec.HolderIdentity, ""),
		Operation:       l.Annotations[AnnotationOperation],
		Reason:          l.Annotations[AnnotationReason],
		Duration:        time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second,
		Transitions:     ptr.Deref(l.Spec.LeaseTransitions, 0),
		UID:             l.UID,
		ResourceVersion: l.ResourceVersion,
	}
	if l.Spec.AcquireTime != nil {
		i.Acquired = l.Spec.AcquireTime.Time
	}
	if l.Spec.RenewTime != nil {
		i.Renewed = l.Spec.RenewTime.Time
	}
	return i
}

// HeldError reports that another actor holds a node's live lease.
type HeldError struct {
	Node      string
	Holder    string
	Operation string
	Reason    string
	Since     time.Time
	Duration  time.Duration
}

func (e *HeldError) Error() string {
	msg := fmt.Sprintf("node %s is leased by %q", e.Node, e.Holder)
	if e.Operation != "" {
		msg += " for " + e.Operation
	}
	if e.Reason != "" {
		msg += fmt.Sprintf(" (%s)", e.Reason)
	}
	if !e.Since.IsZero() {
		msg += " since " + e.Since.UTC().Format(time.RFC3339)
	}
	return msg
}

// IsHeld returns the HeldError in err's chain, if any.
func IsHeld(err error) (*HeldError, bool) {
	var h *HeldError
	ok := errors.As(err, &h)
	return h, ok
}

func heldError(node string, l *coordinationv1.Lease) *HeldError {
	i := FromLease(node, l)
	return &HeldError{Node: node, Holder: i.Holder, Operation: i.Operation, Reason: i.Reason, Since: i.Acquired, Duration: i.Duration}
}

// ErrNotHolder is returned when renewing or releasing a lease held by
// someone else (or by nobody).
var ErrNotHolder = errors.New("not the lease holder")
