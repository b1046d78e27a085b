package app

// Red team of commits c7d813c, 76116a0 and f273b5f, the part in
// SetupClusterAPI (drainer/machines' tests cannot import this package).
// SetupClusterAPI runs against a manager stand-in and a stand-in API
// server that answers discovery only (httptest): no cluster, no envtest.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"lull.dev/lull/drainer/machines"
	"lull.dev/lull/internal/capi"
	"lull.dev/lull/internal/lullscheme"
)

// rt3Manager is as much of a manager as SetupClusterAPI and the builder
// use; anything else panics (the embedded nil Manager).
type rt3Manager struct {
	manager.Manager
	cfg   *rest.Config
	c     client.Client
	mu    sync.Mutex
	added []manager.Runnable
}

func (m *rt3Manager) GetConfig() *rest.Config    { return m.cfg }
func (m *rt3Manager) GetScheme() *runtime.Scheme { return m.c.Scheme() }
func (m *rt3Manager) Add(r manager.Runnable) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.added = append(m.added, r)
	return nil
}
func (m *rt3Manager) GetEventRecorder(string) recorder.EventRecorder { return nil }
func (m *rt3Manager) GetClient() client.Client                       { return m.c }
func (m *rt3Manager) GetFieldIndexer() client.FieldIndexer           { return rt3Indexer{} }
func (m *rt3Manager) GetCache() cache.Cache                          { return rt3Cache{} }
func (m *rt3Manager) GetLogger() logr.Logger                         { return logr.Discard() }
func (m *rt3Manager) GetControllerOptions() config.Controller {
	return config.Controller{SkipNameValidation: ptr.To(true)}
}

type rt3Indexer struct{}

func (rt3Indexer) IndexField(context.Context, client.Object, string, client.IndexerFunc) error {
	return nil
}

type rt3Cache struct{ cache.Cache }

// controllerNamed is the reconciler of the controller named name that
// was added to m.
func (m *rt3Manager) controllerNamed(t *testing.T, name string) any {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.added {
		v := reflect.ValueOf(r)
		if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
			continue
		}
		if n := v.Elem().FieldByName("Name"); n.IsValid() && n.Kind() == reflect.String && n.String() == name {
			return v.Elem().FieldByName("Do").Interface()
		}
	}
	t.Fatalf("no controller %s was added", name)
	return nil
}

// discoveryServer answers Cluster API's discovery with serve (counting
// the requests on asked) and anything else with 404.
func discoveryServer(t *testing.T, serve func(w http.ResponseWriter), asked chan<- struct{}) *httptest.Server {
	t.Helper()
	gv := capi.MachineResource.GroupVersion().String()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/apis/"+gv {
			serve(w)
			if asked != nil {
				asked <- struct{}{}
			}
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func servesMachines(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: capi.MachineResource.GroupVersion().String(),
		APIResources: []metav1.APIResource{
			{Name: "machines", Namespaced: true, Kind: "Machine", Verbs: []string{"get", "list", "watch", "patch"}},
			{Name: "clusters", Namespaced: true, Kind: "Cluster", Verbs: []string{"get", "list", "watch", "patch"}},
		},
	})
}

