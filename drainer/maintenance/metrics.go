package maintenance

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

var (
	nodesDesc = prometheus.NewDesc("lull_maintenance_nodes",
		"NodeMaintenance requests per phase.", []string{"phase"}, nil)
	gaugesErrorDesc = prometheus.NewDesc("lull_maintenance_gauges_error",
		"1 when the last scrape could not read the NodeMaintenances, so lull_maintenance_nodes and lull_maintenance_blocked_pods are missing from it; else 0.", nil, nil)
	blockedPodsDesc = prometheus.NewDesc("lull_maintenance_blocked_pods",
		"Pods whose eviction a PodDisruptionBudget refuses, per node under maintenance.", []string{"node", "poddisruptionbudget"}, nil)
	disruptingDesc = prometheus.NewDesc("lull_maintenance_disrupting_seconds",
		"Seconds since lull started disrupting the node (took its lease and budget slot), per node whose request is cordoning, draining, drained, acting or powered off, with the phase.", []string{"node", "phase"}, nil)
)

// Metrics are the controller's metrics. Gauges are read from the cache at
// scrape time, so they are right after a restart too.
type Metrics struct {
	Reader             client.Reader
	DrainDuration      prometheus.Histogram
	Evictions          *prometheus.CounterVec
	LeaseRenewFailures prometheus.Counter
	Decisions          *prometheus.CounterVec
	// ForeignUncordons counts cordons someone else removed from a node
	// lull holds (and lull restored).
	ForeignUncordons prometheus.Counter
	// Now is the scrape's time (time.Now when nil).
	Now func() time.Time
}

// NewMetrics returns the metrics; register them with Register.
func NewMetrics(reader client.Reader) *Metrics {
	return &Metrics{
		Reader: reader,
		DrainDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "lull_drain_duration_seconds",
			Help:    "Time from taking a node's lease to the node being drained.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14), // 1 s .. ~4.5 h
		}),
		Evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lull_evictions_total",
			Help: "Eviction attempts by result: evicted, blocked (PodDisruptionBudget), gone, error, forced.",
		}, []string{"result"}),
		LeaseRenewFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lull_lease_renew_failures_total",
			Help: "Failed renewals of node disruption leases lull holds (lost or unreachable).",
		}),
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lull_policy_decisions_total",
			Help: "DisruptionPolicy decisions recorded on requests (a request decided again after a policy change counts again), by action and rule.",
		}, []string{"action", "rule"}),
		ForeignUncordons: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lull_maintenance_foreign_uncordons_total",
			Help: "Cordons someone else removed from a node lull holds for a plan that needs them; lull cordoned each node again.",
		}),
	}
}

// Register adds the metrics to a registry.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.DrainDuration, m.Evictions, m.LeaseRenewFailures, m.Decisions, m.ForeignUncordons, m} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Describe implements prometheus.Collector for the scrape-time gauges.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- nodesDesc
	ch <- blockedPodsDesc
	ch <- gaugesErrorDesc
	ch <- disruptingDesc
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	var list lullv1alpha1.NodeMaintenanceList
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.Reader.List(ctx, &list); err != nil {
		// The other metrics still go out (failing the scrape would hide
		// them all); the error gauge and the log say why these are missing.
		log.Log.WithName("metrics").Error(err, "Listing NodeMaintenances for the phase gauges")
		ch <- prometheus.MustNewConstMetric(gaugesErrorDesc, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(gaugesErrorDesc, prometheus.GaugeValue, 0)
	now := time.Now()
	if m.Now != nil {
		now = m.Now()
	}
	perPhase := map[lullv1alpha1.MaintenancePhase]int{}
	for _, p := range lullv1alpha1.Phases {
		perPhase[p] = 0
	}
	for _, nm := range list.Items {
		p := nm.Status.Phase.OrPending()
		perPhase[p]++
		if p.Disrupting() && nm.Status.StartedAt != nil {
			ch <- prometheus.MustNewConstMetric(disruptingDesc, prometheus.GaugeValue, now.Sub(nm.Status.StartedAt.Time).Seconds(), nm.Spec.NodeName, string(p))
		}
		for _, b := range nm.Status.Blockers {
			ch <- prometheus.MustNewConstMetric(blockedPodsDesc, prometheus.GaugeValue, float64(len(b.Pods)), nm.Spec.NodeName, b.PodDisruptionBudget)
		}
	}
	for p, n := range perPhase {
		ch <- prometheus.MustNewConstMetric(nodesDesc, prometheus.GaugeValue, float64(n), string(p))
	}
}
