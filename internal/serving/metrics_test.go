package serving

import (
	"crypto/tls"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
)

func TestMetrics(t *testing.T) {
	secure := Metrics(":8443", true, "/certs")
	assert.True(t, secure.SecureServing)
	assert.NotNil(t, secure.FilterProvider, "authentication and authorization filter")
	assert.Equal(t, ":8443", secure.BindAddress)
	assert.Equal(t, "/certs", secure.CertDir)
	cfg := &tls.Config{NextProtos: []string{"h2"}}
	for _, f := range secure.TLSOpts {
		f(cfg)
	}
	assert.Equal(t, []string{"http/1.1"}, cfg.NextProtos, "HTTP/2 off")

	plain := Metrics("127.0.0.1:9090", false, "/certs")
	assert.False(t, plain.SecureServing)
	assert.Nil(t, plain.FilterProvider)
	assert.Empty(t, plain.TLSOpts)
	assert.Equal(t, "127.0.0.1:9090", plain.BindAddress)
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true,
		"[::1]:8080":     true,
		"localhost:8080": true,
		":8080":          false,
		"0.0.0.0:8080":   false,
		"10.0.0.1:8080":  false,
		"0":              false,
	} {
		assert.Equal(t, want, Loopback(addr), addr)
	}
}

// The serving flags default to the component's values and set what the
// metrics server is built from.
func TestOptionsFlags(t *testing.T) {
	o := Options{MetricsAddr: ":8443", MetricsSecure: true, ProbeAddr: ":8081"}
	fs := pflag.NewFlagSet("c", pflag.ContinueOnError)
	o.AddFlags(fs)
	assert.Equal(t, ":8443", fs.Lookup("metrics-bind-address").DefValue)
	assert.Equal(t, "true", fs.Lookup("metrics-secure").DefValue)
	assert.NoError(t, fs.Parse([]string{"--metrics-bind-address=127.0.0.1:9090", "--metrics-secure=false", "--health-probe-bind-address=:9091"}))
	m := o.Metrics()
	assert.Equal(t, "127.0.0.1:9090", m.BindAddress)
	assert.False(t, m.SecureServing)
	assert.Equal(t, ":9091", o.ProbeAddr)
}
