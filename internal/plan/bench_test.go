package plan

import (
	"fmt"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lullscheme"
	"lull.dev/lull/internal/policy"
)

// BenchmarkPlanChanges5000 previews one change set for 5,000 nodes (the
// shipped policy's change rules: two chrony files, a registry host file and
// a changed unit) against the same preview of one class (chrony-config),
// run beside it in the same process: what deciding every change of every
// node adds. Reported per preview of all 5,000 nodes, with the ratio.
func BenchmarkPlanChanges5000(b *testing.B) {
	const nodes = 5000
	p, err := policy.Shipped()
	if err != nil {
		b.Fatal(err)
	}
	objs := []client.Object{p}
	for i := range nodes {
		objs = append(objs, node(fmt.Sprintf("n%04d", i), map[string]string{"pool": "general"}))
	}
	c := crfake.NewClientBuilder().WithScheme(lullscheme.New()).WithObjects(objs...).Build()
	o := DefaultOptions()
	o.Clock = clocktesting.NewFakeClock(t0)
	cl, err := Load(b.Context(), c, o)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Forecast.Stop()
	kube := fake.NewClientset()
	changes := &lullv1alpha1.Changes{
		Files: []string{"/etc/chrony.conf", "/etc/chrony.d/pool.conf", "/etc/containerd/certs.d/registry.example/hosts.toml"},
		Units: []string{"lull-tour.service"},
	}
	sel, err := labels.Parse("pool=general")
	if err != nil {
		b.Fatal(err)
	}
	byChange := Request{Selector: sel, Changes: changes}
	byClass := Request{Selector: sel, Classes: []string{"chrony-config"}}
	type figure struct {
		nsPerOp, bytesPerOp float64
	}
	run := func(b *testing.B, req Request, out *figure) {
		b.ReportAllocs()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for b.Loop() {
			res, err := cl.Preview(b.Context(), c, kube, req)
			if err != nil {
				b.Fatal(err)
			}
			if len(res.Nodes) != nodes {
				b.Fatalf("%d nodes previewed, want %d", len(res.Nodes), nodes)
			}
		}
		runtime.ReadMemStats(&after)
		out.nsPerOp = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		out.bytesPerOp = float64(after.TotalAlloc-before.TotalAlloc) / float64(b.N)
	}
	var class, change figure
	b.Run("class", func(b *testing.B) { run(b, byClass, &class) })
	b.Run("changes", func(b *testing.B) { run(b, byChange, &change) })
	b.Logf("5,000 nodes: changes %.0f ms/op %.1f MB/op, class %.0f ms/op %.1f MB/op; changes/class %.2f (time), %.2f (bytes)",
		change.nsPerOp/1e6, change.bytesPerOp/1e6, class.nsPerOp/1e6, class.bytesPerOp/1e6,
		change.nsPerOp/class.nsPerOp, change.bytesPerOp/class.bytesPerOp)
}
