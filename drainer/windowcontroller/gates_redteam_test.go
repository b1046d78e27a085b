package windowcontroller

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
)

// Red team (promise 4): the Secret's url is a path prefix on a shared
// server (a gateway that fronts Prometheus at /prometheus and other
// services elsewhere). credentialsMayGo compares the gate's raw path, but
// drainer/alerts builds the request with url.JoinPath, which cleans "..": a
// gate url of <server>/prometheus/../grafana passes the check and the
// token is sent to <server>/grafana/....
func TestRedteamCredentialsDotSegmentsEscapeThePrefix(t *testing.T) {
	for _, target := range []string{
		"https://mon.example/prometheus/../grafana",
		"https://mon.example/prometheus/./../grafana",
	} {
		t.Run(target, func(t *testing.T) {
			err := credentialsMayGo("https://mon.example/prometheus", nil, target)
			require.Error(t, err, "credentials for https://mon.example/prometheus may go to %s", target)
		})
	}
}

type recorder struct {
	mu   sync.Mutex
	seen []string // "path auth"
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.seen = append(r.seen, req.URL.Path+" "+req.Header.Get("Authorization"))
	r.mu.Unlock()
	w.WriteHeader(http.StatusNotFound)
}

func TestRedteamCredentialsSentOutsideTheirPrefix(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "lull-configs", Name: "prom", Labels: map[string]string{lullv1alpha1.AlertsCredentialsLabel: "true"}},
		Data: map[string][]byte{"token": []byte("s3cret"), "url": []byte(srv.URL + "/prometheus"), "insecure-http": []byte("true")}}
	c := fake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(s).Build()
	r := &Reconciler{Client: c, Secrets: c, SecretNamespace: "lull-configs"}
	mw := &lullv1alpha1.MaintenanceWindow{ObjectMeta: metav1.ObjectMeta{Name: "wave", Generation: 1}, Spec: lullv1alpha1.MaintenanceWindowSpec{
		Gates: &lullv1alpha1.Gates{Alerts: &lullv1alpha1.AlertsGate{URL: srv.URL + "/prometheus/../secret-service", SecretName: "prom"}}}}
	st := &lullv1alpha1.MaintenanceWindowStatus{}
	r.gates(context.Background(), mw, nil, st, time.Date(2026, 11, 25, 10, 5, 0, 0, time.UTC))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, s := range rec.seen {
		path, auth, _ := strings.Cut(s, " ")
		if auth != "" && !strings.HasPrefix(path, "/prometheus/") {
			t.Errorf("the token %q went to %s, outside the Secret's url %s/prometheus", auth, path, srv.URL)
		}
	}
}

// Red team (promise 4, the fix in progress): dot segments are refused by
// name, but servers and gateways that normalise more than Go does still
// resolve these out of the Secret's prefix: "..;" (Tomcat, Spring, Jetty
// path parameters) and a backslash (IIS, some proxies). The check should
// admit only paths it knows stay under the prefix.
func TestRedteamCredentialsServerSideNormalisation(t *testing.T) {
	for _, target := range []string{
		"https://mon.example/prometheus/..;/grafana",
		`https://mon.example/prometheus/..\grafana`,
	} {
		t.Run(target, func(t *testing.T) {
			err := credentialsMayGo("https://mon.example/prometheus", nil, target)
			require.Error(t, err, "credentials for https://mon.example/prometheus may go to %s", target)
		})
	}
}
