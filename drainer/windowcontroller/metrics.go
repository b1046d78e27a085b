package windowcontroller

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"lull.dev/lull/internal/window"
)

var (
	secondsUntilPermittedDesc = prometheus.NewDesc("lull_window_seconds_until_permitted",
		"Seconds until the window permits material changes to start: 0 when permitted now, -1 when restricted indefinitely, -2 when no window can be computed (invalid spec or none within the search horizon).",
		[]string{"window"}, nil)
	permittedRemainingDesc = prometheus.NewDesc("lull_window_permitted_remaining_seconds",
		"Seconds left in the current permitted period; 0 when restricted, -1 when permitted indefinitely.",
		[]string{"window"}, nil)
	gateHoldingDesc = prometheus.NewDesc("lull_window_gate_holding",
		"1 while the window's health gate (alerts, recovery) holds its nodes from starting, with the reason (AlertsFiring, AlertsUnknown, Settling, NodeUnwell, ...); 0 while it passes. Blocking pods are judged node by node: see lull_maintenance_nodes{phase=\"WaitingForGates\"}.",
		[]string{"window", "gate", "reason"}, nil)
	nodesDisruptingDesc = prometheus.NewDesc("lull_window_nodes_disrupting",
		"Nodes selected by the window that lull is disrupting now (cordoned, draining, acting): the budget slots in use.",
		[]string{"window"}, nil)
	maxUnavailableDesc = prometheus.NewDesc("lull_window_max_unavailable",
		"How many of the window's nodes lull may disrupt at once (maxUnavailable resolved against the selected nodes; 0: frozen).",
		[]string{"window"}, nil)
	nodesWaitingDesc = prometheus.NewDesc("lull_window_nodes_waiting",
		"Nodes selected by the window whose maintenance request waits (for the window, the budget or the lease).",
		[]string{"window"}, nil)
)

// Collector exports the window metrics, evaluated at scrape time so they
// are exact between reconciles.
type Collector struct {
	Clock   clock.PassiveClock
	mu      sync.Mutex
	ws      map[string]*window.Window
	waiting map[string]int32
	gates   map[string][]GateState
	budgets map[string][2]int // disrupting, maxUnavailable
}

// GateState is what one of a window's health gates says.
type GateState struct {
	Gate, Reason string
	Holds        bool
}

// NewCollector returns a Collector using clk.
func NewCollector(clk clock.PassiveClock) *Collector {
	return &Collector{Clock: clk, ws: map[string]*window.Window{}, waiting: map[string]int32{}, gates: map[string][]GateState{}, budgets: map[string][2]int{}}
}

// Set records the compiled window for name.
func (c *Collector) Set(name string, w *window.Window) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ws[name] = w
}

// SetWaiting records how many of the window's nodes have a waiting request.
func (c *Collector) SetWaiting(name string, n int32) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waiting[name] = n
}

// SetBudget records how many of the window's nodes lull disrupts and how
// many it may.
func (c *Collector) SetBudget(name string, disrupting, maxUnavailable int) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.budgets[name] = [2]int{disrupting, maxUnavailable}
}

// SetGates records what the window's health gates say.
func (c *Collector) SetGates(name string, gates []GateState) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gates[name] = gates
}

// Forget drops a deleted window.
func (c *Collector) Forget(name string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.ws, name)
	delete(c.waiting, name)
	delete(c.gates, name)
	delete(c.budgets, name)
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- secondsUntilPermittedDesc
	ch <- permittedRemainingDesc
	ch <- nodesWaitingDesc
	ch <- gateHoldingDesc
	ch <- nodesDisruptingDesc
	ch <- maxUnavailableDesc
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.Clock.Now()
	for name, w := range c.ws {
		res := w.Evaluate(now)
		ch <- prometheus.MustNewConstMetric(secondsUntilPermittedDesc, prometheus.GaugeValue, res.SecondsUntilPermitted(now), name)
		ch <- prometheus.MustNewConstMetric(permittedRemainingDesc, prometheus.GaugeValue, res.SecondsRemaining(now), name)
		ch <- prometheus.MustNewConstMetric(nodesWaitingDesc, prometheus.GaugeValue, float64(c.waiting[name]), name)
	}
	for name, b := range c.budgets {
		ch <- prometheus.MustNewConstMetric(nodesDisruptingDesc, prometheus.GaugeValue, float64(b[0]), name)
		ch <- prometheus.MustNewConstMetric(maxUnavailableDesc, prometheus.GaugeValue, float64(b[1]), name)
	}
	for name, gates := range c.gates {
		for _, g := range gates {
			v := 0.0
			if g.Holds {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(gateHoldingDesc, prometheus.GaugeValue, v, name, g.Gate, g.Reason)
		}
	}
}
