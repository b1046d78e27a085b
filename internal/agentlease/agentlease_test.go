package agentlease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

var t0 = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)

func TestAlive(t *testing.T) {
	l := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: t0}, LeaseDurationSeconds: ptr.To[int32](40)}}
	require.True(t, Alive(l, t0.Add(39*time.Second)))
	require.False(t, Alive(l, t0.Add(40*time.Second)))
	require.False(t, Alive(nil, t0))
	require.False(t, Alive(&coordinationv1.Lease{}, t0), "never renewed")
	l.Spec.LeaseDurationSeconds = nil
	require.True(t, Alive(l, t0.Add(Duration-time.Second)), "default duration")
	l.Spec.LeaseDurationSeconds = ptr.To[int32](68 * 365 * 24 * 3600)
	require.True(t, Alive(l, t0.Add(MaxDuration-time.Second)))
	require.False(t, Alive(l, t0.Add(MaxDuration)), "a 68-year heartbeat shows an agent for MaxDuration at most")
	require.Equal(t, "lull-agent-n1", Name("n1"))
}

// agentLease is node's agent lease in namespace, as lull-agent writes it.
func agentLease(namespace, node string, renewed *time.Time) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: Name(node), Namespace: namespace, Labels: map[string]string{ComponentLabel: Component}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("lull-agent-abcde"), LeaseDurationSeconds: ptr.To(int32(Duration / time.Second))}}
	if renewed != nil {
		l.Spec.RenewTime = &metav1.MicroTime{Time: *renewed}
	}
	return l
}

func withoutHolder(l *coordinationv1.Lease) *coordinationv1.Lease {
	l.Spec.HolderIdentity = nil
	return l
}

const noAgent = "no lull-agent runs on node n1 (no Lease lull-system/lull-agent-n1): is the lull-agent DaemonSet installed, and its pod running on the node?"

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
		now   time.Time
		alive bool
		why   string
	}{
		{"fresh", agentLease(DefaultNamespace, "n1", &t0), t0.Add(10 * time.Second), true, ""},
		{"fresh to the last second", agentLease(DefaultNamespace, "n1", &t0), t0.Add(Duration - time.Second), true, ""},
		{"expired", agentLease(DefaultNamespace, "n1", &t0), t0.Add(Duration), false,
			"lull-agent on node n1 stopped renewing its lease lull-system/lull-agent-n1 (last renewed 2026-11-24T10:00:00Z, by lull-agent-abcde)"},
		{"never renewed", agentLease(DefaultNamespace, "n1", nil), t0, false,
			"lull-agent on node n1 stopped renewing its lease lull-system/lull-agent-n1 (last renewed never, by lull-agent-abcde)"},
		{"no holder", withoutHolder(agentLease(DefaultNamespace, "n1", &t0)), t0.Add(time.Hour), false,
			"lull-agent on node n1 stopped renewing its lease lull-system/lull-agent-n1 (last renewed 2026-11-24T10:00:00Z, by ?)"},
		{"none", nil, t0, false, noAgent},
		{"another node's", agentLease(DefaultNamespace, "n2", &t0), t0, false, noAgent},
		{"in another namespace", agentLease("elsewhere", "n1", &t0), t0, false, noAgent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			alive, why := Check(DefaultNamespace, "n1", tc.lease, tc.now)
			require.Equal(t, tc.alive, alive)
			require.Equal(t, tc.why, why)
		})
	}
}

// Lookup reads the lease with the reader it is given and Checks it: what
// it finds is judged as Check judges it, a lease not found is no agent,
// and a failed read is an error, not a verdict.
func TestLookup(t *testing.T) {
	objs := []client.Object{agentLease(DefaultNamespace, "fresh", &t0), agentLease(DefaultNamespace, "stale", ptr.To(t0.Add(-time.Hour))),
		agentLease("elsewhere", "n1", &t0)}
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(objs...).Build()
	ctx := context.Background()
	for node, want := range map[string]bool{"fresh": true, "stale": false, "n1": false} {
		alive, why, err := Lookup(ctx, c, DefaultNamespace, node, t0)
		require.NoError(t, err, node)
		require.Equal(t, want, alive, node)
		var l coordinationv1.Lease
		if err := c.Get(ctx, client.ObjectKey{Namespace: DefaultNamespace, Name: Name(node)}, &l); err == nil {
			wantAlive, wantWhy := Check(DefaultNamespace, node, &l, t0)
			require.Equal(t, wantAlive, alive, node)
			require.Equal(t, wantWhy, why, node)
		} else {
			require.Equal(t, noAgent, why, "not found: no agent")
		}
	}
	alive, _, err := Lookup(ctx, c, "elsewhere", "n1", t0)
	require.NoError(t, err)
	require.True(t, alive, "the namespace asked is the one read")

	failing := fake.NewClientBuilder().WithScheme(scheme(t)).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return errors.New("connection refused")
		}}).Build()
	alive, why, err := Lookup(ctx, failing, DefaultNamespace, "n1", t0)
	require.ErrorContains(t, err, "reading lull-agent's lease lull-system/lull-agent-n1: connection refused")
	require.False(t, alive)
	require.Empty(t, why)
}

func TestSelector(t *testing.T) {
	require.True(t, Selector().Matches(labels.Set(agentLease(DefaultNamespace, "n1", nil).Labels)))
	require.False(t, Selector().Matches(labels.Set{ComponentLabel: "lull-drainer"}))
}

func scheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	require.NoError(t, coordinationv1.AddToScheme(s))
	return s
}
