package maintenance

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/pkg/scheme"
)

// The phase gauges are read at scrape time; when the cache cannot list,
// the scrape still carries the other metrics and says the gauges are
// missing (lull_maintenance_gauges_error 1) instead of leaving them out
// silently.
func TestMetricsScrapeSaysWhyGaugesAreMissing(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
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
