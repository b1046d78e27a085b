package integration

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"lull.dev/lull/lease"
)

func createNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := cp.Clientset.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return n
}

func ensureNamespace(t *testing.T, ns string) {
	t.Helper()
	_, err := cp.Clientset.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
}

// countingTransport counts the requests a client makes, by HTTP method.
type countingTransport struct {
	rt     http.RoundTripper
	mu     sync.Mutex
	counts map[string]int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.counts[r.Method]++
	c.mu.Unlock()
	return c.rt.RoundTrip(r)
}

func (c *countingTransport) reset() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.counts
	c.counts = map[string]int{}
	return out
}

func countingClient(t *testing.T) (kubernetes.Interface, *countingTransport) {
	cfg := rest.CopyConfig(cp.Config)
	ct := &countingTransport{counts: map[string]int{}}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { ct.rt = rt; return ct }
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return cs, ct
}

// TestLeaseRoundTrips reports how many API requests, and writes, each
// operation costs.
func TestLeaseRoundTrips(t *testing.T) {
	ensureNamespace(t, lease.DefaultNamespace)
	createNode(t, "rt-node")
	cs, ct := countingClient(t)
	c := lease.New(cs, lease.Options{})
	ctx := t.Context()

	_, err := c.Acquire(ctx, "rt-node", "rt", "drain", "", time.Minute)
	require.NoError(t, err)
	acq := ct.reset()
	_, err = c.Renew(ctx, "rt-node", "rt")
	require.NoError(t, err)
	ren := ct.reset()
	require.NoError(t, c.Release(ctx, "rt-node", "rt"))
	rel := ct.reset()
	t.Logf("acquire (new lease): %v; renew: %v; release: %v", acq, ren, rel)
	require.Equal(t, 1, acq["POST"]+acq["PUT"], "acquire is one write")
	require.Equal(t, map[string]int{"PUT": 1}, ren, "renew is one request")
	require.Equal(t, map[string]int{"DELETE": 1}, rel, "release is one request")
}

