package lease

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// Options configure a Client.
type Options struct {
	// Namespace of the node leases (DefaultNamespace if empty).
	Namespace string
	// Clock measures expiry by observation (a real clock if nil).
	Clock clock.PassiveClock
	// TakeOverReplicas makes Acquire take, and Release release, a lease
	// held by another replica of the caller's tool (SameFamily) at once,
	// without waiting for it to expire. Set it only when the replicas elect a leader, so that the
	// caller acting means the holder was deposed; the deposed replica's
	// next renewal fails with ErrNotHolder and it stops.
	TakeOverReplicas bool
	// NodeUID returns a node's UID for the owner reference of a lease the
	// client creates (nil: a GET from the API server). A caller that
	// keeps an informer of nodes saves that request per lease; a UID the
	// cache still shows for a node deleted and recreated under the same
	// name only gets the lease garbage-collected, and the holder's next
	// renewal then fails with ErrNotHolder, which stops it.
	NodeUID func(ctx context.Context, node string) (types.UID, error)
}

// Client acquires, renews and releases node leases. It is safe for
// concurrent use; one Client per process keeps the observations that
// expiry is judged by.
type Client struct {
	cs        kubernetes.Interface
	namespace string
	clock     clock.PassiveClock
	takeOver  bool
	nodeUID   func(ctx context.Context, node string) (types.UID, error)

	// obs judges expiry by observation.
	obs *Observer

	mu sync.Mutex
	// held caches the last lease this client wrote, so a renewal or
	// release is a single request in the common case.
	held map[string]*coordinationv1.Lease
}

// New returns a Client.
func New(cs kubernetes.Interface, opts Options) *Client {
	c := &Client{cs: cs, namespace: opts.Namespace, clock: opts.Clock, takeOver: opts.TakeOverReplicas, nodeUID: opts.NodeUID,
		held: map[string]*coordinationv1.Lease{}}
	if c.namespace == "" {
		c.namespace = DefaultNamespace
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	c.obs = NewObserver(c.clock)
	return c
}

// Namespace returns the namespace the client's leases live in.
func (c *Client) Namespace() string { return c.namespace }

// Acquire takes node's lease for holder. It creates the lease, takes over a
// lease that is free or has expired by observation, or renews it when holder
// already holds it. It returns a *HeldError when another actor holds a
// live lease. A zero duration means DefaultDuration; a negative one, or
// one a Lease cannot hold (under a second, or more than MaxDuration), is
// an error.
func (c *Client) Acquire(ctx context.Context, node, holder, operation, reason string, duration time.Duration) (*Info, error) {
	if holder == "" {
		return nil, fmt.Errorf("acquiring lease for node %s: holder must not be empty", node)
	}
	if duration < 0 {
		return nil, fmt.Errorf("acquiring lease for node %s: duration %s is negative; give a positive duration, or zero for the default (%s)", node, duration, DefaultDuration)
	}
	if duration == 0 {
		duration = DefaultDuration
	}
	if !FitsALease(duration) {
		return nil, fmt.Errorf("acquiring lease for node %s: duration %s does not fit a Lease (1s to %s); give one in that range, or zero for the default (%s)",
			node, duration, MaxDuration, DefaultDuration)
	}
	leases := c.cs.CoordinationV1().Leases(c.namespace)
	name := Name(node)
	if !c.Wrote(node) {
		// No lease of ours to renew: the common case is no lease at all
		// (holders delete theirs), so create first and read only if one
		// exists.
		info, err := c.create(ctx, node, holder, operation, reason, duration)
		if !apierrors.IsAlreadyExists(err) {
			return info, err
		}
	}
	cur, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		info, err := c.create(ctx, node, holder, operation, reason, duration)
		if apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("lease %s/%s was created by another actor first; retry: %w", c.namespace, name, err)
		}
		return info, err
	}
	if err != nil {
		return nil, fmt.Errorf("getting lease %s/%s: %w", c.namespace, name, err)
	}
	expired := c.observe(cur)
	curHolder := ptr.Deref(cur.Spec.HolderIdentity, "")
	switch {
	case curHolder == holder:
		// Already ours: acquiring again renews and may update the operation.
	case curHolder == "" || expired || (c.takeOver && SameFamily(curHolder, holder)):
		cur.Spec.LeaseTransitions = ptr.To(ptr.Deref(cur.Spec.LeaseTransitions, 0) + 1)
		cur.Spec.AcquireTime = c.now()
	default:
		return nil, heldError(node, cur)
	}
	cur.Spec.HolderIdentity = ptr.To(holder)
	cur.Spec.RenewTime = c.now()
	cur.Spec.LeaseDurationSeconds = ptr.To(int32(duration / time.Second))
	if cur.Spec.AcquireTime == nil {
		cur.Spec.AcquireTime = c.now()
	}
	setAnnotations(cur, operation, reason)
	updated, err := leases.Update(ctx, cur, metav1.UpdateOptions{})
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("lease %s/%s changed while acquiring (another actor acted first); retry: %w", c.namespace, name, err)
		}
		return nil, fmt.Errorf("updating lease %s/%s: %w", c.namespace, name, err)
	}
	c.remember(node, updated)
	return c.info(node, updated), nil
}

// create creates node's lease for holder; an AlreadyExists error is
// returned as the API server gave it.
func (c *Client) create(ctx context.Context, node, holder, operation, reason string, duration time.Duration) (*Info, error) {
	uid, err := c.ownerUID(ctx, node)
	if err != nil {
		return nil, fmt.Errorf("getting node %s for the lease's owner reference: %w", node, err)
	}
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:      Name(node),
			Namespace: c.namespace,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node, UID: uid,
			}},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To(int32(duration / time.Second)), //nolint:gosec // G115: Acquire bounds duration to MaxDuration
			AcquireTime:          c.now(),
			RenewTime:            c.now(),
			LeaseTransitions:     ptr.To[int32](0),
		},
	}
	setAnnotations(l, operation, reason)
	created, err := c.cs.CoordinationV1().Leases(c.namespace).Create(ctx, l, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("creating lease %s/%s: %w", c.namespace, l.Name, err)
	}
	c.remember(node, created)
	return c.info(node, created), nil
}

