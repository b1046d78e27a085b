package lease

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// Observer holds the protocol's one rule of expiry: a lease version
// counts as expired once it has gone unchanged for its duration
// (ExpiryDuration) as measured on the observer's own clock since the
// observer first saw that version. The holder's timestamps never count, so
// clock offset between machines cannot make a live lease look expired, nor
// an abandoned one look alive to an observer that has watched it.
// Everything in lull that judges expiry asks an Observer: the Client when
// it contends for a lease, the forecast for the scheduler and the drainer,
// and lull-agent before it acts under a fencing token. It is safe for
// concurrent use.
type Observer struct {
	clock clock.PassiveClock

	mu   sync.Mutex
	seen map[string]observation // namespace/name -> first sight of the version
}

// observation is when an Observer first saw a lease version.
type observation struct {
	resourceVersion string // fingerprint of the version
	at              time.Time
}

// NewObserver returns an Observer measuring with clk (a real clock if nil).
func NewObserver(clk clock.PassiveClock) *Observer {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Observer{clock: clk, seen: map[string]observation{}}
}

func observerKey(l *coordinationv1.Lease) string { return l.Namespace + "/" + l.Name }

// Observe records l's version if it is new to the observer and returns
// when that version expires: when the observer first saw it plus
// ExpiryDuration(l).
func (o *Observer) Observe(l *coordinationv1.Lease) time.Time {
	fp := Fingerprint(l)
	o.mu.Lock()
	defer o.mu.Unlock()
	k := observerKey(l)
	ob, ok := o.seen[k]
	if !ok || ob.resourceVersion != fp {
		ob = observation{resourceVersion: fp, at: o.clock.Now()}
		o.seen[k] = ob
	}
	return ob.at.Add(ExpiryDuration(l))
}

// Expired observes l and reports whether its version has expired now.
func (o *Observer) Expired(l *coordinationv1.Lease) bool {
	return !o.clock.Now().Before(o.Observe(l))
}

// Wrote records that the caller itself wrote l's version just now (an
// acquisition or renewal): its expiry counts from now.
func (o *Observer) Wrote(l *coordinationv1.Lease) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen[observerKey(l)] = observation{resourceVersion: Fingerprint(l), at: o.clock.Now()}
}

// Forget drops what the observer knows of a lease (it was deleted).
func (o *Observer) Forget(namespace, name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.seen, namespace+"/"+name)
}

// Fenced says why an actor may not act under token now on the strength of
// lease l held by a replica of holderFamily's tool ("" when it may): l
// must be the lease the token was issued for (same UID: not released and
// taken again), with no change of holder since (same transitions), held
// by that tool, and not expired by observation. A disruptive action checks
// this against the lease read from the API server just before it acts.
func (o *Observer) Fenced(l *coordinationv1.Lease, token Token, holderFamily string) string {
	holder := ptr.Deref(l.Spec.HolderIdentity, "")
	transitions := ptr.Deref(l.Spec.LeaseTransitions, 0)
	switch {
	case l.UID != token.UID:
		return fmt.Sprintf("the lease was released and taken again (UID %s, token names %s)", l.UID, token.UID)
	case transitions != token.Transitions:
		return fmt.Sprintf("the lease changed holder since the token was issued (transitions %d, token %d)", transitions, token.Transitions)
	case !SameFamily(holder, holderFamily):
		return fmt.Sprintf("the lease is held by %q, not by %s", holder, holderFamily)
	case o.Expired(l):
		return fmt.Sprintf("the lease has expired: unchanged for %s since this process first saw its version", ExpiryDuration(l))
	}
	return ""
}

// ExpiryDuration is how long a lease version must go unchanged before it
// counts as expired. A lease written without a duration (by a third-party
// tool) gets DefaultDuration rather than zero, so it is never taken over on
// the second look.
func ExpiryDuration(l *coordinationv1.Lease) time.Duration {
	if d := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second; d > 0 {
		return d
	}
	return DefaultDuration
}

// Fingerprint identifies a lease version: its resourceVersion and, like
// client-go's leader election record, the holder and renew time, so a
// renewal is noticed even from a source that does not bump
// resourceVersion.
func Fingerprint(l *coordinationv1.Lease) string {
	renew := ""
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
	}
	return l.ResourceVersion + "|" + ptr.Deref(l.Spec.HolderIdentity, "") + "|" + renew
}

// Get returns node's lease, or nil when there is none.
func (c *Client) Get(ctx context.Context, node string) (*Info, error) {
	l, err := c.cs.CoordinationV1().Leases(c.namespace).Get(ctx, Name(node), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("getting lease of node %s: %w", node, err)
	}
	c.observe(l)
	return c.info(node, l), nil
}

// List returns every node lease in the namespace.
func (c *Client) List(ctx context.Context) ([]*Info, error) {
	list, err := c.cs.CoordinationV1().Leases(c.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing leases in %s: %w", c.namespace, err)
	}
	var out []*Info
	for i := range list.Items {
		l := &list.Items[i]
		node, ok := NodeOf(l.Name)
		if !ok {
			continue
		}
		c.observe(l)
		out = append(out, c.info(node, l))
	}
	return out, nil
}

// observe records when this client first saw the lease's current version
// and reports whether it has since gone unrenewed for its full duration,
// measured on this client's own clock. Clock offset between machines
// therefore cannot make a live lease look expired: only elapsed local time
// counts, never the holder's timestamps.
func (c *Client) observe(l *coordinationv1.Lease) bool { return c.obs.Expired(l) }

func (c *Client) info(node string, l *coordinationv1.Lease) *Info {
	i := FromLease(node, l)
	i.Expired = c.obs.Expired(l)
	return i
}
