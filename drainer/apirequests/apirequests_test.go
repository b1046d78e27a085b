package apirequests

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/rest"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		method, path   string
		watch          bool
		verb, resource string
	}{
		{"GET", "/api/v1/nodes/n1", false, "get", "nodes"},
		{"GET", "/api/v1/nodes", false, "list", "nodes"},
		{"GET", "/api/v1/nodes", true, "watch", "nodes"},
		{"PATCH", "/api/v1/nodes/n1", false, "patch", "nodes"},
		{"PUT", "/api/v1/nodes/n1/status", false, "update", "nodes/status"},
		{"GET", "/api/v1/namespaces/kube-system/pods", false, "list", "pods"},
		{"POST", "/api/v1/namespaces/kube-system/pods/p/eviction", false, "create", "pods/eviction"},
		{"DELETE", "/api/v1/namespaces/kube-system/pods/p", false, "delete", "pods"},
		{"DELETE", "/api/v1/namespaces/kube-system/pods", false, "deletecollection", "pods"},
		{"GET", "/api/v1/namespaces/lull-system", false, "get", "namespaces"},
		{"GET", "/api/v1/namespaces", false, "list", "namespaces"},
		{"PUT", "/api/v1/namespaces/lull-system/finalize", false, "update", "namespaces/finalize"},
		{"PUT", "/api/v1/namespaces/lull-system/status", false, "update", "namespaces/status"},
		{"PUT", "/api/v1/namespaces/lull-system/configmaps/lull-budget", false, "update", "configmaps"},
		{"POST", "/apis/coordination.k8s.io/v1/namespaces/lull-leases/leases", false, "create", "leases.coordination.k8s.io"},
		{"PUT", "/apis/lull.dev/v1alpha1/nodemaintenances/n1/status", false, "update", "nodemaintenances.lull.dev/status"},
		{"POST", "/apis/events.k8s.io/v1/namespaces/default/events", false, "create", "events.events.k8s.io"},
		{"GET", "/apis/lull.dev/v1alpha1/maintenancewindows", true, "watch", "maintenancewindows.lull.dev"},
		{"GET", "/apis", false, "get", ""},
		{"GET", "/api", false, "get", ""},
		{"GET", "/healthz", false, "get", ""},
	} {
		verb, res := Classify(tc.method, tc.path, tc.watch)
		if verb != tc.verb || res != tc.resource {
			t.Errorf("%s %s (watch %v) = %s %q, want %s %q", tc.method, tc.path, tc.watch, verb, res, tc.verb, tc.resource)
		}
	}
}

// Requests through a wrapped config are counted, failures and all.
func TestWrapCounts(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/nodes/gone" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	reg := prometheus.NewRegistry()
	c := New(reg)
	cfg := &rest.Config{Host: srv.URL}
	c.Wrap(cfg)
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/api/v1/nodes/n1", "/api/v1/nodes/n2", "/api/v1/nodes/gone"} {
		resp, err := (&http.Client{Transport: rt}).Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if got := testutil.ToFloat64(c.total.WithLabelValues("get", "nodes", "200")); got != 2 {
		t.Errorf("get nodes 200 = %v, want 2", got)
	}
	if got := testutil.ToFloat64(c.total.WithLabelValues("get", "nodes", "404")); got != 1 {
		t.Errorf("get nodes 404 = %v, want 1", got)
	}
}