func kubeconfigFor(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: management
  cluster: {server: %q}
users:
- name: lull
  user: {token: not-a-valid-token}
contexts:
- name: management
  context: {cluster: management, user: lull}
current-context: management
`, server)), 0o600))
	return path
}

// v0Logs records what a logger prints by default (verbosity 0: infos
// and errors an operator sees without raising -v).
type v0Logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *v0Logs) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 0})
}

func (l *v0Logs) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// TestRedteam3ClusterFlagHonouredWhenSelfManaged: a self-managed
// management cluster (the default path: no --cluster-api-kubeconfig,
// lull reads Machines from its own API server) commonly manages other
// workload clusters too: clusterctl moves the management into the first
// cluster, which then creates the rest. Their Machines live here; their
// own lulls reach this API server through --cluster-api-kubeconfig. This
// cluster's lull-drainer is given --cluster-api-cluster=ns/c1, which
// validation accepts and SetupClusterAPI drops (only is set only with a
// kubeconfig): its reconcilers get Cluster nil and govern every Machine
// here. Another cluster's deleting governed Machine has no node here, so
// this lull removes its hook before that cluster's lull drains it (what
// 76116a0 fixed for the kubeconfig path), and one whose node name also
// exists here (ip-10-0-1-5.ec2.internal in two VPCs) makes a request
// here, draining this cluster's node for another cluster's Machine. The
// flag must filter in the self-managed case too (or be refused there,
// saying so; but then the docs' "one lull per workload cluster, each with
// its own --cluster-api-cluster" has no answer for this cluster).
func TestRedteam3ClusterFlagHonouredWhenSelfManaged(t *testing.T) {
	srv := discoveryServer(t, servesMachines, nil)
	o := NewOptions()
	o.ClusterAPICluster = "ns/c1"
	require.Empty(t, o.Validate(), "--cluster-api-cluster without --cluster-api-kubeconfig is accepted")

	mgr := &rt3Manager{cfg: &rest.Config{Host: srv.URL}, c: fake.NewClientBuilder().WithScheme(lullscheme.New()).Build()}
	require.NoError(t, SetupClusterAPI(mgr, *o, clocktesting.NewFakeClock(time.Now())))
	require.Len(t, mgr.added, 1, "the runnable that waits for Cluster API")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, mgr.added[0].Start(ctx), "Machines are served: the controllers are set up")

	want := &types.NamespacedName{Namespace: "ns", Name: "c1"}
	mr, ok := mgr.controllerNamed(t, "cluster-api-machines").(*machines.Reconciler)
	require.True(t, ok)
	require.Equal(t, want, mr.Cluster, "--cluster-api-cluster=ns/c1 was given: the Machine controller governs every Machine of the management cluster instead")
	cr, ok := mgr.controllerNamed(t, "cluster-api-clusters").(*machines.ClusterReconciler)
	require.True(t, ok)
	require.Equal(t, want, cr.Cluster, "and the Cluster controller every Cluster")
}

// runUntilAskedTwice runs SetupClusterAPI's runnable until it has asked
// discovery twice (its first answer logged by then), and returns what it
// logged at verbosity 0 and what it returned.
func runUntilAskedTwice(t *testing.T, o *Options, asked chan struct{}) ([]string, error) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Now())
	mgr := &rt3Manager{cfg: &rest.Config{Host: "http://127.0.0.1:1"}, c: fake.NewClientBuilder().WithScheme(lullscheme.New()).Build()}
	require.NoError(t, SetupClusterAPI(mgr, *o, clk), "a management cluster's trouble does not stop lull-drainer from starting")
	require.Len(t, mgr.added, 1)
	var logs v0Logs
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logs.logger()))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- mgr.added[0].Start(ctx) }()
	wait := func(what string) {
		t.Helper()
		select {
		case <-asked:
		case err := <-done:
			t.Fatalf("the runnable returned before %s: %v", what, err)
		case <-time.After(20 * time.Second):
			t.Fatalf("discovery was not asked %s", what)
		}
	}
	wait("the first time")
	clk.Step(time.Minute) // the poll's ticker (clusterAPIPoll)
	wait("again")
	cancel()
	select {
	case err := <-done:
		return logs.all(), err
	case <-time.After(20 * time.Second):
		t.Fatal("the runnable did not stop")
	}
	return nil, nil
}

// TestRedteam3UnreachableManagementClusterIsReported: with
// --cluster-api-kubeconfig, lull-drainer asks the management cluster's
// discovery every 30 s and, when that fails, logs at V(2) only, which no
// default install shows. Credentials that expired or were revoked (401),
// RBAC not granted there (403), or a kubeconfig that reaches a cluster
// without Cluster API (the wrong context: nothing served, not even
// logged) leave lull governing nothing, forever, with nothing in its log
// at its default verbosity. Meanwhile the management cluster's admission
// policy still puts lull's pre-drain hook on every governed Machine of
// this cluster, so each of their deletions (a rollout, a remediation)
// waits at a hook nobody will remove. A management cluster named by
// kubeconfig is expected to serve Machines: failing to reach it is worth
// an operator's attention (a V(0) info or an error), at least once.
func TestRedteam3UnreachableManagementClusterIsReported(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve func(w http.ResponseWriter)
	}{
		{"unauthorized", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status: metav1.StatusFailure, Reason: metav1.StatusReasonUnauthorized, Code: http.StatusUnauthorized, Message: "Unauthorized"})
		}},
		{"forbidden", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status: metav1.StatusFailure, Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden, Message: "forbidden"})
		}},
		{"no Cluster API there", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound, Message: "the server could not find the requested resource"})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := make(chan struct{}, 10)
			srv := discoveryServer(t, tc.serve, asked)
			o := NewOptions()
			o.ClusterAPIKubeconfig, o.ClusterAPICluster = kubeconfigFor(t, srv.URL), "ns/c1"
			logs, err := runUntilAskedTwice(t, o, asked)
			require.NoError(t, err)
			require.NotEmpty(t, logs, "the management cluster at %s cannot be used (%s), and lull-drainer's log says nothing at its default verbosity: it governs nothing, silently", srv.URL, tc.name)
		})
	}
}

// TestRedteam3BadKubeconfigDoesNotStopTheDrainer: a management
// kubeconfig that cannot be read (the Secret's key holds something else:
// a CAPI <cluster>-kubeconfig Secret's "value" copied wrong, a truncated
// paste) makes SetupClusterAPI return an error, setupControllers fail and
// lull-drainer exit, on every restart: a crash-loop that stops every
// node's maintenance here, not only the Machines'. It should say so loudly
// and keep reading the file (a mounted Secret's update reaches it without
// a restart), the rest of lull-drainer running.
func TestRedteam3BadKubeconfigDoesNotStopTheDrainer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, []byte("this is not a kubeconfig: [\n"), 0o600))
	o := NewOptions()
	o.ClusterAPIKubeconfig, o.ClusterAPICluster = path, "ns/c1"
	require.Empty(t, o.Validate())
	mgr := &rt3Manager{cfg: &rest.Config{Host: "http://127.0.0.1:1"}, c: fake.NewClientBuilder().WithScheme(lullscheme.New()).Build()}
	err := SetupClusterAPI(mgr, *o, clocktesting.NewFakeClock(time.Now()))
	require.NoError(t, err, "an unreadable --cluster-api-kubeconfig stops lull-drainer (and its every drain) at each start: a crash-loop")
	require.NotEmpty(t, mgr.added, "the Cluster API runnable keeps trying")
}
