// Package scheduler benchmarks lull-scheduler's NodeDisruption plugin with
// the upstream scheduler_perf harness against the default profile, in one
// run on one machine. See hack/bench-scheduler.sh.
package scheduler

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/kubernetes/pkg/scheduler"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	perf "k8s.io/kubernetes/test/integration/scheduler_perf"
	"k8s.io/kubernetes/test/utils/client-go/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/lease"
	"lull.dev/lull/plugins/nodedisruption"
)

func TestMain(m *testing.M) {
	if err := perf.InitTests(); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	m.Run()
}

// BenchmarkPerfScheduling runs both test cases of performance-config.yaml
// (Default and NodeDisruption) in one invocation; the summary program
// prints the throughput ratio from the data items they write.
func BenchmarkPerfScheduling(b *testing.B) {
	registry := frameworkruntime.Registry{nodedisruption.Name: nodedisruption.New}
	perf.RunBenchmarkPerfScheduling(b, "performance-config.yaml", "lull", registry,
		perf.WithPrepareFn(installLull),
		perf.WithNodeUpdateFn(disruptNodes))
}

// installLull installs lull's CRDs and the lease namespace.
func installLull(tCtx ktesting.TContext) error {
	cfg := tCtx.RESTConfig()
	ext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "manifests", "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs found under manifests/crds: %v", err) //nolint:errorlint // err is nil when the glob matches nothing: %w would print %!w(<nil>)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(tCtx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		if err := wait.PollUntilContextTimeout(tCtx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range got.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			return fmt.Errorf("CRD %s not established: %w", crd.Name, err)
		}
	}
	_, err = tCtx.Client().CoreV1().Namespaces().Create(tCtx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lease.DefaultNamespace}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		err = nil
	}
	return err
}

// disruptNodes leases 20% of the nodes for disruption and requests
// maintenance of another 20% behind a window that opens in 6 hours
// (pending: scored lower, not filtered), then renews a heartbeat Lease per
// node every 10 s in kube-node-lease for the rest of the workload, as
// kubelets would. Workloads named *_Idle get only the heartbeats: the
// plugin's cost with nothing to forecast.
func disruptNodes(tCtx ktesting.TContext, _ *scheduler.Scheduler, w *perf.Workload, nodes *v1.NodeList) error {
	cs := tCtx.Client()
	lc := lease.New(cs, lease.Options{})
	if strings.HasSuffix(w.Name, "_Idle") {
		return startHeartbeats(tCtx, cs, nodes)
	}
	cfg := rest.CopyConfig(tCtx.RESTConfig())
	cfg.ContentType = "application/json" // CRDs have no protobuf encoding
	c, err := client.New(cfg, client.Options{Scheme: lullscheme.New()})
	if err != nil {
		return err
	}
	opens := time.Now().UTC().Add(6 * time.Hour)
	mw := &lullv1alpha1.MaintenanceWindow{
		ObjectMeta: metav1.ObjectMeta{Name: "pending"},
		Spec: lullv1alpha1.MaintenanceWindowSpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{benchPoolLabel: "pending"}},
			Strategy:     lullv1alpha1.StrategySchedule,
			Schedule: &lullv1alpha1.Schedule{TimeZone: "UTC", StartTime: opens.Format("15:04"), Duration: lullv1alpha1.Duration{Duration: time.Hour},
				Recurrence: &lullv1alpha1.Recurrence{Frequency: lullv1alpha1.Daily}},
		},
	}
	if err := c.Create(tCtx, mw); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		switch i % 5 {
		case 0:
			if strings.Contains(tCtx.TB().Name(), "/DefaultTainted_") {
				// The fair baseline: the default profile excludes the same
				// nodes through a taint.
				patch := `{"spec":{"taints":[{"key":"bench/leased","effect":"NoSchedule"}]}}`
				if _, err := cs.CoreV1().Nodes().Patch(tCtx, n.Name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
					return err
				}
				continue
			}
			if _, err := lc.Acquire(tCtx, n.Name, "bench-actor", "reboot", "benchmark", time.Hour); err != nil {
				return err
			}
		case 1:
			patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"kernel-update",%q:"pending"}}}`, lullv1alpha1.MaintenanceLabel, benchPoolLabel)
			if _, err := cs.CoreV1().Nodes().Patch(tCtx, n.Name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
				return err
			}
		}
	}
	return startHeartbeats(tCtx, cs, nodes)
}

const benchPoolLabel = "lull.dev/bench-pool"

func startHeartbeats(tCtx ktesting.TContext, cs kubernetes.Interface, nodes *v1.NodeList) error {
	names := make([]string, len(nodes.Items))
	for i, n := range nodes.Items {
		names[i] = n.Name
		if _, err := cs.CoordinationV1().Leases(v1.NamespaceNodeLease).Create(tCtx, heartbeat(n.Name), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	go heartbeats(tCtx, cs, names)
	return nil
}

func heartbeat(node string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: v1.NamespaceNodeLease},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}
}

// heartbeats renews every node's heartbeat lease once per 10 s, spread
// evenly, until the workload ends.
func heartbeats(ctx context.Context, cs kubernetes.Interface, names []string) {
	if len(names) == 0 {
		return
	}
	tick := time.NewTicker(10 * time.Second / time.Duration(len(names)))
	defer tick.Stop()
	for i := 0; ; i = (i + 1) % len(names) {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		l := heartbeat(names[i])
		if cur, err := cs.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, names[i], metav1.GetOptions{}); err == nil {
			l.ResourceVersion = cur.ResourceVersion
		}
		_, _ = cs.CoordinationV1().Leases(v1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{})
	}
}
