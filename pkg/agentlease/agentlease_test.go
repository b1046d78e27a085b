package agentlease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestAlive(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	l := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: t0}, LeaseDurationSeconds: ptr.To[int32](40)}}
	require.True(t, Alive(l, t0.Add(39*time.Second)))
	require.False(t, Alive(l, t0.Add(40*time.Second)))
	require.False(t, Alive(nil, t0))
	require.False(t, Alive(&coordinationv1.Lease{}, t0), "never renewed")
	l.Spec.LeaseDurationSeconds = nil
	require.True(t, Alive(l, t0.Add(Duration-time.Second)), "default duration")
	require.Equal(t, "lull-agent-n1", Name("n1"))
}
