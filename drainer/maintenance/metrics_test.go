package maintenance

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
)

// The phase gauges are read at scrape time; when the cache cannot list,
// the scrape still carries the other metrics and says the gauges are
// missing (lull_maintenance_gauges_error 1) instead of leaving them out
// silently.
func TestMetricsScrapeSaysWhyGaugesAreMissing(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).Build()
	gather := func(r client.Reader) map[string][]float64 {
		reg := prometheus.NewRegistry()
		m := NewMetrics(r)
		require.NoError(t, m.Register(reg))
		m.Evictions.WithLabelValues("evicted").Inc()
		families, err := reg.Gather()
		require.NoError(t, err)
		got := map[string][]float64{}
		for _, f := range families {
			for _, mt := range f.GetMetric() {
				got[f.GetName()] = append(got[f.GetName()], mt.GetGauge().GetValue()+mt.GetCounter().GetValue())
			}
		}
		return got
	}
	got := gather(c)
	require.Len(t, got["lull_maintenance_nodes"], len(lullv1alpha1.Phases), "every phase, at zero")
	require.Equal(t, []float64{0}, got["lull_maintenance_gauges_error"])

	failing := interceptor.NewClient(c, interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*lullv1alpha1.NodeMaintenanceList); ok {
				return errors.New("cache not synced")
			}
			return cl.List(ctx, list, opts...)
		},
	})
	got = gather(failing)
	require.Equal(t, []float64{1}, got["lull_maintenance_gauges_error"])
	require.NotContains(t, got, "lull_maintenance_nodes")
	require.Equal(t, []float64{1}, got["lull_evictions_total"], "the other metrics still go out")
}

// lull_maintenance_disrupting_seconds: how long lull has held each node it
// is disrupting, with its phase; waiting and finished requests have none.
func TestDisruptingSeconds(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	nm := func(name string, p lullv1alpha1.MaintenancePhase, started *time.Time) *lullv1alpha1.NodeMaintenance {
		n := &lullv1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: lullv1alpha1.NodeMaintenanceSpec{NodeName: name},
			Status: lullv1alpha1.NodeMaintenanceStatus{Phase: p}}
		if started != nil {
			n.Status.StartedAt = &metav1.Time{Time: *started}
		}
		return n
	}
	started := t0.Add(-90 * time.Minute)
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(
		nm("n1", lullv1alpha1.PhaseDraining, &started), nm("n2", lullv1alpha1.PhaseWaitingForBudget, nil),
		nm("n3", lullv1alpha1.PhaseCompleted, &started)).Build()
	m := NewMetrics(c)
	m.Now = func() time.Time { return t0 }
	want := `
# HELP lull_maintenance_disrupting_seconds Seconds since lull started disrupting the node (took its lease and budget slot), per node whose request is cordoning, draining, drained, acting or powered off, with the phase.
# TYPE lull_maintenance_disrupting_seconds gauge
lull_maintenance_disrupting_seconds{node="n1",phase="Draining"} 5400
`
	require.NoError(t, testutil.CollectAndCompare(m, strings.NewReader(want), "lull_maintenance_disrupting_seconds"))
}
