package serving

import (
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Options are the serving flags lull-drainer and lull-agent share: the
// metrics endpoint and the health probes. Each component sets its own
// defaults; the flags, their help and what they mean are declared here
// once.
type Options struct {
	// MetricsAddr is the metrics endpoint's bind address ("0": none).
	MetricsAddr string
	// MetricsSecure serves metrics over HTTPS to authenticated and
	// authorized clients (Metrics); false: plain HTTP, for loopback only.
	MetricsSecure bool
	// MetricsCertDir holds tls.crt and tls.key; empty: a self-signed
	// certificate generated in memory.
	MetricsCertDir string
	// ProbeAddr serves /healthz and /readyz.
	ProbeAddr string
}

// AddFlags registers the serving flags with o's values as defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", o.MetricsAddr, `address of the Prometheus metrics endpoint ("0" disables it)`)
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", o.MetricsSecure, "serve metrics over HTTPS to clients the API server authenticates and authorizes (get on the non-resource URL /metrics; ClusterRole lull-metrics-reader grants it); false: plain HTTP to anyone, for a loopback address only")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", o.MetricsCertDir, "directory with the metrics endpoint's tls.crt and tls.key, reloaded when they change; empty: a self-signed certificate generated in memory")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", o.ProbeAddr, "address of /healthz and /readyz")
}

// Metrics is the metrics server these options ask for (the package
// function Metrics).
func (o *Options) Metrics() metricsserver.Options {
	return Metrics(o.MetricsAddr, o.MetricsSecure, o.MetricsCertDir)
}

// WarnInsecure logs a warning for metrics served over plain HTTP beyond
// loopback (the package function WarnInsecure).
func (o *Options) WarnInsecure(logger klog.Logger) {
	WarnInsecure(logger, o.MetricsAddr, o.MetricsSecure)
}
