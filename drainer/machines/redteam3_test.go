package machines

// Red team of commits c7d813c, 76116a0 and f273b5f (Cluster API: a
// separate management cluster, --cluster-api-kubeconfig with
// --cluster-api-cluster). Each test names an attack on their promises:
// lull acts only on the Machines whose nodes are its own; a governed
// Machine of its own is still handled in every path; nothing is left
// half-done, and nothing fails silently, when the management cluster or
// its configuration is wrong. (Attacks on drainer/app's setup, which this
// package cannot import, are in drainer/app/redteam3_test.go.)

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1alpha1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/capi"
	"lull.dev/lull/internal/options"
)

// TestRedteam3ReusedKeyEndsOurRequest: this lull (Cluster ns/c1) drained
// node n1 for its Machine ns/m (uid-old) and holds it (Drained: cordon,
// node lease, budget slot) until the node is gone. The Machine is gone
// but its node outlived it (Cluster API's node deletion timed out, or the
// Machine's delete event was missed while lull-drainer restarted), and
// the management cluster, which names Machines for all its workload
// clusters in shared namespaces, now has a Machine ns/m of another
// Cluster (ns/c2). Reconcile(ns/m) finds it, sees it is not of ns/c1 and
// returns before endRequestsOf: the request made for the Machine that no
// longer exists is never ended. n1 stays cordoned and leased and the
// budget slot taken for good, a half-done request nothing reports.
// endRequestsOf only touches this cluster's own requests for that key
// with another UID, so it belongs before the filter (as the NotFound path
// already runs it for any key).
func TestRedteam3ReusedKeyEndsOurRequest(t *testing.T) {
	old := ourRequest("n1", "m", lullv1alpha1.PhaseDrained)
	old.Annotations[capi.MachineUIDAnnotation] = "uid-old"
	theirs := newTestMachine("m", governed, hooked, onNode("n7"), func(m *unstructured.Unstructured) {
		m.SetLabels(map[string]string{capi.GovernedLabel: "true", capi.ClusterNameLabel: "c2"})
	})
	_, mgmt := newFixture(t, theirs)
	r, local := newFixture(t, node("n1"), old)
	r.Machines, r.Cluster = mgmt, &types.NamespacedName{Namespace: "ns", Name: "c1"}

	reconcileMachine(t, r, "m")

	require.True(t, capi.HasHook(get(t, mgmt, "m")), "the other cluster's Machine is left alone")
	var nm lullv1alpha1.NodeMaintenance
	err := local.Get(context.Background(), client.ObjectKey{Name: "n1"}, &nm)
	if apierrors.IsNotFound(err) {
		return
	}
	require.NoError(t, err)
	require.True(t, nm.Spec.Complete || nm.DeletionTimestamp != nil,
		"the request for the gone Machine ns/m (uid-old) still holds node n1 (%s): its key now names another cluster's Machine, and lull never ends it", nm.Status.Phase)
}

// TestRedteam3ClusterFlagIsValidatedAsAName: --cluster-api-cluster is
// checked only for a slash with something on each side. A value that can
// never name a Cluster ("ns/c1/x", a name with a space or capitals, a
// trailing space from a values file) passes, and lull-drainer starts,
// governing nothing: ofCluster matches no Machine, so its Machines'
// deletions wait at the hook the admission policy put on them forever,
// and nothing says why. The namespace and name are DNS labels / subdomains
// (Cluster API requires a DNS-1035 label for a Cluster's name).
func TestRedteam3ClusterFlagIsValidatedAsAName(t *testing.T) {
	for _, bad := range []string{"ns/c1/x", "ns/c 1", "ns/C1", "ns/c1 ", " ns/c1", "NS/c1", "ns/-c1"} {
		o := options.NewDrainer()
		o.ClusterAPIKubeconfig = "/etc/lull/cluster-api/kubeconfig"
		o.ClusterAPICluster = bad
		var named bool
		for _, err := range o.Validate() {
			named = named || strings.Contains(err.Error(), "--cluster-api-cluster")
		}
		require.True(t, named, "--cluster-api-cluster=%q names no Cluster there can be: lull would govern nothing, silently", bad)
	}
	o := options.NewDrainer()
	o.ClusterAPIKubeconfig, o.ClusterAPICluster = "/etc/lull/cluster-api/kubeconfig", "capi-workloads/prod-eu-1"
	require.Empty(t, o.Validate(), "the control: a good name passes")
}
