// Package serving holds how lull's components serve their metrics: one
// decision for lull-drainer and lull-agent (HTTPS behind the API server's
// authentication and authorization, or plain HTTP on loopback only).
package serving

import (
	"crypto/tls"
	"net"

	"k8s.io/klog/v2"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Metrics configures a metrics endpoint on addr. Secure, it is what
// kubebuilder projects ship: HTTPS, and every request's bearer token checked
// with a TokenReview and its right to get /metrics with a
// SubjectAccessReview (Reviews; the component's ClusterRole allows it to create both;
// the ClusterRole lull-metrics-reader grants the right to scrape). HTTP/2 is
// off, as in kubebuilder's scaffold: its stream handling has had
// denial-of-service flaws (CVE-2023-44487) and metrics do not need it.
// certDir holds tls.crt and tls.key; empty, a self-signed certificate is
// generated in memory.
func Metrics(addr string, secure bool, certDir string) metricsserver.Options {
	m := metricsserver.Options{BindAddress: addr}
	if !secure {
		return m
	}
	m.SecureServing = true
	m.FilterProvider = ReviewsProvider
	m.CertDir = certDir
	m.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	return m
}

// WarnInsecure logs a warning when metrics are served over plain HTTP on an
// address other than loopback: anyone who reaches it reads them.
func WarnInsecure(logger klog.Logger, addr string, secure bool) {
	if !secure && addr != "0" && addr != "" && !Loopback(addr) {
		logger.Info("Warning: metrics served over plain HTTP without authentication on a non-loopback address", "address", addr)
	}
}

// Loopback reports whether a bind address listens on loopback only.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
