package agent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
)

// Metrics of the agent's steps.
type Metrics struct {
	Actions  *prometheus.CounterVec
	Duration *prometheus.HistogramVec
}

// NewMetrics registers the agent's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Actions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lull_agent_actions_total",
			Help: "Host steps lull-agent ran, by type and result (Succeeded, Failed, TimedOut; Running for an issued reboot)."}, []string{"type", "result"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "lull_agent_action_duration_seconds",
			Help: "How long host steps took to run, by type.", Buckets: prometheus.ExponentialBuckets(0.1, 3, 10)}, []string{"type"}),
	}
	reg.MustRegister(m.Actions, m.Duration)
	return m
}

func (m *Metrics) observe(t lullv1alpha1.DisruptionAction, result lullv1alpha1.ActionState, d time.Duration) {
	m.Actions.WithLabelValues(string(t), string(result)).Inc()
	m.Duration.WithLabelValues(string(t)).Observe(d.Seconds())
}