// Wrote reports whether this client created, took or renewed node's lease
// and has not released or lost it since, as far as it knows: a caller
// keeping an informer of leases can skip a Release (and its read) when
// neither the informer nor Wrote shows a lease to release.
func (c *Client) Wrote(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held[node] != nil
}

// ownerUID is node's UID, from NodeUID when the caller gave one.
func (c *Client) ownerUID(ctx context.Context, node string) (types.UID, error) {
	if c.nodeUID != nil {
		return c.nodeUID(ctx, node)
	}
	n, err := c.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return n.UID, nil
}

// Renew extends holder's lease on node. It fails with ErrNotHolder when the
// lease is gone or another actor holds it (a lost lease: stop disrupting).
func (c *Client) Renew(ctx context.Context, node, holder string) (*Info, error) {
	leases := c.cs.CoordinationV1().Leases(c.namespace)
	stale := c.cached(node)
	for attempt := 0; attempt < 2; attempt++ {
		cur, err := c.heldBy(ctx, node, func(h string) bool { return h == holder }, stale)
		if err != nil {
			return nil, fmt.Errorf("renewing lease of node %s: %w", node, err)
		}
		if cur == nil {
			return nil, fmt.Errorf("renewing lease of node %s: lease is gone: %w", node, ErrNotHolder)
		}
		cur.Spec.RenewTime = c.now()
		updated, err := leases.Update(ctx, cur, metav1.UpdateOptions{})
		if err == nil {
			c.remember(node, updated)
			return c.info(node, updated), nil
		}
		if !apierrors.IsConflict(err) {
			return nil, fmt.Errorf("renewing lease of node %s: %w", node, err)
		}
		// Our cached copy is stale; read the current one and check we
		// still hold it before trying once more.
		stale = nil
	}
	return nil, fmt.Errorf("renewing lease of node %s: conflicting updates; retry", node)
}

// Release deletes holder's lease on node, with the lease's UID and
// resourceVersion as preconditions so a lease taken over by someone else in
// the meantime is never deleted. Releasing a lease that does not exist
// succeeds. With TakeOverReplicas, what Acquire would take it also
// releases: a lease another replica of holder's tool holds (one killed
// between acquiring it and using it leaves it behind, and only the leader
// is left to release it).
func (c *Client) Release(ctx context.Context, node, holder string) error {
	return c.release(ctx, node, func(h string) bool { return h == holder || (c.takeOver && SameFamily(h, holder)) })
}

// ReleaseForTool is Release for a request that has ended for every replica
// of holder's tool: it deletes the lease also when another replica of the
// tool (SameFamily) holds it, for instance one that stopped mid-request.
func (c *Client) ReleaseForTool(ctx context.Context, node, holder string) error {
	return c.release(ctx, node, func(h string) bool { return SameFamily(h, holder) })
}

func (c *Client) release(ctx context.Context, node string, ours func(string) bool) error {
	leases := c.cs.CoordinationV1().Leases(c.namespace)
	stale := c.cached(node)
	for attempt := 0; attempt < 2; attempt++ {
		cur, err := c.heldBy(ctx, node, ours, stale)
		if err != nil {
			return fmt.Errorf("releasing lease of node %s: %w", node, err)
		}
		if cur == nil {
			return nil
		}
		err = leases.Delete(ctx, cur.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{
			UID: ptr.To(cur.UID), ResourceVersion: ptr.To(cur.ResourceVersion),
		}})
		if err == nil || apierrors.IsNotFound(err) {
			c.forget(node)
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("releasing lease of node %s: %w", node, err)
		}
		stale = nil
	}
	return fmt.Errorf("releasing lease of node %s: conflicting updates; retry", node)
}

// heldBy returns node's lease if its holder is ours: cached when given (a
// stale copy makes the write fail with Conflict), otherwise read. It
// returns nil, nil when there is no lease, and ErrNotHolder when another
// actor holds it.
func (c *Client) heldBy(ctx context.Context, node string, ours func(string) bool, cached *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	cur := cached
	if cur == nil {
		got, err := c.cs.CoordinationV1().Leases(c.namespace).Get(ctx, Name(node), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			c.forget(node)
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("getting lease: %w", err)
		}
		cur = got
	}
	if h := ptr.Deref(cur.Spec.HolderIdentity, ""); !ours(h) {
		c.forget(node)
		return nil, fmt.Errorf("held by %q: %w", h, ErrNotHolder)
	}
	return cur, nil
}

func (c *Client) now() *metav1.MicroTime {
	return &metav1.MicroTime{Time: c.clock.Now()}
}

func (c *Client) remember(node string, l *coordinationv1.Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held[node] = l.DeepCopy()
	c.obs.Wrote(l)
}

func (c *Client) forget(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.held, node)
}

func (c *Client) cached(node string) *coordinationv1.Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.held[node]; l != nil {
		return l.DeepCopy()
	}
	return nil
}

func setAnnotations(l *coordinationv1.Lease, operation, reason string) {
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	if operation != "" {
		l.Annotations[AnnotationOperation] = operation
	} else {
		delete(l.Annotations, AnnotationOperation)
	}
	if reason != "" {
		l.Annotations[AnnotationReason] = reason
	} else {
		delete(l.Annotations, AnnotationReason)
	}
}
