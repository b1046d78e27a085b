package lease

import (
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
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
