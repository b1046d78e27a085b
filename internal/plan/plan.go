// Package plan previews what a maintenance request would do, without
// changing anything: per node, the action and the DisruptionPolicy rule
// that chose it, when it would start and what decides that (lull-agent on
// the node, window, budget, another lease holder), the pods a drain would
// evict, the PodDisruptionBudgets that would block it now, and warnings.
//
// It decides with the drainer's own code (the forecast, the gates of
// internal/gate and the drain round of internal/drain), from the cluster state it
// reads, so a preview and the drainer cannot disagree about the same
// state.
package plan

import (
	"k8s.io/utils/clock"

	"lull.dev/lull/internal/options"
)

// Options configure a preview: the drainer's options it decides by
// (internal/options declares them once, defaults and flags, for lull-drainer
// and kubectl-lull alike; they must match the drainer's configuration for
// the preview to match) and the clock.
type Options struct {
	// Maintenance are the drainer's options: the shared settings (the
	// maintenance label, lease namespace, policy for nodes no window
	// selects, default budget and window search horizon), its identity
	// (the holder family), --delete-emptydir-data, and the namespace of
	// lull-agent's leases (a plan with host steps waits for an agent on
	// the node, as the drainer's).
	options.Maintenance
	// Clock gives now.
	Clock clock.WithTickerAndDelayedExecution
}

// DefaultOptions are the drainer's defaults.
func DefaultOptions() Options { return Options{Maintenance: options.DefaultMaintenance()} }

// withDefaults fills in what o leaves unset with the drainer's defaults.
func (o Options) withDefaults() Options {
	o.Maintenance.Default()
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}
