// Package apirequests counts a component's requests to the API server by
// verb and resource, so an operator (and the fleet-wave benchmark) can see
// what lull sends per node it drains, not only how many requests per
// second client-go sent (rest_client_requests_total has no resource).
package apirequests

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
)

// Counter counts requests by verb, resource and response code.
type Counter struct {
	total *prometheus.CounterVec
}

// New returns a counter registered with reg as lull_api_requests_total.
func New(reg prometheus.Registerer) *Counter {
	c := &Counter{total: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lull_api_requests_total",
		Help: "Requests this component sent to the API server, by verb (get, list, watch, create, update, patch, delete, deletecollection), resource (resource[.group][/subresource]) and HTTP status code.",
	}, []string{"verb", "resource", "code"})}
	reg.MustRegister(c.total)
	return c
}

// Wrap makes every client built from cfg count its requests.
func (c *Counter) Wrap(cfg *rest.Config) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &roundTripper{c: c, next: rt} })
}

type roundTripper struct {
	c    *Counter
	next http.RoundTripper
}

func (t *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	code := "error"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	verb, resource := Classify(req.Method, req.URL.Path, req.URL.Query().Get("watch") == "true")
	t.c.total.WithLabelValues(verb, resource, code).Inc()
	return resp, err
}

// Classify names a request as the API server's audit log would: the verb,
// and the resource as resource[.group][/subresource] ("pods/eviction",
// "nodemaintenances.lull.dev/status"). Paths that are not resources
// (discovery, /healthz) are resource "" with the method's verb.
func Classify(method, path string, watch bool) (verb, resource string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var group string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:] // api, v1
	case len(parts) >= 3 && parts[0] == "apis":
		group, parts = parts[1], parts[3:] // apis, group, version
	default:
		return strings.ToLower(method), ""
	}
	// namespaces/<ns>/<resource>...; but namespaces/<name> and its
	// subresources (status, finalize) are the namespace itself.
	if len(parts) >= 3 && parts[0] == "namespaces" && !(len(parts) == 3 && (parts[2] == "status" || parts[2] == "finalize")) {
		parts = parts[2:]
	}
	if len(parts) == 0 {
		return strings.ToLower(method), ""
	}
	resource = parts[0]
	if group != "" {
		resource += "." + group
	}
	named := len(parts) >= 2
	if len(parts) >= 3 {
		resource += "/" + parts[2]
	}
	return verbOf(method, watch, named), resource
}

// verbOf is the audit log's verb for a request with method to a resource:
// named (one object, not a collection), watch (?watch=true).
func verbOf(method string, watch, named bool) string {
	var verb string
	switch method {
	case http.MethodGet:
		switch {
		case watch:
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
		if !named {
			verb = "deletecollection"
		}
	default:
		verb = strings.ToLower(method)
	}
	return verb
}