// TestLeaseRace has 20 actors race for one node's lease many times; a
// watcher records every version. At no moment do two actors hold it.
func TestLeaseRace(t *testing.T) {
	ensureNamespace(t, lease.DefaultNamespace)
	createNode(t, "race-node")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	w, err := cp.Clientset.CoordinationV1().Leases(lease.DefaultNamespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=node-race-node"})
	require.NoError(t, err)
	var (
		events  []watch.Event
		evMu    sync.Mutex
		watchWG sync.WaitGroup
	)
	watchWG.Add(1)
	go func() {
		defer watchWG.Done()
		for ev := range w.ResultChan() {
			evMu.Lock()
			events = append(events, ev)
			evMu.Unlock()
		}
	}()

	const actors, rounds = 20, 10
	var inside, maxInside, acquired, refused, conflicts atomic.Int32
	var wg sync.WaitGroup
	for a := 0; a < actors; a++ {
		wg.Add(1)
		go func(a int) {
			defer wg.Done()
			holder := fmt.Sprintf("actor-%02d", a)
			c := lease.New(cp.Clientset, lease.Options{})
			for got := 0; got < rounds && ctx.Err() == nil; {
				_, err := c.Acquire(ctx, "race-node", holder, "reboot", "race", 30*time.Second)
				if err != nil {
					if _, held := lease.IsHeld(err); held {
						refused.Add(1)
					} else {
						conflicts.Add(1)
					}
					time.Sleep(time.Duration(1+a%5) * time.Millisecond)
					continue
				}
				n := inside.Add(1)
				for {
					m := maxInside.Load()
					if n <= m || maxInside.CompareAndSwap(m, n) {
						break
					}
				}
				acquired.Add(1)
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := c.Release(ctx, "race-node", holder); err != nil {
					t.Errorf("%s release: %v", holder, err)
					return
				}
				got++
			}
		}(a)
	}
	wg.Wait()
	// Let the watcher drain, then stop it.
	time.Sleep(200 * time.Millisecond)
	w.Stop()
	watchWG.Wait()

	// Replay the watch: the holder changes only by deletion and creation,
	// never by an update from one live holder to another.
	holders := map[string]bool{}
	var cur string
	overlaps := 0
	for _, ev := range events {
		l, ok := ev.Object.(*coordinationv1.Lease)
		if !ok {
			continue
		}
		h := ptr.Deref(l.Spec.HolderIdentity, "")
		switch ev.Type {
		case watch.Added:
			if cur != "" {
				overlaps++
			}
			cur = h
			holders[h] = true
		case watch.Modified:
			if h != cur {
				overlaps++
			}
		case watch.Deleted:
			cur = ""
		}
	}
	t.Logf("trials: %d acquisitions, %d refused (held), %d lost races; %d watch events; %d distinct holders; max concurrent holders %d; overlapping holders %d",
		acquired.Load(), refused.Load(), conflicts.Load(), len(events), len(holders), maxInside.Load(), overlaps)
	require.Equal(t, int32(actors*rounds), acquired.Load())
	require.Equal(t, int32(1), maxInside.Load(), "never two holders at once")
	require.Zero(t, overlaps, "the watch never shows a holder replaced while live")
	require.Len(t, holders, actors)
}

// offsetClock is a real clock running off by a fixed offset, like a machine
// whose time is wrong.
type offsetClock struct {
	clock.RealClock
	offset time.Duration
}

func (c offsetClock) Now() time.Time                  { return time.Now().Add(c.offset) }
func (c offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// TestLeaseSkewedClocks: contenders whose clocks run 30 s fast or slow
// never take over a live lease; once the holder dies, a contender takes
// over within one lease duration plus one retry.
func TestLeaseSkewedClocks(t *testing.T) {
	ensureNamespace(t, lease.DefaultNamespace)
	createNode(t, "skew-node")
	ctx := t.Context()
	const duration, renewEvery, retry = 4 * time.Second, time.Second, 250 * time.Millisecond

	holder := lease.New(cp.Clientset, lease.Options{})
	_, err := holder.Acquire(ctx, "skew-node", "holder", "update", "", duration)
	require.NoError(t, err)
	holderCtx, killHolder := context.WithCancel(ctx)
	var lastRenew atomic.Int64
	lastRenew.Store(time.Now().UnixNano())
	holderDone := make(chan struct{})
	go func() {
		defer close(holderDone)
		tick := time.NewTicker(renewEvery)
		defer tick.Stop()
		for {
			select {
			case <-holderCtx.Done():
				return
			case <-tick.C:
				if _, err := holder.Renew(holderCtx, "skew-node", "holder"); err == nil {
					lastRenew.Store(time.Now().UnixNano())
				}
			}
		}
	}()

	contenders := map[string]*lease.Client{
		"fast-30s": lease.New(cp.Clientset, lease.Options{Clock: offsetClock{offset: 30 * time.Second}}),
		"slow-30s": lease.New(cp.Clientset, lease.Options{Clock: offsetClock{offset: -30 * time.Second}}),
	}
	// For three lease durations of a live holder, nobody takes over.
	deadline := time.Now().Add(3 * duration)
	attempts := 0
	for time.Now().Before(deadline) {
		for name, c := range contenders {
			_, err := c.Acquire(ctx, "skew-node", name, "drain", "", duration)
			_, held := lease.IsHeld(err)
			require.True(t, held || apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err), "%s must not take a live lease, got %v", name, err)
			attempts++
		}
		time.Sleep(retry)
	}
	t.Logf("skewed contenders made %d attempts on a live lease; none succeeded", attempts)

	killHolder()
	<-holderDone
	died := time.Unix(0, lastRenew.Load())
	var took time.Time
	for took.IsZero() {
		require.Less(t, time.Since(died), 3*duration, "takeover did not happen")
		if _, err := contenders["fast-30s"].Acquire(ctx, "skew-node", "fast-30s", "drain", "", duration); err == nil {
			took = time.Now()
			break
		}
		time.Sleep(retry)
	}
	after := took.Sub(died)
	t.Logf("holder's last renewal to takeover: %s (lease duration %s, retry %s)", after.Round(time.Millisecond), duration, retry)
	require.LessOrEqual(t, after, duration+retry+time.Second, "takeover within one lease duration plus one retry (and request latency)")
	info, err := contenders["fast-30s"].Get(ctx, "skew-node")
	require.NoError(t, err)
	require.Equal(t, int32(1), info.Transitions)
}
